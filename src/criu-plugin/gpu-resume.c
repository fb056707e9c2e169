/* SPDX-License-Identifier: MIT */
/* The GPU restore while CRIU still holds the tree, as the driver wants it:
 * every thread stays in its ptrace-stop except each CUDA process's restore
 * thread, which the driver's restore needs running. In RESUME_DEVICES_LATE,
 * before CRIU lets the restored tree run, the plugin asks stasis over the
 * socket in $STASIS_PLUGIN_SOCKET which threads to wake, wakes them, lets
 * stasis run the driver's restore and unlock for all processes at once, and
 * stops them again (gpu-dump.c does the same for the checkpoint). CRIU is the tracer of every
 * thread then, so only CRIU's process, this plugin, can wake one. Without the variable (a CRIU run
 * that is not stasis's) it does nothing. (The same at the end of a dump, as CRIU's cuda plugin does
 * it, hung with driver 580: stasis resumes a dumped tree after CRIU has let it go.)
 *
 * (plugin-talk.c has the messages.)
 * A failed restore kills the tree while no restored thread has run. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plugin-wire.h"
#include "plugin.h"

#define MAX_TREE 8192

/* The restored tree under root: root and every descendant, from the
 * children files of each thread (every one of them is stopped now). */
static size_t tree_pids(pid_t root, pid_t *pids, size_t max)
{
	size_t n = 0;

	pids[n++] = root;
	for (size_t i = 0; i < n; i++) {
		char path[64];
		FILE *f;
		long child;

		snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pids[i],
			 (int)pids[i]);
		f = fopen(path, "re");
		if (!f)
			continue;
		while (n < max && fscanf(f, "%ld", &child) == 1)
			pids[n++] = (pid_t)child;
		fclose(f);
	}
	return n;
}

static char *restore_request(pid_t root, pid_t *pids, size_t *n)
{
	size_t len = 0, cap = 64 + (size_t)MAX_TREE * 12;
	char *msg = malloc(cap);

	*n = tree_pids(root, pids, MAX_TREE);
	if (!msg)
		return NULL;
	len = (size_t)snprintf(msg, cap, "resume restore");
	for (size_t i = 0; i < *n; i++)
		len += (size_t)snprintf(msg + len, cap - len, " %d", (int)pids[i]);
	return msg;
}

/* Appends pid's threads other than its leader; false when out of memory. */
static bool push_threads(struct pid_list *l, pid_t pid)
{
	char path[64];
	struct dirent *de;
	bool ok = true;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return true;
	while (ok && (de = readdir(d))) {
		long tid = strtol(de->d_name, NULL, 10);

		if (tid > 0 && tid != pid)
			ok = pid_list_push(l, (pid_t)tid);
	}
	closedir(d);
	return ok;
}

/* Waits, as its tracer, until tid has died; gives up after about 10 s. */
static void reap_tracee(pid_t tid)
{
	for (int i = 0; i < 10000; i++) {
		int status;
		pid_t r = waitpid(tid, &status, __WALL | WNOHANG);

		if (r < 0 || (r == tid && (WIFEXITED(status) || WIFSIGNALED(status))))
			return;
		if (r == 0)
			usleep(1000);
	}
}

/* Kills the tree, then reaps every thread of it but the root's leader,
 * each process's leader after its other threads. CRIU traces them all, and
 * a traced thread that dies stays a zombie until its tracer waits for it;
 * the init of a PID namespace does not finish dying before its children
 * are gone, and CRIU's failure path waits for that init before anything
 * else: without this, the failed restore of a tree rooted at a namespace's
 * init never ends. The root's leader is left to CRIU, its parent. */
static void kill_tree(const pid_t *pids, size_t n)
{
	struct pid_list l = {0};
	bool listed = true;

	/* The root's other threads last: the one of them that exits last
	 * waits, as a namespace's init, for all the rest to be reaped. */
	for (size_t i = 1; i < n && listed; i++)
		listed = push_threads(&l, pids[i]) && pid_list_push(&l, pids[i]);
	listed = listed && push_threads(&l, pids[0]);
	for (size_t i = 0; i < n; i++)
		kill(pids[i], SIGKILL);
	for (size_t i = 0; listed && i < l.n; i++)
		reap_tracee(l.pids[i]);
	free(l.pids);
}

int gpu_resume_devices_late(int pid)
{
	static bool done;
	static pid_t pids[MAX_TREE];
	char *answer, *request;
	size_t n = 0;
	int fd, r;

	/* The first call is for the root; the whole tree is stopped by then. */
	if (done)
		return 0;
	done = true;
	fd = plugin_connect_stasis();
	if (fd == -ENOENT)
		return 0;
	if (fd < 0)
		return fd;
	answer = malloc(WIRE_MAX_MESSAGE);
	request = restore_request(pid, pids, &n);
	r = answer && request ? plugin_exchange(fd, request, answer, WIRE_MAX_MESSAGE, false)
			      : -ENOMEM;
	close(fd);
	free(answer);
	free(request);
	/* No restored thread has run yet: the half-restored tree dies here,
	 * so that CRIU's restore fails instead of resuming it. */
	if (r != 0) {
		plugin_log(PLUGIN_LOG_ERROR,
			   "the GPU restore failed (%d): the restored tree is killed", r);
		kill_tree(pids, n);
	} else
		plugin_log(PLUGIN_LOG_INFO, "GPU state restored for the tree of PID %d", pid);
	return r == 0 ? 0 : -1;
}
