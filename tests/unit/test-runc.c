/* SPDX-License-Identifier: MIT */
/* The cgroup v2 path runc's cgroupfs driver gives a container, which the
 * restore hands CRIU as its cgroup root: beside runc's own cgroup when the
 * spec names none or a relative one, the spec's own when absolute. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "runc.h"

static void path_of(const char *own, const char *spec, const char *id, const char *want)
{
	char out[256];

	runc_cgroup2_path(own, spec, id, out, sizeof(out));
	assert_string_equal(out, want);
}

static void beside_own_cgroup(void **state)
{
	(void)state;
	path_of("/process_api/agent-7", NULL, "job", "/process_api/job");
	path_of("/process_api/agent-7", "", "job-2", "/process_api/job-2");
	path_of("/user.slice/session-1.scope", "pods/job", "job", "/user.slice/pods/job");
}

static void at_the_root(void **state)
{
	(void)state;
	path_of("/runner", NULL, "job", "/job");
	path_of("/", NULL, "job", "/job");
	path_of("", NULL, "job", "/job");
}

static void absolute_spec_path(void **state)
{
	(void)state;
	path_of("/process_api/agent-7", "/machine/job", "job-2", "/machine/job");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(beside_own_cgroup),
	    cmocka_unit_test(at_the_root),
	    cmocka_unit_test(absolute_spec_path),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
