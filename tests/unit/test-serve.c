/* SPDX-License-Identifier: MIT */
/* The FUSE folder that serves files while they are filled: a read must
 * wait for its bytes, give exactly them, and fail once no more will come;
 * what was read is given back, and reading it again fails. Mounting needs
 * root and /dev/fuse; without them the tests skip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "image-serve.h"

#define MIB (1u << 20)
#define FILE_LEN (8 * MIB + 12288) /* not a whole number of reads */

static char mnt[64];
static unsigned char *data, *expect; /* served, and a copy */
static struct serve_file files[2];
static struct image_server *server;

static int setup(void **state)
{
	(void)state;
	snprintf(mnt, sizeof(mnt), "/tmp/stasis-test-serve-XXXXXX");
	assert_non_null(mkdtemp(mnt));
	data = mmap(NULL, FILE_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	expect = malloc(FILE_LEN);
	assert_true(data != MAP_FAILED && expect);
	for (size_t i = 0; i < FILE_LEN; i++)
		data[i] = (unsigned char)((i * 2654435761u) >> 11);
	memcpy(expect, data, FILE_LEN);
	memset(files, 0, sizeof(files));
	snprintf(files[0].name, sizeof(files[0].name), "pages-1.img");
	files[0].data = data;
	files[0].size = FILE_LEN;
	snprintf(files[1].name, sizeof(files[1].name), "pages-2.img");
	files[1].data = data;
	files[1].size = MIB;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	image_serve_stop(server);
	server = NULL;
	rmdir(mnt);
	munmap(data, FILE_LEN);
	free(expect);
	return 0;
}

static bool start_or_skip(void)
{
	int r = image_serve_start(mnt, files, 2, &server);

	if (r == -EPERM || r == -ENOENT || r == -ENODEV || r == -EACCES) {
		fprintf(stderr, "no FUSE here (%s): skipped\n", strerror(-r));
		return false;
	}
	assert_int_equal(r, 0);
	return r == 0;
}

/* Serves pages-1.img whole and opens it; -1 when there is no FUSE here. */
static int open_served(void)
{
	char path[4096];
	int fd;

	if (!start_or_skip())
		return -1;
	image_serve_ready(server, 0, FILE_LEN);
	snprintf(path, sizeof(path), "%s/pages-1.img", mnt);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	return fd;
}

struct reader {
	const char *name;
	size_t off, len;
	unsigned char *buf;
	ssize_t got;
	int error;
	atomic_bool done;
};

static void *read_file(void *arg)
{
	struct reader *rd = arg;
	char path[4096];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", mnt, rd->name);
	fd = open(path, O_RDONLY);
	rd->got = fd < 0 ? -1 : pread(fd, rd->buf, rd->len, (off_t)rd->off);
	rd->error = rd->got < 0 ? errno : 0;
	if (fd >= 0)
		close(fd);
	atomic_store(&rd->done, true);
	return NULL;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

/* A read past what is ready waits; it returns the right bytes once they
 * come, including a short last read. */
static void read_waits_for_its_bytes(void **state)
{
	struct reader rd = {.name = "pages-1.img", .off = 5 * MIB, .len = 4 * MIB};
	pthread_t t;

	(void)state;
	if (!start_or_skip())
		return;
	rd.buf = malloc(rd.len);
	image_serve_ready(server, 0, 6 * MIB);
	assert_int_equal(pthread_create(&t, NULL, read_file, &rd), 0);
	sleep_ms(200);
	assert_false(atomic_load(&rd.done));
	image_serve_ready(server, 0, FILE_LEN);
	pthread_join(t, NULL);
	assert_int_equal(rd.got, FILE_LEN - 5 * MIB);
	assert_memory_equal(rd.buf, expect + 5 * MIB, (size_t)rd.got);
	free(rd.buf);
}

/* The whole file in one preadv of several buffers, as CRIU's restorer
 * reads: every byte where it belongs. */
static void whole_file_in_one_preadv(void **state)
{
	unsigned char *buf = malloc(FILE_LEN);
	struct iovec iov[3] = {
	    {buf, 12288}, {buf + 12288, 3 * MIB}, {buf + 12288 + 3 * MIB, 5 * MIB}};
	struct stat st;
	int fd;

	(void)state;
	if ((fd = open_served()) < 0) {
		free(buf);
		return;
	}
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, FILE_LEN);
	assert_int_equal(preadv(fd, iov, 3, 0), FILE_LEN);
	assert_memory_equal(buf, expect, FILE_LEN);
	close(fd);
	free(buf);
}

/* Once no more bytes will come, a waiting read fails, and so does the
 * next; writing and unknown names are refused. */
static void fail_wakes_readers(void **state)
{
	struct reader rd = {.name = "pages-2.img", .off = 0, .len = MIB};
	char path[4096];
	pthread_t t;

	(void)state;
	if (!start_or_skip())
		return;
	rd.buf = malloc(rd.len);
	assert_int_equal(pthread_create(&t, NULL, read_file, &rd), 0);
	sleep_ms(100);
	assert_false(atomic_load(&rd.done));
	image_serve_fail(server);
	pthread_join(t, NULL);
	assert_int_equal(rd.got, -1);
	assert_int_equal(rd.error, EIO);
	snprintf(path, sizeof(path), "%s/pages-2.img", mnt);
	assert_true(open(path, O_WRONLY) < 0);
	snprintf(path, sizeof(path), "%s/pages-3.img", mnt);
	assert_true(open(path, O_RDONLY) < 0);
	assert_int_equal(errno, ENOENT);
	free(rd.buf);
}

/* A block read whole is given back, and reading it again fails rather
 * than give zeros; a block of which a part was read twice stays, and so
 * does one read into memory cut elsewhere than at its pages. */
static void read_blocks_are_given_back(void **state)
{
	unsigned char *buf = aligned_alloc(4096, SERVE_BLOCK); /* as CRIU reads */
	int fd;

	(void)state;
	if ((fd = open_served()) < 0) {
		free(buf);
		return;
	}
	assert_int_equal(pread(fd, buf, SERVE_BLOCK, 0), SERVE_BLOCK);
	assert_memory_equal(buf, expect, SERVE_BLOCK);
	/* Given back (so reading as zeros) just after the reply. */
	for (int i = 0; i < 100 && data[4096]; i++)
		sleep_ms(10);
	assert_int_equal(data[4096], 0);
	assert_int_equal(pread(fd, buf, 4096, 4096), -1);
	assert_int_equal(errno, EIO);
	assert_int_equal(pread(fd, buf, MIB, SERVE_BLOCK), MIB);
	assert_int_equal(pread(fd, buf, MIB, SERVE_BLOCK), MIB);
	assert_int_equal(pread(fd, buf, MIB, SERVE_BLOCK + MIB), MIB);
	assert_memory_equal(buf, expect + SERVE_BLOCK + MIB, MIB);
	assert_memory_equal(data + SERVE_BLOCK, expect + SERVE_BLOCK, SERVE_BLOCK);
	assert_int_equal(pread(fd, buf + 100, SERVE_BLOCK - 100, 2 * SERVE_BLOCK),
			 SERVE_BLOCK - 100);
	assert_int_equal(pread(fd, buf, 100, 3 * SERVE_BLOCK - 100), 100);
	assert_memory_equal(data + 2 * SERVE_BLOCK, expect + 2 * SERVE_BLOCK, SERVE_BLOCK);
	close(fd);
	free(buf);
}

/* The writer may wait while more than the limit is ready and unread and
 * the reader keeps reading; never before the first read, nor while a read
 * waits for its bytes. */
static void ahead_only_while_reading(void **state)
{
	struct reader rd = {.name = "pages-2.img", .off = 0, .len = MIB};
	unsigned char *buf = malloc(MIB);
	char path[4096];
	pthread_t t;
	int fd;

	(void)state;
	if (!start_or_skip()) {
		free(buf);
		return;
	}
	rd.buf = malloc(rd.len);
	image_serve_ready(server, 0, 6 * MIB);
	assert_false(image_serve_ahead(server, 0, MIB));
	snprintf(path, sizeof(path), "%s/pages-1.img", mnt);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, buf, MIB, 0), MIB);
	assert_true(image_serve_ahead(server, 0, MIB));
	assert_false(image_serve_ahead(server, 0, 5 * MIB));
	/* Another file's lead is its own. */
	assert_false(image_serve_ahead(server, 1, MIB));
	assert_int_equal(pthread_create(&t, NULL, read_file, &rd), 0);
	sleep_ms(100);
	assert_false(atomic_load(&rd.done));
	assert_false(image_serve_ahead(server, 0, MIB));
	image_serve_ready(server, 1, MIB);
	pthread_join(t, NULL);
	assert_int_equal(rd.got, MIB);
	assert_true(image_serve_ahead(server, 0, MIB));
	image_serve_ready(server, 1, 4 * MIB);
	assert_true(image_serve_ahead(server, 1, 2 * MIB));
	close(fd);
	free(rd.buf);
	free(buf);
}

/* Stopping does not wait for a reader that keeps a file open: the
 * connection ends with the server, and the open file reads no more. */
static void stop_with_a_file_open(void **state)
{
	char c;
	int fd;

	(void)state;
	if ((fd = open_served()) < 0)
		return;
	assert_int_equal(pread(fd, &c, 1, 0), 1);
	image_serve_stop(server);
	server = NULL;
	assert_int_equal(pread(fd, &c, 1, 1), -1);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(read_waits_for_its_bytes, setup, teardown),
	    cmocka_unit_test_setup_teardown(whole_file_in_one_preadv, setup, teardown),
	    cmocka_unit_test_setup_teardown(fail_wakes_readers, setup, teardown),
	    cmocka_unit_test_setup_teardown(read_blocks_are_given_back, setup, teardown),
	    cmocka_unit_test_setup_teardown(ahead_only_while_reading, setup, teardown),
	    cmocka_unit_test_setup_teardown(stop_with_a_file_open, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
