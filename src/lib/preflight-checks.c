/* SPDX-License-Identifier: MIT */
#include "preflight-checks.h"

#include <errno.h>
#include <stdio.h>

#include "criu-rpc.h"
#include "criu-settings.h"
#include "devfiles.h"
#include "mappings.h"
#include "namespaces.h"
#include "nccl.h"
#include "peer-limit.h"
#include "preflight.h"
#include "sockets.h"

/* ---- a tree, at checkpoint and migrate ---- */

/* The GPU steps run inside CRIU's freeze, asked for by stasis's plugin,
 * which learns stasis's socket from CRIU's settings: another CRIU would
 * have the plugin do them by itself, behind stasis's back. */
static int tree_criu(const struct preflight_tree *t, struct stasis_error **err)
{
	return t->batch && t->batch->n ? preflight_criu_for_gpus(err) : 0;
}

/* A migration's destination finds CUDA processes in a PID namespace of
 * the tree's own by their PIDs inside it. */
static int tree_namespaces(const struct preflight_tree *t, struct stasis_error **err)
{
	return namespaces_check(t->m, !t->same_machine, err);
}

static int tree_gpu_mode(const struct preflight_tree *t, struct stasis_error **err)
{
	return preflight_gpu_mode(t->m, err);
}

static int tree_host_memory(const struct preflight_tree *t, struct stasis_error **err)
{
	return preflight_host_memory(t->m, err);
}

static int tree_peer_access(const struct preflight_tree *t, struct stasis_error **err)
{
	return t->batch ? peer_limit_check(t->batch, err) : 0;
}

static int tree_device_files(const struct preflight_tree *t, struct stasis_error **err)
{
	return nvidia_refs_check(t->m, false, err);
}

/* Link remaps (CRIU's --link-remap) only where the image is restored on
 * this machine after the tree is gone, and never in a container. */
static int tree_mappings(const struct preflight_tree *t, struct stasis_error **err)
{
	return mappings_check(t->m,
			      t->same_machine && !t->keeps_running && !t->m->container.runtime,
			      &t->m->options.link_remap, err);
}

static int tree_nccl(const struct preflight_tree *t, struct stasis_error **err)
{
	return nccl_ranks_check(t->m, err);
}

static int tree_sockets(const struct preflight_tree *t, struct stasis_error **err)
{
	return sockets_check(t->m, err);
}

static int tree_image_room(const struct preflight_tree *t, struct stasis_error **err)
{
	return preflight_image_room(t->m, t->dir, t->compress, err);
}

const struct preflight_tree_check preflight_tree_checks[] = {
    {"criu", tree_criu},
    {"namespaces", tree_namespaces},
    {"gpu-mode", tree_gpu_mode},
    {"host-memory", tree_host_memory},
    {"peer-access", tree_peer_access},
    {"device-files", tree_device_files},
    {"mappings", tree_mappings},
    {"nccl", tree_nccl},
    {"sockets", tree_sockets},
    {"image-room", tree_image_room},
};
const size_t preflight_tree_nchecks =
    sizeof(preflight_tree_checks) / sizeof(preflight_tree_checks[0]);

int preflight_criu_for_gpus(struct stasis_error **err)
{
	if (criu_takes_settings())
		return 0;
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_CRIU, 0,
			 "the CRIU at %s takes no settings (--setting): the GPU steps need "
			 "stasis's CRIU",
			 criu_binary());
	stasis_error_hint(err, "nothing was changed; unset STASIS_CRIU or install stasis whole");
	return stasis_error_cause(err, "criu");
}

int preflight_tree_run(const struct preflight_tree *t, struct stasis_error **err)
{
	for (size_t i = 0; i < preflight_tree_nchecks; i++) {
		int r = preflight_tree_checks[i].run(t, err);

		if (r < 0) {
			stasis_error_cause(err, preflight_tree_checks[i].cause);
			return r;
		}
	}
	return 0;
}

/* ---- one running process, at gpu suspend and in stasis ps ---- */

/* A child forked from a CUDA process (a DataLoader worker) holds the
 * device without a context of its own: only CRIU's plugin saves it. */
static bool device_files_blocker(const struct preflight_process *p, char *why, size_t len)
{
	if (p->cuda || !p->device_fds)
		return false;
	snprintf(why, len, "/dev/nvidia* held without a CUDA context (%u fds)", p->device_fds);
	return true;
}

/* A suspended process runs on: what it maps must stay as it is. */
static int mappings_refuse(const struct preflight_process *p, struct stasis_error **err)
{
	return p->cuda ? mappings_refuse_running_checkpointed(p->pid, p->comm, err) : 0;
}

static int nccl_refuse(const struct preflight_process *p, struct stasis_error **err)
{
	return p->cuda ? nccl_rank_check(p->pid, p->comm, err) : 0;
}

static bool nccl_blocker(const struct preflight_process *p, char *why, size_t len)
{
	return p->cuda && nccl_rank_blocker(p->pid, why, len);
}

/* A container's runtime makes its namespaces; a GPU suspend keeps them. */
static bool namespaces_blocks(const struct preflight_process *p, char *why, size_t len)
{
	return !p->in_container && namespaces_blocker(p->pid, p->cuda, why, len);
}

const struct preflight_process_check preflight_process_checks[] = {
    {"device-files", NULL, device_files_blocker},
    {"mappings", mappings_refuse, NULL},
    {"nccl", nccl_refuse, nccl_blocker},
    {"namespaces", NULL, namespaces_blocks},
};
const size_t preflight_process_nchecks =
    sizeof(preflight_process_checks) / sizeof(preflight_process_checks[0]);

int preflight_process_refuse(const struct preflight_process *p, struct stasis_error **err)
{
	for (size_t i = 0; i < preflight_process_nchecks; i++) {
		const struct preflight_process_check *c = &preflight_process_checks[i];
		int r = c->refuse ? c->refuse(p, err) : 0;

		if (r < 0) {
			stasis_error_cause(err, c->cause);
			return r;
		}
	}
	return 0;
}

const char *preflight_process_blocker(const struct preflight_process *p, char *why, size_t len)
{
	for (size_t i = 0; i < preflight_process_nchecks; i++) {
		const struct preflight_process_check *c = &preflight_process_checks[i];

		if (c->blocker && c->blocker(p, why, len))
			return c->cause;
	}
	if (len)
		why[0] = '\0';
	return NULL;
}
