/* SPDX-License-Identifier: MIT */
/* The GPU checkpoint inside CRIU's freeze, as the driver wants it and as
 * CRIU's cuda plugin does it: stasis locks every CUDA process of the tree
 * at the first PAUSE_DEVICES, which CRIU runs with the root's PID before it
 * seizes the tree (then for each child before it seizes that); at the first CHECKPOINT_DEVICES,
 * once the whole tree is frozen, stasis checkpoints all of them at once while only their CUDA
 * restore threads run (woken here, stopped again after). No other thread
 * of the job runs while the driver moves its GPU state into host memory:
 * a job whose threads touch that memory meanwhile (JAX's do) crashed when
 * they ran on. At the plugin's fini, before CRIU lets the tree run again
 * (after a failure, or with --leave-running), stasis brings the GPU state
 * back the same way, restore threads alone awake: a JAX job whose GPU
 * state came back after CRIU had let its threads run died of SIGSEGV.
 * Without $STASIS_PLUGIN_SOCKET (a CRIU run that is not stasis's) the
 * hooks pass. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plugin-wire.h"
#include "plugin.h"

/* CRIU's switch to seize a tree in a frozen cgroup with PTRACE_INTERRUPT
 * alone (seize.c): a thread of a frozen cgroup cannot be woken for the
 * driver; CRIU's cuda plugin sets it too. */
extern void set_compel_interrupt_only_mode(void) __attribute__((weak));

/* stasis's CRIU (patch 0011): whether the dump leaves the tasks running. */
extern int cr_plugin_dump_leaves_running(void) __attribute__((weak));

/* stasis's CRIU (patch 0011): the dump's root task, known at init. */
extern int cr_plugin_dump_root_pid(void) __attribute__((weak));

/* Whether pid has a GPU device file open: 1, 0 (also where it is gone),
 * or -1 where it cannot be read. */
static int opens_gpu(pid_t pid)
{
	char dir[64], link[PATH_MAX + 64], path[PATH_MAX];
	struct dirent *e;
	DIR *d;
	int found = 0;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -1;
	while (!found && (e = readdir(d))) {
		ssize_t n;

		if (e->d_name[0] == '.')
			continue;
		snprintf(link, sizeof(link), "%s/%s", dir, e->d_name);
		n = readlink(link, path, sizeof(path) - 1);
		if (n <= 0)
			continue;
		path[n] = '\0';
		found = plugin_is_gpu_path(path);
	}
	closedir(d);
	return found;
}

/* Appends the children of pid's threads to tree (n of cap). */
static int add_children(pid_t pid, pid_t *tree, size_t *n, size_t cap)
{
	char dir[64], path[128];
	struct dirent *e;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
	d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : -1;
	while ((e = readdir(d))) {
		FILE *f;
		int child;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s/children", dir, e->d_name);
		f = fopen(path, "re");
		if (!f && errno == ENOENT)
			continue; /* the thread is gone */
		if (!f) {
			closedir(d);
			return -1;
		}
		while (fscanf(f, "%d", &child) == 1 && *n < cap)
			tree[(*n)++] = child;
		fclose(f);
	}
	closedir(d);
	return *n < cap ? 0 : -1;
}

/* Whether a process of the tree of root has the GPU's device files open:
 * only then have the GPU steps, and CRIU's interrupt-only seize that they
 * need, a reason to run. That seize thaws a cgroup the runtime froze
 * before it called CRIU (ctr and the CRI do), and the processes run until
 * CRIU holds them: a CPU container keeps CRIU's own freeze. The tree is
 * taken to use the GPU where it cannot be read (or CRIU cannot name its
 * root, or the root is gone), and where the user names another driver
 * library (STASIS_LIBCUDA), which need not open the machine's device
 * files. A process that opens the GPU after this look (PyTorch does so at
 * its first CUDA call) makes the dump fail on its device files, with no
 * GPU step run, and the tree runs on. */
static bool tree_uses_gpu(pid_t root)
{
	enum { MAX_TREE = 8192 };
	const char *driver = plugin_setting("STASIS_LIBCUDA");
	pid_t *tree = malloc(MAX_TREE * sizeof(*tree));
	size_t n = 1;
	bool uses = true;

	if (!tree || root <= 0 || (driver && *driver)) {
		free(tree);
		return true;
	}
	tree[0] = root;
	if (kill(root, 0) < 0) {
		free(tree);
		return true;
	}
	for (size_t i = 0; i < n; i++) {
		int r = opens_gpu(tree[i]);

		if (r != 0 || add_children(tree[i], tree, &n, MAX_TREE) < 0)
			break;
		if (i == n - 1)
			uses = false;
	}
	free(tree);
	return uses;
}

/* One dump per CRIU process: what the hooks have done of it. */
static struct {
	bool asked;	   /* stasis asked for the GPU steps */
	bool paused;	   /* the lock request ran */
	bool checkpointed; /* the checkpoint request ran */
	bool copied;	   /* it checkpointed at least one process */
} dump;

void gpu_dump_init(void)
{
	const char *socket = plugin_setting("STASIS_PLUGIN_SOCKET");
	pid_t root = cr_plugin_dump_root_pid ? cr_plugin_dump_root_pid() : 0;

	if (socket) {
		/* Set and empty: stasis runs this CRIU and has no GPU work. */
		dump.asked = *socket != '\0';
	} else if (!tree_uses_gpu(root)) {
		plugin_log(PLUGIN_LOG_INFO, "no process of the tree of PID %d uses the GPU",
			   (int)root);
		dump.asked = false;
	} else {
		dump.asked = plugin_helper_start() == 0;
	}
	dump.paused = dump.checkpointed = dump.copied = false;
	if (dump.asked && set_compel_interrupt_only_mode)
		set_compel_interrupt_only_mode();
}

/* One step through the channel: 0, or -1 with the cause in CRIU's log. */
static int ask_stasis(const char *step, pid_t root)
{
	char request[64], *answer = malloc(WIRE_MAX_MESSAGE);
	int fd = plugin_connect_stasis(), r;

	if (fd < 0 || !answer) {
		plugin_log(PLUGIN_LOG_ERROR, "cannot reach stasis for the GPU %s: %s", step,
			   strerror(fd < 0 ? -fd : ENOMEM));
		if (fd >= 0)
			close(fd);
		free(answer);
		return -1;
	}
	if (root)
		snprintf(request, sizeof(request), "%s %d", step, (int)root);
	else
		snprintf(request, sizeof(request), "%s", step);
	if (root)
		plugin_log(PLUGIN_LOG_INFO, "GPU %s of the tree of PID %d", step, (int)root);
	else
		plugin_log(PLUGIN_LOG_INFO, "GPU %s", step);
	r = plugin_exchange(fd, request, answer, WIRE_MAX_MESSAGE, strcmp(step, "checkpoint") == 0);
	close(fd);
	if (r == 1)
		plugin_log(PLUGIN_LOG_ERROR, "GPU %s failed: %s", step,
			   strncmp(answer, "fail ", 5) == 0 ? answer + 5 : answer);
	else if (r < 0)
		plugin_log(PLUGIN_LOG_ERROR, "GPU %s failed: %s", step, strerror(-r));
	else
		plugin_log(PLUGIN_LOG_INFO, "GPU %s done", step);
	free(answer);
	return r == 0 ? 0 : -1;
}

int gpu_pause_devices(int pid)
{
	unsigned int left;
	int r;

	if (!dump.asked)
		return -ENOTSUP;
	/* CRIU calls it for the root, then for each child before it seizes
	 * it: stasis locks every CUDA process of the tree at the first. */
	if (dump.paused)
		return 0;
	dump.paused = true;
	/* CRIU's freeze timeout is armed already; the lock has a deadline of
	 * its own (stasis's --timeout, with its tries for NCCL ranks), so
	 * the freeze's clock stops while it runs. */
	left = alarm(0);
	r = ask_stasis("pause", pid);
	if (left)
		alarm(left);
	return r;
}

int gpu_checkpoint_devices(int pid)
{
	if (!dump.asked)
		return -ENOTSUP;
	/* The first call comes with the whole tree frozen: all at once. */
	if (dump.checkpointed)
		return 0;
	dump.checkpointed = true;
	if (ask_stasis("checkpoint", pid) < 0)
		return -1;
	dump.copied = plugin_woken_last > 0;
	return 0;
}

void gpu_dump_fini(int ret)
{
	int leaves_running = cr_plugin_dump_leaves_running ? cr_plugin_dump_leaves_running() : -1;
	char step[32];

	if (dump.asked && dump.paused) {
		/* A tree that runs on (a failure, --leave-running) needs its
		 * GPU state back now; stasis says which threads. */
		snprintf(step, sizeof(step), "finish %d %d", ret, leaves_running);
		ask_stasis(step, 0);
	}
	plugin_helper_stop();
}

bool gpu_dump_handles_devices(void)
{
	/* stasis runs this CRIU: its preflight saw the device files, and
	 * checked which processes are CUDA's. The helper knows less (a
	 * driver it could not load finds no CUDA process): only what is left
	 * after a GPU checkpoint of the tree, as DataLoader workers hold it. */
	if (plugin_setting("STASIS_PLUGIN_SOCKET"))
		return true;
	return plugin_helper_fd() >= 0 && dump.copied;
}
