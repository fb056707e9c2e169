/* SPDX-License-Identifier: MIT */
#include "container.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proc.h"
#include "progress.h"
#include "util.h"

int container_describe(const struct target *t, struct manifest *m, const char *spec,
		       const pid_t *pids, size_t n, struct stasis_error **err)
{
	int r = 0;

	m->container.runtime = strdup(t->ops->runtime);
	m->container.id = strdup(t->id);
	m->container.bundle = t->bundle[0] ? strdup(t->bundle) : NULL;
	m->container.namespace = t->namespace[0] ? strdup(t->namespace) : NULL;
	m->container.spec = spec ? strdup(spec) : NULL;
	for (size_t i = 0; r == 0 && i < n; i++) {
		r = proc_describe(pids[i], m, err);
		if (r == 0)
			m->procs[m->nprocs - 1].ns_pid = proc_ns_pid(pids[i]);
	}
	return r;
}

int container_adopt(const struct target *t, struct manifest *m, const pid_t *pids, size_t n,
		    struct stasis_error **err)
{
	_cleanup_free_ pid_t *ns = calloc(n ? n : 1, sizeof(*ns));

	if (!ns)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		ns[i] = proc_ns_pid(pids[i]);
	for (size_t j = 0; j < m->nprocs; j++) {
		struct manifest_process *p = &m->procs[j];
		pid_t host = 0;

		for (size_t i = 0; i < n && !host; i++)
			if (ns[i] == p->ns_pid)
				host = pids[i];
		if (!host && p->cuda)
			return stasis_error_set(err, ESRCH, STASIS_DOMAIN_CRIU, 0,
						"CUDA process %d of container '%s' (PID %d inside) "
						"is not there after the %s restore",
						(int)p->pid, t->id, (int)p->ns_pid,
						t->ops->runtime);
		p->pid = host;
	}
	return 0;
}

static bool contains(const pid_t *pids, size_t n, pid_t pid)
{
	for (size_t i = 0; i < n; i++)
		if (pids[i] == pid)
			return true;
	return false;
}

int container_processes(pid_t init, pid_t **pids, size_t *n, struct stasis_error **err)
{
	char cgroup[PATH_MAX], path[PATH_MAX + 64];
	_cleanup_free_ char *procs = NULL;
	char *save = NULL;
	int r = proc_tree(init, pids, n, err);

	if (r < 0)
		return r;
	proc_cgroup(init, cgroup, sizeof(cgroup));
	if (!cgroup[0])
		return 0;
	snprintf(path, sizeof(path), "/sys/fs/cgroup%s/cgroup.procs", cgroup);
	procs = read_file_str(path, NULL);
	for (char *tok = procs ? strtok_r(procs, "\n", &save) : NULL; tok;
	     tok = strtok_r(NULL, "\n", &save)) {
		pid_t pid = (pid_t)atoi(tok);
		pid_t *bigger;

		if (pid <= 0 || contains(*pids, *n, pid))
			continue;
		bigger = realloc(*pids, (*n + 1) * sizeof(**pids));
		if (!bigger)
			return stasis_error_errno(err, ENOMEM, "out of memory");
		*pids = bigger;
		(*pids)[(*n)++] = pid;
	}
	return 0;
}

int container_require_running(const char *id, const char *status, struct stasis_error **err)
{
	if (strcmp(status, "running") == 0)
		return 0;
	stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
			 "container '%s' is not running (it is %s)", id, status);
	return stasis_error_hint(err, "only a running container can be checkpointed");
}
