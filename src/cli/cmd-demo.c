/* SPDX-License-Identifier: MIT */
/* stasis demo: start the built-in workload, checkpoint it, let it die,
 * restore it, and show that it carried on where it stopped. On a machine
 * with a GPU the workload keeps its counter and a checksummed pattern in GPU
 * memory, so the demo shows the GPU half too. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "cuda-api.h"
#include "demo-gpu.h"
#include "stasis.h"
#include "util.h"

#define DEMO_TICKS 25
#define DEMO_WAIT_MS 10000

static unsigned long long read_counter(const char *work)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/state", work);
	return read_file_u64(path, 0);
}

static bool wait_counter(const char *work, unsigned long long target)
{
	for (int waited = 0; waited < DEMO_WAIT_MS; waited += 10) {
		if (read_counter(work) >= target)
			return true;
		usleep(10000);
	}
	return false;
}

static pid_t start_workload(const char *work, bool gpu)
{
	pid_t pid = fork();

	if (pid == 0) {
		execl("/proc/self/exe", "stasis", "__demo-workload", work, "20",
		      gpu ? "--cuda" : NULL, (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* Whether the log shows a full GPU check after the given tick. */
static bool gpu_verified_after(const char *work, unsigned long long tick)
{
	char path[4096];
	_cleanup_free_ char *log = NULL;
	unsigned long long v;

	snprintf(path, sizeof(path), "%s/log", work);
	log = read_file_str(path, NULL);
	for (char *line = log ? strtok(log, "\n") : NULL; line; line = strtok(NULL, "\n"))
		if (sscanf(line, "gpu verified at tick %llu", &v) == 1 && v > tick)
			return true;
	return false;
}

/* Every tick in the log must follow the one before: nothing lost or
 * repeated across the checkpoint. Returns the last tick, 0 on a gap. */
static unsigned long long verify_log(const char *work, char *why, size_t len)
{
	char path[4096];
	_cleanup_free_ char *log = NULL;
	unsigned long long last = 0, v;

	snprintf(path, sizeof(path), "%s/log", work);
	log = read_file_str(path, NULL);
	if (!log) {
		snprintf(why, len, "no log at %s", path);
		return 0;
	}
	for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n")) {
		if (strncmp(line, "FAIL", 4) == 0) {
			snprintf(why, len, "the workload said: %s", line);
			return 0;
		}
		if (sscanf(line, "tick %llu", &v) != 1)
			continue;
		if (v != last + 1) {
			snprintf(why, len, "tick %llu followed tick %llu", v, last);
			return 0;
		}
		last = v;
	}
	return last;
}

static int fail(const char *what)
{
	fprintf(stderr, "stasis demo: error: %s\n", what);
	return EXIT_FAILED;
}

static int run_demo(const char *base, bool gpu)
{
	_cleanup_error_ struct stasis_error *err = NULL;
	char work[4096], image[4096], why[256], size[32];
	struct stasis_checkpoint_options co = {0};
	struct stasis_restore_options ro = {0};
	unsigned long long at_checkpoint, last;
	struct manifest m;
	pid_t pid, root;
	int status;

	snprintf(work, sizeof(work), "%s/work", base);
	snprintf(image, sizeof(image), "%s/image", base);
	if (mkdir_p(work) < 0)
		return fail("cannot create the demo folder");
	pid = start_workload(work, gpu);
	printf("1. started the demo workload, PID %d: a counter ticking through a pipe\n"
	       "   between two processes into %s/log\n",
	       (int)pid, work);
	if (gpu)
		printf("   on GPU 0 it keeps the counter and a %u MiB pattern in device memory\n",
		       DEMO_GPU_PATTERN_BYTES >> 20);
	if (pid < 0 || !wait_counter(work, DEMO_TICKS))
		return fail("the workload did not start counting");

	co.pid = pid;
	co.dir = image;
	manifest_init(&m);
	if (stasis_checkpoint(&co, &m, &err) < 0) {
		kill(pid, SIGKILL);
		return cli_fail("demo", err);
	}
	waitpid(pid, &status, 0); /* CRIU killed it; free its PID */
	at_checkpoint = read_counter(work);
	printf("2. checkpointed at tick %llu in %.1f ms (CRIU dump %.1f ms), image %s;\n"
	       "   the workload is gone\n",
	       at_checkpoint, manifest_phase_usec(&m, "total") / 1000.0,
	       manifest_phase_usec(&m, "criu_dump") / 1000.0,
	       format_bytes(m.image_bytes, size, sizeof(size)));
	if (gpu)
		printf("   GPU: lock %.1f ms, checkpoint of device memory %.1f ms\n",
		       manifest_phase_usec(&m, "cuda_lock") / 1000.0,
		       manifest_phase_usec(&m, "cuda_checkpoint") / 1000.0);
	manifest_free(&m);
	sleep(1);
	if (read_counter(work) != at_checkpoint)
		return fail("the counter moved while the workload was gone");

	ro.dir = image;
	manifest_init(&m);
	if (stasis_restore(&ro, &m, &root, &err) < 0)
		return cli_fail("demo", err);
	printf("3. restored PID %d in %.1f ms (CRIU restore %.1f ms)\n", (int)root,
	       manifest_phase_usec(&m, "restore_total") / 1000.0,
	       manifest_phase_usec(&m, "criu_restore") / 1000.0);
	if (gpu)
		printf("   GPU: restore of device memory %.1f ms, unlock %.1f ms\n",
		       manifest_phase_usec(&m, "cuda_restore") / 1000.0,
		       manifest_phase_usec(&m, "cuda_unlock") / 1000.0);
	manifest_free(&m);
	if (!wait_counter(work, at_checkpoint + DEMO_TICKS)) {
		kill(root, SIGKILL);
		return fail("the restored workload does not count");
	}
	kill(root, SIGTERM);
	waitpid(root, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return fail("the restored workload failed its own checks (see its log)");
	last = verify_log(work, why, sizeof(why));
	if (!last)
		return fail(why);
	if (gpu && !gpu_verified_after(work, at_checkpoint))
		return fail("no check of the GPU pattern after the restore in the log");
	printf("4. it carried on from tick %llu to %llu: no tick lost or repeated,\n"
	       "   the pipe, the open files and both processes came back intact\n",
	       at_checkpoint + 1, last);
	if (gpu)
		printf("   the counter in GPU memory and the %u MiB pattern came back intact\n",
		       DEMO_GPU_PATTERN_BYTES >> 20);
	printf("demo passed; image and log kept in %s\n", base);
	return EXIT_OK;
}

/* --gpu, --cpu, or by what the machine has; says which demo and why. */
static int pick_mode(const char *flag, bool *gpu)
{
	_cleanup_error_ struct stasis_error *err = NULL;

	if (flag && strcmp(flag, "--cpu") == 0) {
		*gpu = false;
		printf("CPU demo (--cpu): a process tree, no GPU\n");
		return 0;
	}
	*gpu = cuda_load(&err) == 0 && cuda_device_count() > 0;
	if (!*gpu && !err)
		stasis_error_set(&err, ENODEV, STASIS_DOMAIN_CUDA, 0, "no GPU is visible");
	if (flag && strcmp(flag, "--gpu") == 0 && !*gpu)
		return cli_fail("demo", err);
	if (*gpu)
		printf("GPU demo%s: a process tree with its state on GPU 0\n",
		       flag ? " (--gpu)" : ", a GPU is visible");
	else
		printf("CPU demo, a process tree without a GPU: %s (--gpu needs one)\n",
		       err->message);
	return 0;
}

int cmd_demo(int argc, char **argv)
{
	char base[4096];
	_cleanup_error_ struct stasis_error *err = NULL;
	const char *flag = NULL, *dir = NULL;
	bool gpu;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--cpu") == 0 || strcmp(argv[i], "--gpu") == 0)
			flag = argv[i];
		else if (argv[i][0] == '-' || dir)
			return cli_usage_error("demo", "unexpected argument '%s'", argv[i]);
		else
			dir = argv[i];
	}
	if (stasis_require_root(&err) < 0)
		return cli_fail("demo", err);
	if (pick_mode(flag, &gpu) != 0)
		return EXIT_FAILED;
	if (dir) {
		snprintf(base, sizeof(base), "%s", dir);
		if (dir_is_empty(base) == 1)
			return cli_usage_error("demo", "%s is not empty", base);
	} else {
		snprintf(base, sizeof(base), "/tmp/stasis-demo-XXXXXX");
		if (!mkdtemp(base))
			return fail("cannot create a folder under /tmp");
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	return run_demo(base, gpu);
}
