/* SPDX-License-Identifier: MIT */
/* The parallel GPU steps and every rollback path, against the fake driver
 * loaded through the same dlopen path as the real one. */
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
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda-api.h"
#include "gpu.h"
#include "gpumap.h"
#include "nccl.h"
#include "progress.h"
#include "util.h"

/* Real processes that wait to be killed: stasis tells an exited process
 * from a frozen one, so the tests' processes must exist. */
#define NPROCS 5
static pid_t procs[NPROCS];
static char fake_dir[64];

/* A child that waits to be killed; gone with the test, even when it
 * crashes: left behind, it would hold the runner's pipe open. */
static pid_t spawn_waiter(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		pause();
		_exit(0);
	}
	return pid;
}

static void set_state(pid_t pid, int state)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%d", fake_dir, (int)pid);
	f = fopen(path, "w");
	fprintf(f, "%d\n", state);
	fclose(f);
}

static int get_state(pid_t pid)
{
	enum cuda_process_state s;

	assert_int_equal(cuda_get_state(pid, &s), CUDA_RES_SUCCESS);
	return (int)s;
}

static void make_batch(struct gpu_batch *b, size_t n)
{
	memset(b, 0, sizeof(*b));
	b->lock_timeout_ms = 200;
	for (size_t i = 0; i < n; i++) {
		set_state(procs[i], CUDA_PROCESS_RUNNING);
		assert_int_equal(gpu_batch_add(b, procs[i]), 0);
	}
}

static int setup(void **state)
{
	(void)state;
	unsetenv("FAKE_CUDA_FAIL");
	unsetenv("FAKE_CUDA_HANG");
	return 0;
}

static void suspend_resume_four(void **state)
{
	struct gpu_batch b;
	struct stasis_error *err = NULL;

	(void)state;
	make_batch(&b, 4);
	assert_int_equal(gpu_suspend(&b, &err), 0);
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(get_state(b.procs[i].pid), CUDA_PROCESS_CHECKPOINTED);
	assert_int_equal(gpu_resume(&b, &err), 0);
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(get_state(b.procs[i].pid), CUDA_PROCESS_RUNNING);
	assert_null(err);
	gpu_batch_free(&b);
}

/* The GPU copy's progress: each process's GPU memory once its step is
 * done, of their sum, on the line progress writes to stderr. */
static void copy_progress(void **state)
{
	char path[] = "/tmp/stasis-progress-XXXXXX";
	int fd = mkstemp(path), saved = dup(STDERR_FILENO);
	_cleanup_free_ char *text = NULL;
	struct stasis_error *err = NULL;
	struct gpu_batch b;

	(void)state;
	assert_true(fd >= 0 && saved >= 0);
	make_batch(&b, 2);
	b.procs[0].gpu_bytes = 1ull << 30;
	b.procs[1].gpu_bytes = 3ull << 30;
	setenv("FAKE_CUDA_DELAY", "checkpoint:1200", 1);
	fflush(stderr);
	dup2(fd, STDERR_FILENO);
	progress_set_mode(PROGRESS_LINES);
	assert_int_equal(gpu_suspend(&b, &err), 0);
	progress_set_mode(PROGRESS_OFF);
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(fd);
	unsetenv("FAKE_CUDA_DELAY");
	text = read_file_str(path, NULL);
	unlink(path);
	assert_non_null(text);
	if (!strstr(text, "stasis: GPU checkpoint of 2 CUDA processes: 4.0 GiB of 4.0 GiB, "))
		fail_msg("progress: '%s'", text);
	/* No line for the lock, which took no time. */
	assert_null(strstr(text, "GPU lock"));
	assert_int_equal(gpu_resume(&b, &err), 0);
	assert_null(err);
	gpu_batch_free(&b);
}

static void find_only_cuda(void **state)
{
	pid_t pids[] = {procs[0], procs[4], procs[1]};
	struct gpu_batch b = {0};
	struct stasis_error *err = NULL;

	(void)state;
	set_state(procs[0], 0);
	set_state(procs[1], 1);
	assert_int_equal(gpu_find_cuda(pids, 3, &b, &err), 0);
	assert_int_equal(b.n, 2);
	/* One of them is locked by someone else: refused before any change. */
	assert_true(gpu_preflight_running(&b, &err) < 0);
	assert_non_null(strstr(err->message, "already locked"));
	stasis_error_free(err);
	gpu_batch_free(&b);
}

/* A failure on one process at one step: everything touched goes back to
 * running, and the error names the step and the process. */
static void expect_rollback(const char *fail, const char *needle)
{
	struct gpu_batch b;
	struct stasis_error *err = NULL;

	setenv("FAKE_CUDA_FAIL", fail, 1);
	make_batch(&b, 4);
	assert_true(gpu_suspend(&b, &err) < 0);
	assert_non_null(err);
	if (!strstr(err->message, needle))
		fail_msg("'%s' lacks '%s'", err->message, needle);
	unsetenv("FAKE_CUDA_FAIL");
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(get_state(b.procs[i].pid), CUDA_PROCESS_RUNNING);
	stasis_error_free(err);
	gpu_batch_free(&b);
}

static void rollback_paths(void **state)
{
	char spec[64], needle[64];

	(void)state;
	snprintf(spec, sizeof(spec), "lock:909:%d", procs[2]);
	expect_rollback(spec, "CUDA_ERROR_TIMEOUT");
	snprintf(spec, sizeof(spec), "checkpoint:801:%d", procs[3]);
	expect_rollback(spec, "CUDA_ERROR_NOT_SUPPORTED");
	snprintf(spec, sizeof(spec), "checkpoint:2:%d", procs[0]);
	snprintf(needle, sizeof(needle), "checkpoint of PID %d", procs[0]);
	expect_rollback(spec, needle);
}

static void managed_memory_hint(void **state)
{
	struct gpu_batch b;
	struct stasis_error *err = NULL;

	(void)state;
	setenv("FAKE_CUDA_FAIL", "checkpoint:801", 1);
	make_batch(&b, 1);
	assert_true(gpu_suspend(&b, &err) < 0);
	assert_non_null(strstr(err->hint, "managed"));
	assert_int_equal(get_state(procs[0]), CUDA_PROCESS_RUNNING);
	stasis_error_free(err);
	gpu_batch_free(&b);
}

static void hung_lock_times_out(void **state)
{
	struct gpu_batch b;
	struct stasis_error *err = NULL;
	uint64_t start = now_usec();

	(void)state;
	setenv("FAKE_CUDA_HANG", "lock", 1);
	make_batch(&b, 4);
	assert_true(gpu_suspend(&b, &err) < 0);
	/* Four locks in parallel: one timeout, not four. */
	assert_true(now_usec() - start < 4 * 200 * 1000);
	assert_non_null(strstr(err->hint, "--timeout"));
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(get_state(b.procs[i].pid), CUDA_PROCESS_RUNNING);
	stasis_error_free(err);
	gpu_batch_free(&b);
}

/* Several tries (NCCL ranks): the ones before the last are short, the last
 * has the whole timeout up to 8 s (a rank's lock that waits longer waits
 * for a locked peer); one try has the whole timeout. */
static void lock_tries_start_short(void **state)
{
	struct gpu_batch b = {.lock_timeout_ms = 10000, .lock_rounds = 3};

	(void)state;
	assert_int_equal(gpu_lock_try_timeout(&b, 1), 2000);
	assert_int_equal(gpu_lock_try_timeout(&b, 2), 4000);
	assert_int_equal(gpu_lock_try_timeout(&b, 3), 8000);
	b.lock_timeout_ms = 30000;
	assert_int_equal(gpu_lock_try_timeout(&b, 3), 8000);
	b.lock_timeout_ms = 3000;
	assert_int_equal(gpu_lock_try_timeout(&b, 1), 2000);
	assert_int_equal(gpu_lock_try_timeout(&b, 2), 3000);
	b.lock_timeout_ms = 500;
	assert_int_equal(gpu_lock_try_timeout(&b, 1), 500);
	b.lock_rounds = 1;
	b.lock_timeout_ms = 10000;
	assert_int_equal(gpu_lock_try_timeout(&b, 1), 10000);
	b.lock_rounds = 0;
	assert_int_equal(gpu_lock_try_timeout(&b, 1), 10000);
}

static void failed_resume_rolls_back(void **state)
{
	char spec[64], needle[64];
	struct gpu_batch b;
	struct stasis_error *err = NULL;

	(void)state;
	make_batch(&b, 2);
	assert_int_equal(gpu_suspend(&b, &err), 0);
	snprintf(spec, sizeof(spec), "unlock:999:%d", procs[1]);
	setenv("FAKE_CUDA_FAIL", spec, 1);
	assert_true(gpu_resume(&b, &err) < 0);
	unsetenv("FAKE_CUDA_FAIL");
	snprintf(needle, sizeof(needle), "unlock of PID %d", procs[1]);
	assert_non_null(strstr(err->message, needle));
	/* The rollback retried the unlock once the fault was gone? No: it ran
	 * while the fault held, so the second process is named as still
	 * locked. */
	snprintf(needle, sizeof(needle), "could not return PID %d (locked)", procs[1]);
	assert_non_null(err->hint);
	assert_non_null(strstr(err->hint, needle));
	assert_int_equal(get_state(procs[0]), CUDA_PROCESS_RUNNING);
	stasis_error_free(err);
	err = NULL;
	assert_int_equal(gpu_rollback(&b, &err), 0);
	assert_int_equal(get_state(procs[1]), CUDA_PROCESS_RUNNING);
	gpu_batch_free(&b);
}

/* A process gone before its lock (killed, or a job at its end): the driver
 * fails the call, and the error says the process exited rather than that
 * the rollback left it frozen. */
static void exited_process_named(void **state)
{
	char needle[64];
	struct gpu_batch b = {0};
	struct stasis_error *err = NULL;
	pid_t kid = spawn_waiter();

	(void)state;
	set_state(kid, CUDA_PROCESS_RUNNING);
	assert_int_equal(gpu_batch_add(&b, kid), 0);
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	setenv("FAKE_CUDA_LIVE", "1", 1);
	assert_true(gpu_suspend(&b, &err) < 0);
	unsetenv("FAKE_CUDA_LIVE");
	snprintf(needle, sizeof(needle), "PID %d exited during the GPU step", kid);
	assert_non_null(err->hint);
	assert_non_null(strstr(err->hint, needle));
	assert_null(strstr(err->hint, "could not return"));
	stasis_error_free(err);
	gpu_batch_free(&b);
}

static void gpu_plan(void **state)
{
	struct manifest m;
	struct nvml_gpu gpus[2] = {0};
	struct gpu_plan plan;
	struct stasis_error *err = NULL;
	struct manifest_process *p;

	(void)state;
	manifest_init(&m);
	for (int i = 0; i < 2; i++) {
		struct manifest_gpu *g = manifest_add_gpu(&m);

		g->index = i;
		snprintf(g->uuid, sizeof(g->uuid),
			 "GPU-%d%d%d%d%d%d%d%d-0000-0000-0000-000000000000", i, i, i, i, i, i, i,
			 i);
		strcpy(g->chip, "Hopper");
		g->minor = i;
		gpus[i].index = i;
		gpus[i].minor = i;
		snprintf(gpus[i].uuid, sizeof(gpus[i].uuid), "%s", g->uuid);
		strcpy(gpus[i].arch, "Hopper");
		gpus[i].memory_total = 80ull << 30;
	}
	p = manifest_add_process(&m);
	p->pid = 5;
	p->cuda = true;
	p->gpu_bytes = 16ull << 30;
	p->ngpus = 1;
	p->gpus[0] = 0;
	/* Same machine: identity, no pairs. */
	assert_int_equal(gpu_plan_make(&m, gpus, 2, NULL, &plan, &err), 0);
	assert_int_equal(plan.npairs, 0);
	assert_string_equal(plan.dev_map, "");
	assert_string_equal(plan.notes, "");
	/* A swap is a permutation the driver accepts. */
	assert_int_equal(gpu_plan_make(&m, gpus, 2, "0=1,1=0", &plan, &err), 0);
	assert_int_equal(plan.npairs, 2);
	assert_int_equal(plan.target[0], 1);
	assert_int_equal(plan.target[1], 0);
	/* ... and /dev/nvidia0 and /dev/nvidia1 follow it. */
	assert_string_equal(plan.dev_map, "0:1,1:0");
	/* One entry is enough: the rest of the permutation is filled in, and
	 * the notes name the process's GPU first. */
	assert_int_equal(gpu_plan_make(&m, gpus, 2, "0=1", &plan, &err), 0);
	assert_int_equal(plan.target[1], 0);
	assert_string_equal(plan.notes,
			    "GPU-00000000-0000-0000-0000-000000000000 -> "
			    "GPU-11111111-0000-0000-0000-000000000000, "
			    "GPU-11111111-0000-0000-0000-000000000000 -> "
			    "GPU-00000000-0000-0000-0000-000000000000 (no process used it)");
	/* Two onto one is refused. */
	assert_true(gpu_plan_make(&m, gpus, 2, "0=1,1=1", &plan, &err) < 0);
	stasis_error_free(err);
	err = NULL;
	/* Not enough free memory on the target. */
	gpus[1].memory_used = 70ull << 30;
	assert_true(gpu_plan_make(&m, gpus, 2, "0=1,1=0", &plan, &err) < 0);
	assert_non_null(strstr(err->message, "free"));
	stasis_error_free(err);
	err = NULL;
	/* Another chip is refused. */
	gpus[1].memory_used = 0;
	strcpy(gpus[1].arch, "Ampere");
	assert_true(gpu_plan_make(&m, gpus, 2, "0=1,1=0", &plan, &err) < 0);
	assert_non_null(strstr(err->message, "Ampere"));
	stasis_error_free(err);
	err = NULL;
	assert_true(gpu_plan_make(&m, gpus, 2, "bogus", &plan, &err) < 0);
	stasis_error_free(err);
	manifest_free(&m);
}

/* The message of what gpu_map_parse or gpu_map_check_image refused, or
 * NULL when it was accepted. */
static char *map_error(const char *text, const struct manifest *m)
{
	static char message[256];
	struct stasis_error *err = NULL;
	struct gpu_map map;
	int r = m ? gpu_map_check_image(text, m, &err) : gpu_map_parse(text, &map, &err);

	if (r == 0) {
		assert_null(err);
		return NULL;
	}
	assert_non_null(err);
	assert_int_equal(err->domain, STASIS_DOMAIN_USAGE);
	snprintf(message, sizeof(message), "%s", err->message);
	stasis_error_free(err);
	return message;
}

/* --gpu-map as written: empty parts, sides that name no GPU, a GPU named
 * twice on one side are refused, naming the part. */
static void gpu_map_parsing(void **state)
{
	const char *uuid0 = "GPU-00000000-0000-0000-0000-000000000000";
	char text[128];
	struct stasis_error *err = NULL;
	struct gpu_map map;

	(void)state;
	assert_int_equal(gpu_map_parse("0=1,1=0", &map, &err), 0);
	assert_int_equal(map.n, 2);
	assert_string_equal(map.entries[1].from, "1");
	assert_string_equal(map.entries[1].to, "0");
	snprintf(text, sizeof(text), "%s=1", uuid0);
	assert_int_equal(gpu_map_parse(text, &map, &err), 0);
	assert_string_equal(map.entries[0].from, uuid0);
	assert_string_equal(map_error("", NULL), "--gpu-map is empty");
	assert_string_equal(map_error("foo", NULL), "--gpu-map part 'foo' is not OLD=NEW");
	assert_string_equal(map_error("=,,", NULL), "--gpu-map part '=' is not OLD=NEW");
	assert_string_equal(map_error(",", NULL), "--gpu-map ',' has an empty part");
	assert_string_equal(map_error("0=1,", NULL), "--gpu-map '0=1,' has an empty part");
	assert_string_equal(map_error("0=1,,1=0", NULL), "--gpu-map '0=1,,1=0' has an empty part");
	assert_string_equal(map_error("0=", NULL), "--gpu-map part '0=' is not OLD=NEW");
	assert_string_equal(map_error("=1", NULL), "--gpu-map part '=1' is not OLD=NEW");
	assert_string_equal(map_error("0=1=2", NULL), "--gpu-map part '0=1=2' is not OLD=NEW");
	assert_string_equal(map_error("a=b", NULL),
			    "--gpu-map part 'a=b' does not name GPUs by index or UUID");
	assert_string_equal(map_error("-1=0", NULL),
			    "--gpu-map part '-1=0' does not name GPUs by index or UUID");
	assert_string_equal(map_error("64=0", NULL),
			    "--gpu-map part '64=0' does not name GPUs by index or UUID");
	assert_string_equal(map_error("GPU-zz=0", NULL),
			    "--gpu-map part 'GPU-zz=0' does not name GPUs by index or UUID");
	assert_string_equal(map_error("0=1,0=2", NULL), "--gpu-map maps GPU '0' twice");
	assert_string_equal(map_error("0=1,2=1", NULL), "--gpu-map maps two GPUs onto '1'");
}

/* --gpu-map against the image, before anything runs: every OLD is one of
 * its GPUs, each once, however it is named; an image without GPU state
 * has nothing to map. */
static void gpu_map_against_image(void **state)
{
	struct manifest m;
	struct manifest_process *p;
	char text[128];

	(void)state;
	manifest_init(&m);
	p = manifest_add_process(&m);
	p->pid = 5;
	assert_string_equal(map_error("0=1", &m),
			    "--gpu-map: the image holds no GPU state, there is nothing to map");
	p->cuda = true;
	assert_string_equal(map_error("0=1", &m), "--gpu-map: the image has no GPU '0'");
	for (int i = 0; i < 2; i++) {
		struct manifest_gpu *g = manifest_add_gpu(&m);

		g->index = i + 4;
		snprintf(g->uuid, sizeof(g->uuid),
			 "GPU-%d%d%d%d%d%d%d%d-0000-0000-0000-000000000000", i, i, i, i, i, i, i,
			 i);
	}
	assert_null(map_error("4=0,5=1", &m));
	assert_string_equal(map_error("0=1", &m), "--gpu-map: the image has no GPU '0'");
	snprintf(text, sizeof(text), "4=0,%s=1", m.gpus[0].uuid);
	assert_non_null(strstr(map_error(text, &m), "maps the image's GPU " /* by both names */));
	assert_string_equal(map_error("4=0,,", &m), "--gpu-map '4=0,,' has an empty part");
	manifest_free(&m);
}

/* A setting counts only as NAME=VALUE exactly, wherever it stands in the
 * block; a name given twice counts only when both agree. */
static void nccl_environment(void **state)
{
	static const char env[] = "A=1\0NCCL_P2P_DISABLE=1\0B=2";
	static const char twice[] = "NCCL_P2P_DISABLE=1\0NCCL_P2P_DISABLE=0";
	static const char prefix[] =
	    "NCCL_P2P_DISABLE_X=1\0XNCCL_P2P_DISABLE=1\0NCCL_P2P_DISABLE=10";
	size_t n;
	const struct nccl_setting *s = nccl_settings(&n);

	(void)state;
	assert_true(nccl_env_has(env, sizeof(env), "NCCL_P2P_DISABLE", "1"));
	assert_false(nccl_env_has(env, sizeof(env), "NCCL_P2P_DISABLE", "0"));
	assert_false(nccl_env_has(env, sizeof(env), "NCCL_NVLS_ENABLE", "0"));
	assert_false(nccl_env_has(twice, sizeof(twice), "NCCL_P2P_DISABLE", "1"));
	assert_false(nccl_env_has(prefix, sizeof(prefix), "NCCL_P2P_DISABLE", "1"));
	/* No terminating NUL: the block's end bounds the last entry. */
	assert_true(nccl_env_has(env, sizeof(env) - 1, "B", "2"));
	assert_false(nccl_env_has(env, sizeof(env) - 2, "B", "2"));
	assert_false(nccl_env_has("", 0, "B", "2"));
	/* The required settings come first, each with its reason. */
	assert_true(n >= 3);
	assert_true(s[0].required && strcmp(s[0].name, "NCCL_P2P_DISABLE") == 0);
	for (size_t i = 0; i < n; i++)
		assert_true(s[i].why && *s[i].why &&
			    (i == 0 || s[i - 1].required || !s[i].required));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup(suspend_resume_four, setup),
	    cmocka_unit_test_setup(copy_progress, setup),
	    cmocka_unit_test_setup(find_only_cuda, setup),
	    cmocka_unit_test_setup(rollback_paths, setup),
	    cmocka_unit_test_setup(managed_memory_hint, setup),
	    cmocka_unit_test_setup(hung_lock_times_out, setup),
	    cmocka_unit_test(lock_tries_start_short),
	    cmocka_unit_test_setup(failed_resume_rolls_back, setup),
	    cmocka_unit_test_setup(exited_process_named, setup),
	    cmocka_unit_test_setup(gpu_plan, setup),
	    cmocka_unit_test(gpu_map_parsing),
	    cmocka_unit_test(gpu_map_against_image),
	    cmocka_unit_test(nccl_environment),
	};
	struct stasis_error *err = NULL;
	const char *lib = getenv("FAKE_LIBCUDA");
	int r;

	if (!lib) {
		fprintf(stderr, "FAKE_LIBCUDA must name the fake driver\n");
		return 1;
	}
	snprintf(fake_dir, sizeof(fake_dir), "/tmp/stasis-fake-XXXXXX");
	if (!mkdtemp(fake_dir))
		return 1;
	setenv("FAKE_CUDA_DIR", fake_dir, 1);
	setenv("STASIS_LIBCUDA", lib, 1);
	if (cuda_load(&err) < 0) {
		fprintf(stderr, "%s\n", err->message);
		return 1;
	}
	for (int i = 0; i < NPROCS; i++)
		procs[i] = spawn_waiter();
	r = cmocka_run_group_tests_name("gpu", tests, NULL, NULL);
	for (int i = 0; i < NPROCS; i++) {
		kill(procs[i], SIGKILL);
		waitpid(procs[i], NULL, 0);
	}
	{
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "rm -rf %s", fake_dir);
		if (system(cmd) != 0)
			r = 1;
	}
	return r;
}
