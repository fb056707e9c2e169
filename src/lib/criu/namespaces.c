/* SPDX-License-Identifier: MIT */
#include "namespaces.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proc.h"
#include "util.h"

static const char *const kind_names[NS_KINDS] = {
    [NS_USER] = "user",
    [NS_MNT] = "mnt",
    [NS_PID] = "pid",
    [NS_NET] = "net",
    [NS_IPC] = "ipc",
    [NS_UTS] = "uts",
    [NS_CGROUP] = "cgroup",
    [NS_TIME] = "time",
    [NS_PID_FOR_CHILDREN] = "pid_for_children",
    [NS_TIME_FOR_CHILDREN] = "time_for_children",
};

/* In words, for the messages. */
static const char *const kind_words[NS_KINDS] = {
    [NS_USER] = "user",
    [NS_MNT] = "mount",
    [NS_PID] = "PID",
    [NS_NET] = "network",
    [NS_IPC] = "IPC",
    [NS_UTS] = "UTS",
    [NS_CGROUP] = "cgroup",
    [NS_TIME] = "time",
    [NS_PID_FOR_CHILDREN] = "PID",
    [NS_TIME_FOR_CHILDREN] = "time",
};

const char *namespaces_kind_name(enum ns_kind kind)
{
	return kind < NS_KINDS ? kind_names[kind] : "?";
}

int namespaces_read(pid_t pid, struct proc_namespaces *ns)
{
	memset(ns, 0, sizeof(*ns));
	for (int k = 0; k < NS_KINDS; k++) {
		char path[64], target[64];
		ssize_t n;

		if (pid)
			snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, kind_names[k]);
		else
			snprintf(path, sizeof(path), "/proc/self/ns/%s", kind_names[k]);
		n = readlink(path, target, sizeof(target) - 1);
		if (n < 0) {
			/* A kind this kernel lacks, or the process is gone. */
			if (errno == ENOENT || errno == ESRCH)
				continue;
			return -errno;
		}
		target[n] = '\0';
		/* "user:[4026531837]" */
		if (sscanf(target, "%*[^:]:[%lu]", &ns->ino[k]) != 1)
			return -EINVAL;
	}
	ns->ns_pid = pid ? proc_ns_pid(pid) : proc_ns_pid(getpid());
	return 0;
}

static bool differ(const struct proc_namespaces *a, enum ns_kind ka,
		   const struct proc_namespaces *b, enum ns_kind kb)
{
	return a->ino[ka] && b->ino[kb] && a->ino[ka] != b->ino[kb];
}

struct ns_verdict namespaces_judge(const struct proc_namespaces *self,
				   const struct proc_namespaces *root,
				   const struct proc_namespaces *p, bool is_root, bool cuda,
				   bool pidns_cuda_ok)
{
	/* Saved by CRIU but not restored here (user, cgroup), or not saved
	 * from outside a container (mount). */
	static const enum ns_kind lost[] = {NS_USER, NS_MNT, NS_CGROUP};
	/* CRIU restores the root's namespaces only. */
	static const enum ns_kind shared[] = {NS_USER, NS_MNT, NS_PID,	  NS_NET,
					      NS_IPC,  NS_UTS, NS_CGROUP, NS_TIME};

	if (is_root) {
		for (size_t i = 0; i < ARRAY_SIZE(lost); i++)
			if (differ(p, lost[i], self, lost[i]))
				return (struct ns_verdict){NS_OWN, lost[i]};
	} else {
		for (size_t i = 0; i < ARRAY_SIZE(shared); i++)
			if (differ(p, shared[i], root, shared[i]))
				return (struct ns_verdict){NS_NESTED, shared[i]};
	}
	if (differ(p, NS_PID_FOR_CHILDREN, p, NS_PID))
		return (struct ns_verdict){NS_FOR_CHILDREN, NS_PID_FOR_CHILDREN};
	if (differ(p, NS_TIME_FOR_CHILDREN, p, NS_TIME))
		return (struct ns_verdict){NS_FOR_CHILDREN, NS_TIME_FOR_CHILDREN};
	if (differ(p, NS_PID, self, NS_PID)) {
		/* A PID namespace comes back as a new one made by its root. */
		if (is_root && p->ns_pid != 1)
			return (struct ns_verdict){NS_PID_NOT_FIRST, NS_PID};
		/* With new PIDs here, which the GPU restore does not know. */
		if (cuda && !pidns_cuda_ok)
			return (struct ns_verdict){NS_PID_CUDA, NS_PID};
	}
	return (struct ns_verdict){NS_RESTORES, NS_KINDS};
}

/* The refusal's first half, into buf: what it is, and why. */
static void describe(const struct ns_verdict *v, const struct proc_namespaces *p, pid_t root,
		     char *buf, size_t len)
{
	const char *word = kind_words[v->kind], *name = kind_names[v->kind];

	switch (v->why) {
	case NS_OWN:
		snprintf(buf, len, "is in a %s namespace of its own (%s:[%lu]): %s", word, name,
			 p->ino[v->kind],
			 v->kind == NS_MNT ? "CRIU saves one only with a container's runtime"
					   : "CRIU saves one but cannot restore it here, and the "
					     "tree would be lost");
		break;
	case NS_NESTED:
		snprintf(buf, len,
			 "is in another %s namespace (%s:[%lu]) than the tree's root, PID %d: CRIU "
			 "restores only the root's namespaces",
			 word, name, p->ino[v->kind], (int)root);
		break;
	case NS_FOR_CHILDREN:
		snprintf(buf, len,
			 "makes its children in a new %s namespace (%s:[%lu]): CRIU cannot save "
			 "that",
			 word, name, p->ino[v->kind]);
		break;
	case NS_PID_NOT_FIRST:
		snprintf(buf, len,
			 "is in a PID namespace of its own (pid:[%lu]) as its PID %d, not as its "
			 "first process: CRIU saves a PID namespace only from its first process",
			 p->ino[NS_PID], (int)p->ns_pid);
		break;
	case NS_PID_CUDA:
		snprintf(buf, len,
			 "uses CUDA in a PID namespace of its own (pid:[%lu]): restored here it "
			 "gets new PIDs, by which the GPU restore cannot find it",
			 p->ino[NS_PID]);
		break;
	default:
		snprintf(buf, len, "has namespaces CRIU restores");
		break;
	}
}

static const char *remedy(const struct ns_verdict *v)
{
	switch (v->why) {
	case NS_OWN:
		return v->kind == NS_MNT ? "start it in stasis's mount namespace, or run it as a "
					   "runc or containerd container (--runtime)"
					 : NULL;
	case NS_NESTED:
		return "checkpoint the subtree that begins with the namespace's first process, "
		       "or start the tree in one namespace of each kind";
	case NS_FOR_CHILDREN:
		return "checkpoint its child in that namespace";
	case NS_PID_NOT_FIRST:
		return "checkpoint the namespace's first process, with its whole tree";
	default:
		return NULL;
	}
}

static int refuse(const struct manifest_process *p, pid_t root, const struct ns_verdict *v,
		  const struct proc_namespaces *ns, struct stasis_error **err)
{
	char why[320];
	const char *what = remedy(v);

	describe(v, ns, root, why, sizeof(why));
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0, "PID %d (%s) %s", (int)p->pid,
			 p->comm, why);
	if (what)
		return stasis_error_hint(err, "nothing was changed; %s", what);
	return stasis_error_hint(err,
				 "nothing was changed; start it without a %s namespace of "
				 "its own",
				 kind_words[v->kind]);
}

static int refuse_unread(const struct manifest_process *p, int r, struct stasis_error **err)
{
	stasis_error_errno(err, -r, "PID %d (%s): cannot read its namespaces: %s", (int)p->pid,
			   p->comm, strerror(-r));
	return stasis_error_hint(err, "nothing was changed");
}

int namespaces_check(const struct manifest *m, bool pidns_cuda_ok, struct stasis_error **err)
{
	const struct manifest_process *root = manifest_root(m);
	struct proc_namespaces self, root_ns;
	int r;

	/* A container's runtime makes its namespaces and has CRIU restore
	 * them as they are. */
	if (m->container.runtime || !root)
		return 0;
	r = namespaces_read(0, &self);
	if (r < 0)
		return stasis_error_errno(err, -r, "reading stasis's own namespaces: %s",
					  strerror(-r));
	r = namespaces_read(root->pid, &root_ns);
	if (r < 0)
		return refuse_unread(root, r, err);
	for (size_t i = 0; i < m->nprocs; i++) {
		const struct manifest_process *p = &m->procs[i];
		struct proc_namespaces ns = root_ns;
		struct ns_verdict v;

		if (p != root && (r = namespaces_read(p->pid, &ns)) < 0)
			return refuse_unread(p, r, err);
		v = namespaces_judge(&self, &root_ns, &ns, p == root, p->cuda, pidns_cuda_ok);
		if (v.why != NS_RESTORES)
			return refuse(p, root->pid, &v, &ns, err);
	}
	return 0;
}

bool namespaces_blocker(pid_t pid, bool cuda, char *why, size_t len)
{
	struct proc_namespaces self, ns;
	struct ns_verdict v;

	if (namespaces_read(0, &self) < 0)
		return false;
	if (namespaces_read(pid, &ns) < 0) {
		snprintf(why, len, "its namespaces cannot be read");
		return true;
	}
	/* As the root of its own tree, or, not being the first process of its
	 * PID namespace, as a process of that first process's tree. */
	v = namespaces_judge(&self, &ns, &ns, true, cuda, false);
	if (v.why == NS_PID_NOT_FIRST)
		v = namespaces_judge(&self, &ns, &ns, false, cuda, false);
	if (v.why == NS_RESTORES)
		return false;
	if (v.why == NS_FOR_CHILDREN)
		snprintf(why, len,
			 "makes its children in a new %s namespace, which CRIU cannot save",
			 kind_words[v.kind]);
	else if (v.why == NS_PID_CUDA)
		snprintf(why, len,
			 "uses CUDA in a PID namespace of its own, which the GPU restore "
			 "cannot find again");
	else
		snprintf(why, len, "in a %s namespace of its own, which CRIU cannot %s",
			 kind_words[v.kind], v.kind == NS_MNT ? "save" : "restore here");
	return true;
}
