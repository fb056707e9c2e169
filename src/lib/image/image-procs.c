/* SPDX-License-Identifier: MIT */
/* The manifest's process list against CRIU's own process tree. The
 * preflight lists the tree before anything changes; the tree may fork or
 * lose a child before CRIU freezes it. So after the dump the list is the
 * image's, with what the preflight learned kept for the processes it saw;
 * and a restore runs CRIU only on an image whose processes and
 * credentials are the ones its manifest states. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "criu-tree.h"
#include "image.h"
#include "util.h"

/* A container's processes (and those of a tree that is its PID
 * namespace's init) are in CRIU's image by their PIDs inside it. */
static bool keyed_by_ns_pid(const struct manifest *m)
{
	if (m->container.runtime)
		return true;
	for (size_t i = 0; i < m->nprocs; i++)
		if (m->procs[i].ns_pid)
			return true;
	return false;
}

/* The unused process of m whose PID (or PID inside) is pid, or -1. */
static ssize_t find_process(const struct manifest *m, bool by_ns, pid_t pid, const bool *used)
{
	for (size_t i = 0; i < m->nprocs; i++)
		if (!used[i] && (by_ns ? m->procs[i].ns_pid : m->procs[i].pid) == pid)
			return (ssize_t)i;
	return -1;
}

/* The PID on the host of the process among procs[0..n) whose PID inside
 * is ns_pid, or 0 where it is not known. */
static pid_t host_pid(const struct manifest_process *procs, size_t n, pid_t ns_pid)
{
	for (size_t i = 0; i < n; i++)
		if (procs[i].ns_pid == ns_pid)
			return procs[i].pid;
	return 0;
}

int image_take_processes(const char *criu_dir, struct manifest *m, struct stasis_error **err)
{
	bool by_ns = keyed_by_ns_pid(m);
	struct criu_image_tree tree;
	_cleanup_free_ bool *used = NULL;
	struct manifest_process *procs;
	size_t n;
	int r = criu_image_tree_read(criu_dir, &tree, err);

	if (r < 0) {
		stasis_error_wrap(err, "reading the image's process tree");
		return r;
	}
	n = tree.nprocs;
	used = calloc(m->nprocs ? m->nprocs : 1, sizeof(*used));
	procs = calloc(tree.nprocs, sizeof(*procs));
	if (!used || !procs) {
		free(procs);
		criu_image_tree_free(&tree);
		return stasis_error_errno(err, ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < tree.nprocs; i++) {
		const struct criu_image_process *ip = &tree.procs[i];
		ssize_t j = find_process(m, by_ns, ip->pid, used);

		if (j >= 0) {
			used[j] = true;
			procs[i] = m->procs[j];
			m->procs[j].cmdline = NULL; /* moved */
		} else {
			procs[i].pid = by_ns ? 0 : ip->pid;
			procs[i].ns_pid = by_ns ? ip->pid : 0;
			procs[i].ppid = by_ns ? host_pid(procs, i, ip->ppid) : 0;
			snprintf(procs[i].comm, sizeof(procs[i].comm), "%s", ip->comm);
		}
		/* The root's parent is outside the image (CRIU writes 0). */
		if (i > 0 && !by_ns)
			procs[i].ppid = ip->ppid;
		procs[i].zombie = ip->zombie;
		procs[i].creds = ip->creds;
	}
	criu_image_tree_free(&tree);
	/* The processes gone before the freeze. */
	for (size_t j = 0; j < m->nprocs; j++)
		free(m->procs[j].cmdline);
	free(m->procs);
	m->procs = procs;
	m->nprocs = n;
	return 0;
}

#define CHANGED_HINT                                                                               \
	"the image was changed since its checkpoint; restore an image as stasis wrote it"

/* Each process of the image is one of m's with the same credentials, and
 * m lists no other. */
static int check_tree(const struct criu_image_tree *tree, const struct manifest *m, bool *used,
		      struct stasis_error **err)
{
	bool by_ns = keyed_by_ns_pid(m);
	char have[64], want[64];
	int r;

	if (tree->nprocs != m->nprocs) {
		r = stasis_error_set(err, EPERM, STASIS_DOMAIN_IMAGE, 0,
				     "CRIU's image holds %zu process%s, its manifest lists %zu",
				     tree->nprocs, tree->nprocs == 1 ? "" : "es", m->nprocs);
		stasis_error_hint(err, CHANGED_HINT);
		return r;
	}
	for (size_t i = 0; i < tree->nprocs; i++) {
		const struct criu_image_process *ip = &tree->procs[i];
		ssize_t j = find_process(m, by_ns, ip->pid, used);

		if (j < 0) {
			r = stasis_error_set(err, EPERM, STASIS_DOMAIN_IMAGE, 0,
					     "process %d of CRIU's image is not in its manifest",
					     (int)ip->pid);
			stasis_error_hint(err, CHANGED_HINT);
			return r;
		}
		used[j] = true;
		if (ip->zombie != m->procs[j].zombie) {
			r = stasis_error_set(
			    err, EPERM, STASIS_DOMAIN_IMAGE, 0,
			    "CRIU's image has process %d %s, its manifest does not", (int)ip->pid,
			    ip->zombie ? "a zombie" : "alive");
			stasis_error_hint(err, CHANGED_HINT);
			return r;
		}
		if (ip->zombie)
			continue;
		if (!m->procs[j].creds.known) {
			r = stasis_error_set(err, EPERM, STASIS_DOMAIN_IMAGE, 0,
					     "the manifest states no credentials for process %d",
					     (int)ip->pid);
			stasis_error_hint(err, "an image of an older stasis: checkpoint the "
					       "workload again with this one");
			return r;
		}
		if (manifest_creds_equal(&ip->creds, &m->procs[j].creds))
			continue;
		manifest_creds_format(&ip->creds, have, sizeof(have));
		manifest_creds_format(&m->procs[j].creds, want, sizeof(want));
		r = stasis_error_set(err, EPERM, STASIS_DOMAIN_IMAGE, 0,
				     "CRIU's image gives process %d the IDs %s, its manifest %s",
				     (int)ip->pid, have, want);
		stasis_error_hint(err, CHANGED_HINT);
		return r;
	}
	return 0;
}

int image_check_processes(const char *criu_dir, const struct manifest *m, struct stasis_error **err)
{
	struct criu_image_tree tree;
	_cleanup_free_ bool *used = calloc(m->nprocs ? m->nprocs : 1, sizeof(*used));
	int r;

	if (!used)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	r = criu_image_tree_read(criu_dir, &tree, err);
	if (r < 0) {
		stasis_error_wrap(err, "reading the image's process tree");
		return r;
	}
	r = check_tree(&tree, m, used, err);
	criu_image_tree_free(&tree);
	return r;
}
