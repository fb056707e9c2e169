/* SPDX-License-Identifier: MIT */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda-api.h"
#include "criu-rpc.h"
#include "error.h"
#include "util.h"

static void wrap_and_hint(void **state)
{
	struct stasis_error *err = NULL;
	char *line;

	(void)state;
	assert_int_equal(
	    stasis_error_set(&err, ENOENT, STASIS_DOMAIN_IMAGE, 0, "no %s", "manifest"), -ENOENT);
	/* The first error is the cause and is kept. */
	assert_int_equal(stasis_error_set(&err, EIO, STASIS_DOMAIN_CRIU, 3, "later"), -ENOENT);
	assert_int_equal(stasis_error_wrap(&err, "restore from %s", "/img"), -ENOENT);
	stasis_error_hint(&err, "checkpoint again");
	line = stasis_error_format(err);
	assert_string_equal(line, "restore from /img: no manifest (checkpoint again)");
	free(line);
	stasis_error_free(err);
}

static void one_line(void **state)
{
	struct stasis_error *err = NULL;
	char *line;

	(void)state;
	stasis_error_set(&err, EIO, STASIS_DOMAIN_CRIU, 1, "criu said\nsomething\n");
	line = stasis_error_format(err);
	assert_null(strchr(line, '\n'));
	free(line);
	stasis_error_free(err);
	assert_int_equal(stasis_error_set(NULL, EPERM, STASIS_DOMAIN_USAGE, 0, "x"), -EPERM);
	stasis_error_free(NULL);
}

static void versions_and_sizes(void **state)
{
	char buf[32];

	(void)state;
	assert_string_equal(criu_version_string(40101, buf, sizeof(buf)), "4.1.1");
	assert_string_equal(criu_version_string(31701, buf, sizeof(buf)), "3.17.1");
	assert_string_equal(format_bytes(512, buf, sizeof(buf)), "512 B");
	assert_string_equal(format_bytes(4ull << 30, buf, sizeof(buf)), "4.0 GiB");
}

static void uuids(void **state)
{
	struct cuda_uuid u;
	char text[41];

	(void)state;
	assert_int_equal(cuda_uuid_parse("GPU-01234567-89ab-cdef-0123-456789abcdef", &u), 0);
	assert_int_equal(u.bytes[0], 0x01);
	assert_int_equal(u.bytes[15], 0xef);
	cuda_uuid_format(&u, text);
	assert_string_equal(text, "GPU-01234567-89ab-cdef-0123-456789abcdef");
	assert_true(cuda_uuid_parse("GPU-0123", &u) < 0);
	assert_true(cuda_uuid_parse("GPU-01234567-89ab-cdef-0123-456789abcdefff", &u) < 0);
	assert_true(cuda_uuid_parse("zz234567-89ab-cdef-0123-456789abcdef", &u) < 0);
}

/* grow_array: first size from empty, doubling when full, the same array
 * while there is room, and a size that would overflow refused. */
static void growing_arrays(void **state)
{
	size_t cap = 0, n = 0;
	int *a = NULL, *b;

	(void)state;
	a = grow_array(a, n, &cap, sizeof(*a), 4);
	assert_non_null(a);
	assert_int_equal(cap, 4);
	for (n = 0; n < 4; n++)
		a[n] = (int)n;
	assert_ptr_equal(grow_array(a, 3, &cap, sizeof(*a), 4), a);
	b = grow_array(a, n, &cap, sizeof(*a), 4);
	assert_non_null(b);
	assert_int_equal(cap, 8);
	assert_int_equal(b[3], 3);
	cap = SIZE_MAX / 2 + 1;
	assert_null(grow_array(b, cap, &cap, sizeof(*b), 4));
	assert_int_equal(cap, SIZE_MAX / 2 + 1);
	free(b);
}

/* The summary of a failed CRIU's log: its last error lines, without an
 * error CRIU goes on after, which would push the cause out. */
static void criu_log_summary(void **state)
{
	char path[] = "/tmp/stasis-unit-criu-log-XXXXXX";
	int fd = mkstemp(path);
	const char log[] =
	    "(00.000595) Error (criu/util.c:1534): rlimit: Can't setup RLIMIT_NOFILE "
	    "for self: Operation not permitted\n"
	    "(00.001000) Dumping task\n"
	    "(00.207000) Error (compel/src/lib/infect.c:417): Unable to detach\n"
	    "(00.208000) Error (criu/cr-dump.c:1998): Dumping FAILED.\n";
	char *summary;

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(write(fd, log, strlen(log)), (ssize_t)strlen(log));
	close(fd);
	summary = criu_log_errors(path, 3);
	unlink(path);
	assert_non_null(summary);
	assert_string_equal(summary, "Error (compel/src/lib/infect.c:417): Unable to detach | "
				     "Error (criu/cr-dump.c:1998): Dumping FAILED.");
	free(summary);
}

/* The first line that names a cause leads the summary, where the echoes
 * of the failure after it would push it out of the last lines. */
static void criu_log_summary_cause_first(void **state)
{
	char path[] = "/tmp/stasis-unit-criu-log-XXXXXX";
	int fd = mkstemp(path);
	const char log[] =
	    "(00.012206)  27057: Error (criu/files-reg.c:2294): Can't restore the deleted file "
	    "dev/shm/x: a file of that name is in the way\n"
	    "(00.012213)  27057: Error (criu/files.c:1221): Unable to open fd=3 id=0xb\n"
	    "(00.012327) Error (criu/cr-restore.c:2334): Restoring FAILED.\n"
	    "(00.012400) Error (criu/cr-restore.c:1269): 27057 killed by signal 9: Killed\n";
	char *summary;

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(write(fd, log, strlen(log)), (ssize_t)strlen(log));
	close(fd);
	summary = criu_log_errors(path, 3);
	unlink(path);
	assert_non_null(summary);
	assert_string_equal(summary,
			    "27057: Error (criu/files-reg.c:2294): Can't restore the deleted file "
			    "dev/shm/x: a file of that name is in the way | "
			    "Error (criu/cr-restore.c:2334): Restoring FAILED. | "
			    "Error (criu/cr-restore.c:1269): 27057 killed by signal 9: Killed");
	free(summary);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(wrap_and_hint),
	    cmocka_unit_test(one_line),
	    cmocka_unit_test(versions_and_sizes),
	    cmocka_unit_test(uuids),
	    cmocka_unit_test(growing_arrays),
	    cmocka_unit_test(criu_log_summary),
	    cmocka_unit_test(criu_log_summary_cause_first),
	};

	return cmocka_run_group_tests_name("error", tests, NULL, NULL);
}
