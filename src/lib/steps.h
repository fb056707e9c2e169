/* SPDX-License-Identifier: MIT */
/* The steps that process-tree and container checkpoints share; internal to
 * the library. */
#ifndef STASIS_STEPS_H
#define STASIS_STEPS_H

#include "criu-settings.h"
#include "error.h"
#include "gpu-handoff.h"
#include "gpu.h"
#include "gpumap.h"
#include "image.h"
#include "manifest.h"

/* PID names a live process that is not stasis or its parent, and leads
 * its session unless shell_job: what CRIU's dump of a tree needs. */
int checkpoint_preflight_tree(pid_t pid, bool shell_job, struct stasis_error **err);

/* stasis version, time, host name and kernel into m, and how CRIU's page
 * writers are set up here (after criu_version(), which sets them). */
void checkpoint_fill_host_facts(struct manifest *m);

/* Which processes of m use CUDA (into batch), their GPUs, and every refusal
 * that must come before anything changes: what the driver cannot
 * checkpoint, what CRIU cannot save, an image that cannot fit dir; with
 * keeps_running, a process that cannot run on while checkpointed; without
 * same_machine (a migration), what only this machine could restore. */
int checkpoint_preflight(struct manifest *m, struct gpu_batch *batch, const char *dir,
			 bool compress, bool keeps_running, bool same_machine,
			 struct stasis_error **err);

/* dump(ctx) (a target's CRIU or runc dump) with the GPU steps of the
 * plan's processes inside it: every CUDA process locked before CRIU seizes the tree and
 * checkpointed, in parallel, once it is frozen, then checked for what CRIU
 * cannot save; after a failure or with the plan's leave_running, restored and
 * unlocked before CRIU lets the tree go. Returns dump's result, or the GPU
 * step's failure in its place. The caller then rolls back what is not
 * running yet (checkpoint_dump_end). The plugin's socket goes into criu,
 * which dump gives its CRIU, while it runs. */
int checkpoint_dump_gpus_inside(const struct gpu_dump_plan *plan, struct criu_settings *criu,
				int (*dump)(void *ctx, struct stasis_error **err), void *ctx,
				struct stasis_error **err);

/* After CRIU's or runc's dump, r its result: roll back every CUDA process
 * after a failure, restore and unlock them with leave_running. */
int checkpoint_dump_end(struct gpu_batch *batch, struct manifest *m, bool leave_running, int r,
			struct stasis_error **err);

/* With --compress (packer not NULL): compress what is left once CRIU is
 * done and copy the other files over; records "compress_finish". */
int checkpoint_pack_finish(struct image_packer *packer, struct manifest *m,
			   struct stasis_error **err);

/* Checksum every image file into m (with what follower, which may be NULL,
 * hashed during the dump), flush them to disk, then write the manifest:
 * the image is complete from here on, and a manifest always names an image
 * on disk. Records the "checksum" and "sync" phases. */
int checkpoint_seal_image(const char *dir, struct manifest *m, struct image_follower *follower,
			  struct stasis_error **err);

/* stasis runs as root, and the image folder given is resolved once into
 * dir (image_resolve_folder): refused where a user other than root could
 * change a folder above it. */
int stasis_enter_image_folder(const char *given, char *dir, size_t len, struct stasis_error **err);

/* Every PID of m is free, waiting a moment for zombies and orphans. */
int restore_wait_pids_free(const struct manifest *m, struct stasis_error **err);

/* Driver, GPUs and the GPU map for a restore of m, before anything runs;
 * once they pass, cuInit starts in the background (cuda_load_begin). */
int restore_gpu_preflight(const struct manifest *m, const char *map, struct gpu_plan *plan,
			  struct stasis_error **err);

/* Restore and unlock m's CUDA processes (by their PIDs in m), recording the
 * timings in m. No rollback: the caller kills what it restored. */
int restore_resume_gpus(struct manifest *m, const struct gpu_plan *plan, struct stasis_error **err);

/* After CRIU's (or runc's) restore, served what gpu_handoff_end said: the
 * GPU restore ran inside it (1), failed there (<0: gpu_err moves to err),
 * or was not asked for (0: restore_resume_gpus runs now). */
int restore_finish_gpus(struct manifest *m, const struct gpu_plan *plan, int served,
			struct stasis_error **gpu_err, struct stasis_error **err);

#endif
