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
#include "criu-causes.h"
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
	err = NULL;
	/* A preflight refusal ends with its check's code, after the hint. */
	stasis_error_set(&err, ENOTSUP, STASIS_DOMAIN_CUDA, 0, "PID 1 is a rank");
	stasis_error_hint(&err, "start it with stasis run");
	assert_int_equal(stasis_error_cause(&err, "nccl"), -ENOTSUP);
	line = stasis_error_format(err);
	assert_string_equal(line, "PID 1 is a rank (start it with stasis run) [preflight: nccl]");
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

/* The cause of a failed CRIU run, as each log gives it: the line that
 * names it (after an error CRIU goes on after, before the echoes of the
 * failure) and the remedy. A table: one row per cause. */
static void criu_causes(void **state)
{
	static const struct {
		const char *log, *line, *remedy;
	} cases[] = {
	    /* No rule: the first line naming a cause, not an echo after it. */
	    {"(00.000595) Error (criu/util.c:1534): rlimit: Can't setup RLIMIT_NOFILE for self: "
	     "Operation not permitted\n"
	     "(00.001000) Dumping task\n"
	     "(00.207000) Error (compel/src/lib/infect.c:417): Unable to detach\n"
	     "(00.208000) Error (criu/cr-dump.c:1998): Dumping FAILED.\n",
	     "Error (compel/src/lib/infect.c:417): Unable to detach", NULL},
	    {"(00.012206)  27057: Error (criu/files-reg.c:2294): Can't restore the deleted file "
	     "dev/shm/x: a file of that name is in the way\n"
	     "(00.012213)  27057: Error (criu/files.c:1221): Unable to open fd=3 id=0xb\n"
	     "(00.012327) Error (criu/cr-restore.c:2334): Restoring FAILED.\n",
	     "27057: Error (criu/files-reg.c:2294): Can't restore the deleted file dev/shm/x: a "
	     "file of that name is in the way",
	     NULL},
	    /* Only echoes: the last. */
	    {"(00.1) Error (criu/cr-restore.c:2334): Restoring FAILED.\n",
	     "Error (criu/cr-restore.c:2334): Restoring FAILED.", NULL},
	    {"(00.1) nothing went wrong\n", NULL, NULL},
	    /* A file deleted since the checkpoint. */
	    {"(00.1) 9: Error (criu/files-reg.c:2353): Can't open file tmp/w/data on restore: No "
	     "such file or directory\n"
	     "(00.1) 9: Error (criu/files.c:1221): Unable to open fd=3 id=0x17\n",
	     "9: Error (criu/files-reg.c:2353): Can't open file tmp/w/data on restore: No such "
	     "file or directory",
	     "a file the process had open is gone"},
	    {"(00.1) 9: Error (criu/files-reg.c:2180): File tmp/w/data has bad size 3 (expect 9)\n",
	     "9: Error (criu/files-reg.c:2180): File tmp/w/data has bad size 3 (expect 9)",
	     "a file the process had open is gone"},
	    /* A device that is not here. */
	    {"(00.1) 9: Error (criu/files-reg.c:2353): Can't open file dev/nvidia3 on restore: No "
	     "such file or directory\n",
	     "9: Error (criu/files-reg.c:2353): Can't open file dev/nvidia3 on restore: No such "
	     "file or directory",
	     "a device the process had open is missing here"},
	    {"(00.1) Error (criu/files-ext.c:94): Can't dump file 4 of that type [20600] (chr "
	     "10:229)\n",
	     "Error (criu/files-ext.c:94): Can't dump file 4 of that type [20600] (chr 10:229)",
	     "a device that CRIU cannot save"},
	    /* An outside unix socket: the line before says which. */
	    {"(00.1) \tRunaway socket: ino 77 peer_ino 78 family    1 type    1 state  1 name "
	     "/run/x.sock\n"
	     "(00.1) Error (criu/sk-unix.c:874): External socket is used. Consider using "
	     "--ext-unix-sk option.\n"
	     "(00.1) Error (criu/cr-dump.c:2093): Dumping FAILED.\n",
	     "Error (criu/sk-unix.c:874): External socket is used. Consider using --ext-unix-sk "
	     "option. (Runaway socket: ino 77 peer_ino 78 family 1 type 1 state 1 name "
	     "/run/x.sock)",
	     "checkpoint and restore with --ext-unix-sk"},
	    {"(00.1) Error (criu/sk-unix.c:1912): External socket found in image. Consider using "
	     "the --ext-unix-sk option to allow restoring it.\n",
	     "Error (criu/sk-unix.c:1912): External socket found in image. Consider using the "
	     "--ext-unix-sk option to allow restoring it.",
	     "restore with --ext-unix-sk"},
	    {"(00.1) Error (criu/sk-unix.c:881): Can't dump half of stream unix connection. name: "
	     "/run/a; peer name: /run/b\n",
	     "Error (criu/sk-unix.c:881): Can't dump half of stream unix connection. name: /run/a; "
	     "peer name: /run/b",
	     "checkpoint both ends in one tree"},
	    /* A mount the tree's namespace does not have. */
	    {"(00.1) Error (criu/files-reg.c:1790): Can't lookup mount=24 for fd=0 "
	     "path=/dev/null\n",
	     "Error (criu/files-reg.c:1790): Can't lookup mount=24 for fd=0 path=/dev/null",
	     "on a mount outside the tree's mount namespace"},
	    /* A shell job, both ways CRIU says it. */
	    {"(00.1) Error (criu/pstree.c:304): The root process 5 is not a session leader. "
	     "Consider using --shell-job option\n",
	     "Error (criu/pstree.c:304): The root process 5 is not a session leader. Consider "
	     "using "
	     "--shell-job option",
	     "--shell-job or -j"},
	    {"(00.1) Error (criu/tty.c:1830): Found dangling tty with sid 4 pgid 5 (pts) on peer "
	     "fd "
	     "0.\n",
	     "Error (criu/tty.c:1830): Found dangling tty with sid 4 pgid 5 (pts) on peer fd 0.",
	     "--shell-job or -j"},
	    {"(00.1) Error (criu/tty.c:410): tty: Found slave peer index 0 without correspond "
	     "master peer\n",
	     "Error (criu/tty.c:410): tty: Found slave peer index 0 without correspond master peer",
	     "--shell-job or -j"},
	    /* A TCP peer outside. */
	    {"(00.1) Error (criu/sk-inet.c:200): Connected TCP socket, consider using "
	     "--tcp-established option.\n",
	     "Error (criu/sk-inet.c:200): Connected TCP socket, consider using --tcp-established "
	     "option.",
	     "with --tcp-established"},
	    /* io_uring, and a deleted file too big to save. */
	    {"(00.1) Error (criu/files-ext.c:94): Can't dump file 5 of that type [600] (anon "
	     "[io_uring])\n",
	     "Error (criu/files-ext.c:94): Can't dump file 5 of that type [600] (anon [io_uring])",
	     "CRIU cannot save an io_uring"},
	    {"(00.1) Error (criu/files-reg.c:1031): Can't dump ghost file /tmp/big of 300000000 "
	     "size, increase limit\n",
	     "Error (criu/files-reg.c:1031): Can't dump ghost file /tmp/big of 300000000 size, "
	     "increase limit",
	     "a deleted file the process holds is bigger"},
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct criu_cause cause;

		assert_int_equal(criu_cause_find(cases[i].log, &cause), 0);
		if (!cases[i].line)
			assert_null(cause.line);
		else
			assert_string_equal(cause.line, cases[i].line);
		if (!cases[i].remedy)
			assert_null(cause.remedy);
		else if (!cause.remedy || !strstr(cause.remedy, cases[i].remedy))
			fail_msg("case %zu: remedy '%s' lacks '%s'", i,
				 cause.remedy ? cause.remedy : "(none)", cases[i].remedy);
		criu_cause_free(&cause);
	}
}

/* Numbers on the command line: all of the text, digits only, in range. */
static void whole_numbers(void **state)
{
	uint64_t v = 7;

	(void)state;
	assert_int_equal(parse_uint_in("10", 1, 3600000, &v), 0);
	assert_int_equal(v, 10);
	assert_int_equal(parse_uint_in("3600000", 1, 3600000, &v), 0);
	assert_int_equal(v, 3600000);
	assert_int_equal(parse_uint_in("0", 0, 4, &v), 0);
	assert_int_equal(v, 0);
	v = 7;
	/* Garbage, signs, spaces and suffixes: not a number, v untouched. */
	assert_int_equal(parse_uint_in("10x", 1, 100, &v), -EINVAL);
	assert_int_equal(parse_uint_in("-1", 0, 100, &v), -EINVAL);
	assert_int_equal(parse_uint_in("+1", 0, 100, &v), -EINVAL);
	assert_int_equal(parse_uint_in(" 1", 0, 100, &v), -EINVAL);
	assert_int_equal(parse_uint_in("1 ", 0, 100, &v), -EINVAL);
	assert_int_equal(parse_uint_in("", 0, 100, &v), -EINVAL);
	assert_int_equal(parse_uint_in("0x10", 0, 100, &v), -EINVAL);
	assert_int_equal(parse_uint_in("1e3", 0, 10000, &v), -EINVAL);
	assert_int_equal(parse_uint_in(NULL, 0, 100, &v), -EINVAL);
	/* Out of range, and beyond what 64 bits hold. */
	assert_int_equal(parse_uint_in("0", 1, 100, &v), -ERANGE);
	assert_int_equal(parse_uint_in("3600001", 1, 3600000, &v), -ERANGE);
	assert_int_equal(parse_uint_in("99999999999999999999999", 0, UINT64_MAX, &v), -ERANGE);
	assert_int_equal(v, 7);
	assert_int_equal(parse_uint_in("18446744073709551615", 0, UINT64_MAX, &v), 0);
	assert_true(v == UINT64_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(wrap_and_hint),	  cmocka_unit_test(one_line),
	    cmocka_unit_test(versions_and_sizes), cmocka_unit_test(uuids),
	    cmocka_unit_test(growing_arrays),	  cmocka_unit_test(criu_causes),
	    cmocka_unit_test(whole_numbers),
	};

	return cmocka_run_group_tests_name("error", tests, NULL, NULL);
}
