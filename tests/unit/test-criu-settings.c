/* SPDX-License-Identifier: MIT */
/* What one operation tells its CRIU, as configuration lines: the user's
 * environment chooses where it has a value, stasis's own values (the
 * plugin's socket, parts) are always said, a value no line can hold is
 * refused, and the file CRIU reads is the operation's own. The CRIU here
 * is /bin/true, which takes any setting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "criu-settings.h"
#include "util.h"

static char text[8192];

static int setup(void **state)
{
	(void)state;
	setenv("STASIS_CRIU", "/bin/true", 1);
	setenv("CRIU_FAULT", "0", 1); /* no breakpoint probe */
	unsetenv("CRIU_PAGE_WRITERS");
	unsetenv("CRIU_PAGE_WRITER_CHUNKS");
	unsetenv("CRIU_PAGE_WRITER_PARTS");
	unsetenv("CRIU_FILL_THREADS");
	setenv("CRIU_LIBS_DIR", "/nonexistent", 1); /* no libdir line */
	return 0;
}

static void test_operation_values_said(void **state)
{
	struct criu_settings s = {.plugin_socket = "/run/stasis/plugin-1-0.sock",
				  .dev_map = "0=1,1=0",
				  .link_remap_dir = "stasis-remap-x",
				  .fill_nprocs = 2};

	(void)state;
	assert_true(criu_takes_settings());
	assert_int_equal(criu_settings_text(&s, text, sizeof(text)), 0);
	assert_non_null(
	    strstr(text, "setting \"STASIS_PLUGIN_SOCKET=/run/stasis/plugin-1-0.sock\"\n"));
	assert_non_null(strstr(text, "setting \"STASIS_NVIDIA_DEV_MAP=0=1,1=0\"\n"));
	assert_non_null(strstr(text, "setting \"CRIU_LINK_REMAP_DIR=dev/shm/stasis-remap-x\"\n"));
	assert_non_null(strstr(text, "setting \"CRIU_GHOST_ROOT_FOLDERS=1\"\n"));
	assert_non_null(strstr(text, "setting \"CRIU_FILL_THREADS="));
	assert_null(strstr(text, "CRIU_FAULT"));
	assert_null(strstr(text, "libdir"));
}

static void test_no_gpu_work_said_empty(void **state)
{
	struct criu_settings s = {0};

	(void)state;
	assert_int_equal(criu_settings_text(&s, text, sizeof(text)), 0);
	/* Set and empty: the plugin starts no helper of its own. */
	assert_non_null(strstr(text, "setting \"STASIS_PLUGIN_SOCKET=\"\n"));
	assert_non_null(strstr(text, "setting \"CRIU_LINK_REMAP_DIR=-\"\n"));
	/* A dump: no fill threads. */
	assert_null(strstr(text, "CRIU_FILL_THREADS"));
}

static void test_user_environment_chooses(void **state)
{
	struct criu_settings s = {.fill_nprocs = 1};

	(void)state;
	setenv("CRIU_PAGE_WRITERS", "3", 1);
	setenv("CRIU_FILL_THREADS", "1", 1);
	assert_int_equal(criu_settings_text(&s, text, sizeof(text)), 0);
	/* Not said: CRIU takes the environment's. */
	assert_null(strstr(text, "CRIU_PAGE_WRITERS="));
	assert_null(strstr(text, "CRIU_FILL_THREADS="));
	assert_int_equal(criu_page_writers(), 3);
	unsetenv("CRIU_PAGE_WRITERS");
	unsetenv("CRIU_FILL_THREADS");
}

/* Parts only for the dump that asked, and never against the user's 0;
 * always said, so that an environment's 1 is not taken unstaged. */
static void test_parts(void **state)
{
	struct criu_settings staged = {.page_parts = true}, plain = {0};

	(void)state;
	setenv("CRIU_PAGE_WRITERS", "2", 1);
	assert_int_equal(criu_settings_text(&staged, text, sizeof(text)), 0);
	assert_non_null(strstr(text, "setting \"CRIU_PAGE_WRITER_PARTS=1\"\n"));
	setenv("CRIU_PAGE_WRITER_PARTS", "1", 1);
	assert_int_equal(criu_settings_text(&plain, text, sizeof(text)), 0);
	assert_non_null(strstr(text, "setting \"CRIU_PAGE_WRITER_PARTS=0\"\n"));
	setenv("CRIU_PAGE_WRITER_PARTS", "0", 1);
	assert_int_equal(criu_settings_text(&staged, text, sizeof(text)), 0);
	assert_non_null(strstr(text, "setting \"CRIU_PAGE_WRITER_PARTS=0\"\n"));
	assert_int_equal(criu_page_part_bytes(), 0);
	unsetenv("CRIU_PAGE_WRITER_PARTS");
	unsetenv("CRIU_PAGE_WRITERS");
}

static void test_value_no_line_holds(void **state)
{
	struct criu_settings quote = {.plugin_socket = "/run/a\"b"};
	struct criu_settings newline = {.dev_map = "0=1\nlibdir /tmp/x"};
	char small[16];

	(void)state;
	assert_int_equal(criu_settings_text(&quote, text, sizeof(text)), -EINVAL);
	assert_int_equal(criu_settings_text(&newline, text, sizeof(text)), -EINVAL);
	/* CRIU's parser cuts a value at '#' and fails on some spaces. */
	assert_int_equal(criu_settings_text(&(struct criu_settings){.plugin_socket = "/run/a b"},
					    text, sizeof(text)),
			 -EINVAL);
	assert_int_equal(criu_settings_text(&(struct criu_settings){.plugin_socket = "/run/a#b"},
					    text, sizeof(text)),
			 -EINVAL);
	assert_int_equal(criu_settings_text(&(struct criu_settings){0}, small, sizeof(small)),
			 -ENAMETOOLONG);
}

/* The memfd CRIU reads: this process's, the text in it. */
static void test_file(void **state)
{
	struct criu_settings s = {.plugin_socket = "/run/x.sock"};
	struct stasis_error *err = NULL;
	char path[64], want[64];
	char *read;
	int fd;

	(void)state;
	assert_int_equal(criu_settings_file(&s, &fd, path, sizeof(path), &err), 0);
	snprintf(want, sizeof(want), "/proc/%d/fd/%d", (int)getpid(), fd);
	assert_string_equal(path, want);
	read = read_file_str(path, NULL);
	assert_non_null(read);
	assert_non_null(strstr(read, "setting \"STASIS_PLUGIN_SOCKET=/run/x.sock\"\n"));
	free(read);
	close(fd);
	assert_int_equal(criu_settings_file(&(struct criu_settings){.dev_map = "\""}, &fd, path,
					    sizeof(path), &err),
			 -EINVAL);
	assert_int_equal(fd, -1);
	assert_non_null(err);
	stasis_error_free(err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_operation_values_said),
	    cmocka_unit_test(test_no_gpu_work_said_empty),
	    cmocka_unit_test(test_user_environment_chooses),
	    cmocka_unit_test(test_parts),
	    cmocka_unit_test(test_value_no_line_holds),
	    cmocka_unit_test(test_file),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
