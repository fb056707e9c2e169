/* SPDX-License-Identifier: MIT */
/* The huge pages' registry against a setting file of the test's own: the
 * mode put back by the last run out, and by the guard of a run killed by
 * SIGKILL while the run is still an unreaped zombie. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "thp.h"
#include "util.h"

static char dir[64];
static char setting[128];

static void write_setting(const char *text)
{
	FILE *f = fopen(setting, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* The setting's text, or "" where it cannot be read. */
static char *setting_text(void)
{
	char *text = read_file_str(setting, NULL);

	return text ? text : strdup("");
}

static int wait_for_setting(const char *want)
{
	for (int i = 0; i < 200; i++) {
		char *text = setting_text();
		int same = strcmp(text, want) == 0;

		free(text);
		if (same)
			return 0;
		usleep(10000);
	}
	return -1;
}

/* Entries of the registry other than its lock. */
static int registry_entries(void)
{
	char path[128];
	struct dirent *de;
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "%s/run/thp", dir);
	d = opendir(path);
	if (!d)
		return 0;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.' && strcmp(de->d_name, "lock") != 0)
			n++;
	closedir(d);
	return n;
}

static int setup(void **state)
{
	char run[96];

	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/stasis-test-thp-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(run, sizeof(run), "%s/run", dir);
	snprintf(setting, sizeof(setting), "%s/enabled", dir);
	setenv("STASIS_RUN_DIR", run, 1);
	setenv("STASIS_THP_FILE", setting, 1);
	write_setting("always [madvise] never");
	return 0;
}

static int teardown(void **state)
{
	char cmd[96];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void begin_end_puts_back(void **state)
{
	char mode[32];
	char *text;

	(void)state;
	assert_int_equal(thp_always_begin(NULL), 0);
	text = setting_text();
	assert_string_equal(text, "always");
	free(text);
	/* The machine's own mode is the saved one while a run holds "always". */
	assert_int_equal(thp_machine_mode(mode, sizeof(mode)), 0);
	assert_string_equal(mode, "madvise");
	thp_always_end();
	text = setting_text();
	assert_string_equal(text, "madvise");
	free(text);
	assert_int_equal(registry_entries(), 0);
}

/* Another process holds "always" too: the first one out leaves it. */
static void last_one_out_puts_back(void **state)
{
	int go[2], done[2];
	char c = 0;
	pid_t pid;
	char *text;

	(void)state;
	assert_int_equal(pipe(go), 0);
	assert_int_equal(pipe(done), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int r = thp_always_begin(NULL);

		(void)!write(done[1], &c, 1);
		(void)!read(go[0], &c, 1);
		thp_always_end();
		_exit(r == 0 ? 0 : 1);
	}
	assert_int_equal(read(done[0], &c, 1), 1);
	assert_int_equal(thp_always_begin(NULL), 0);
	assert_int_equal(write(go[1], &c, 1), 1);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	text = setting_text();
	assert_string_equal(text, "always");
	free(text);
	thp_always_end();
	assert_int_equal(wait_for_setting("madvise"), 0);
	assert_int_equal(registry_entries(), 0);
	close(go[0]);
	close(go[1]);
	close(done[0]);
	close(done[1]);
}

/* SIGKILL inside the window: the guard puts the mode back before anyone
 * reaps the killed run (a zombie still answers kill(pid, 0)). */
static void guard_puts_back_after_sigkill(void **state)
{
	int done[2];
	char c = 0;
	pid_t pid;
	int status;

	(void)state;
	assert_int_equal(pipe(done), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (thp_always_begin(NULL) == 0)
			(void)!write(done[1], &c, 1);
		pause();
		_exit(0);
	}
	close(done[1]);
	assert_int_equal(read(done[0], &c, 1), 1);
	assert_int_equal(wait_for_setting("always"), 0);
	kill(pid, SIGKILL);
	assert_int_equal(wait_for_setting("madvise"), 0);
	assert_int_equal(registry_entries(), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	close(done[0]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(begin_end_puts_back, setup, teardown),
	    cmocka_unit_test_setup_teardown(last_one_out_puts_back, setup, teardown),
	    cmocka_unit_test_setup_teardown(guard_puts_back_after_sigkill, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
