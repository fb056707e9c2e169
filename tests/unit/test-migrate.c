/* SPDX-License-Identifier: MIT */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "migrate.h"
#include "stream.h"
#include "wire.h"

static void header_round_trip(void **state)
{
	struct wire_header h = {.type = WIRE_DATA, .flags = WIRE_PACKED, .len = 12345}, back;
	unsigned char buf[WIRE_HEADER_LEN];

	(void)state;
	wire_header_encode(&h, buf);
	assert_memory_equal(buf, "STM1", 4);
	assert_int_equal(wire_header_decode(buf, &back), 0);
	assert_int_equal(back.type, WIRE_DATA);
	assert_int_equal(back.flags, WIRE_PACKED);
	assert_int_equal(back.len, 12345);
}

static void header_refused(void **state)
{
	struct wire_header h = {.type = WIRE_HELLO, .len = 1}, back;
	unsigned char buf[WIRE_HEADER_LEN];

	(void)state;
	wire_header_encode(&h, buf);
	buf[0] = 'X'; /* not our magic: a TLS-less or foreign peer */
	assert_int_equal(wire_header_decode(buf, &back), -EPROTO);
	wire_header_encode(&h, buf);
	buf[4] = WIRE_TYPE_END;
	assert_int_equal(wire_header_decode(buf, &back), -EPROTO);
	buf[4] = 0;
	assert_int_equal(wire_header_decode(buf, &back), -EPROTO);
	h.len = WIRE_MAX_PAYLOAD + 1;
	wire_header_encode(&h, buf);
	assert_int_equal(wire_header_decode(buf, &back), -EPROTO);
	h.len = WIRE_MAX_PAYLOAD;
	wire_header_encode(&h, buf);
	assert_int_equal(wire_header_decode(buf, &back), 0);
}

static void addresses(void **state)
{
	char host[64], port[8];

	(void)state;
	assert_int_equal(wire_split_addr("10.0.0.2:7070", host, sizeof(host), port, sizeof(port)),
			 0);
	assert_string_equal(host, "10.0.0.2");
	assert_string_equal(port, "7070");
	assert_int_equal(wire_split_addr("[fd00::2]:1", host, sizeof(host), port, sizeof(port)), 0);
	assert_string_equal(host, "fd00::2");
	assert_string_equal(port, "1");
	assert_int_equal(wire_split_addr("gpu-b:65535", host, sizeof(host), port, sizeof(port)), 0);
	static const char *const bad[] = {
	    "nohostport",   ":7070",	     "host:", "host:0", "host:65536", "host:7x",
	    "fd00::2:7070", "[fd00::2]7070", "[]:1",  "",	NULL};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(wire_split_addr(bad[i], host, sizeof(host), port, sizeof(port)),
				 -EINVAL);
}

static void key_checks(void **state)
{
	struct stasis_error *err = NULL;

	(void)state;
	assert_int_equal(wire_key_check("k", S_IFREG | 0600, 32, &err), 0);
	assert_int_equal(wire_key_check("k", S_IFREG | 0400, 4096, &err), 0);
	assert_int_equal(wire_key_check("k", S_IFREG | 0644, 32, &err), -EPERM);
	assert_non_null(strstr(err->message, "readable by others (mode 0644)"));
	assert_non_null(strstr(err->hint, "chmod 600"));
	stasis_error_free(err);
	err = NULL;
	assert_int_equal(wire_key_check("k", S_IFREG | 0640, 64, NULL), -EPERM);
	assert_int_equal(wire_key_check("k", S_IFREG | 0600, 31, &err), -EINVAL);
	assert_non_null(strstr(err->message, "fewer than 32"));
	stasis_error_free(err);
	assert_int_equal(wire_key_check("k", S_IFREG | 0600, 4097, NULL), -EINVAL);
	assert_int_equal(wire_key_check("k", S_IFDIR | 0700, 64, NULL), -EINVAL);
}

static void key_file(void **state)
{
	char path[] = "/tmp/stasis-unit-key-XXXXXX";
	struct stasis_error *err = NULL;
	unsigned char *key = NULL;
	size_t len = 0;
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	/* A key is bytes: 31 random ones and a line end are 32 of secret,
	 * taken whole (a random key ends so 1 time in 128). */
	assert_int_equal(write(fd, "0123456789abcdef0123456789abcd\r\n", 32), 32);
	close(fd);
	chmod(path, 0600);
	assert_int_equal(wire_key_load(path, &key, &len, &err), 0);
	assert_int_equal(len, 32);
	assert_memory_equal(key + 30, "\r\n", 2);
	free(key);
	chmod(path, 0604);
	assert_int_equal(wire_key_load(path, &key, &len, NULL), -EPERM);
	truncate(path, 20);
	chmod(path, 0600);
	assert_int_equal(wire_key_load(path, &key, &len, NULL), -EINVAL);
	unlink(path);
	assert_int_equal(wire_key_load(path, &key, &len, &err), -ENOENT);
	stasis_error_free(err);
}

static void names_and_options(void **state)
{
	enum stasis_compress c;

	(void)state;
	assert_true(wire_name_ok("pages-1.img"));
	assert_true(wire_name_ok("stasis-nvidia-file-3"));
	assert_false(wire_name_ok("../etc/passwd"));
	assert_false(wire_name_ok("a/b"));
	assert_false(wire_name_ok(".hidden"));
	assert_false(wire_name_ok(""));
	assert_false(wire_name_ok("sp ace"));
	assert_int_equal(stasis_compress_parse("auto", &c), 0);
	assert_int_equal(c, STASIS_COMPRESS_AUTO);
	assert_int_equal(stasis_compress_parse("off", &c), 0);
	assert_int_equal(c, STASIS_COMPRESS_OFF);
	assert_int_equal(stasis_compress_parse("on", &c), 0);
	assert_int_equal(c, STASIS_COMPRESS_ON);
	assert_int_equal(stasis_compress_parse("yes", &c), -EINVAL);
	assert_int_equal(stasis_compress_parse(NULL, &c), -EINVAL);
}

static void compression_pays(void **state)
{
	(void)state;
	/* Before the link's cost is known: a tenth saved pays. */
	assert_true(stream_sample_pays(STASIS_COMPRESS_AUTO, 65536, 20000, 1.0, 0));
	assert_true(stream_sample_pays(STASIS_COMPRESS_AUTO, 65536, 65536 - 6554, 1.0, 0));
	assert_false(stream_sample_pays(STASIS_COMPRESS_AUTO, 65536, 65536 - 6000, 1.0, 0));
	assert_false(stream_sample_pays(STASIS_COMPRESS_AUTO, 65536, 65600, 0.1, 0));
	assert_true(stream_sample_pays(STASIS_COMPRESS_ON, 65536, 65600, 9.0, 0.1));
	assert_false(stream_sample_pays(STASIS_COMPRESS_OFF, 65536, 1, 0.01, 9.0));
	/* A link of 0.2 ns a byte (5 GB/s): 12% saved at 1.5 ns a byte does
	 * not pay, zero pages (99% saved at 0.05 ns a byte) do; on a link of
	 * 8 ns a byte (1 Gbit/s) half saved at 1.5 ns a byte pays, 12% not. */
	assert_false(stream_sample_pays(STASIS_COMPRESS_AUTO, 65536, 57671, 1.5, 0.2));
	assert_true(stream_sample_pays(STASIS_COMPRESS_AUTO, 65536, 600, 0.05, 0.2));
	assert_false(stream_sample_pays(STASIS_COMPRESS_AUTO, 65536, 57671, 1.5, 8.0));
	assert_true(stream_sample_pays(STASIS_COMPRESS_AUTO, 65536, 30000, 1.5, 8.0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(header_round_trip), cmocka_unit_test(header_refused),
	    cmocka_unit_test(addresses),	 cmocka_unit_test(key_checks),
	    cmocka_unit_test(key_file),		 cmocka_unit_test(names_and_options),
	    cmocka_unit_test(compression_pays),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
