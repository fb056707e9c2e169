/* SPDX-License-Identifier: MIT */
/* Test-only fault injection, like CRIU's CRIU_FAULT: STASIS_FAULT names the
 * steps that must fail, as "step" or "step:PID", comma-separated. Steps:
 * lock, checkpoint, criu-dump, manifest, criu-restore, restore, unlock,
 * serve (no FUSE folder for a compressed image's pages, nor for those a
 * migration received), serve-mount (a migration's received pages: the
 * FUSE folder fails once they are in memory), rootfs-diff (a
 * containerd image container's diff at checkpoint), rootfs-apply (its
 * apply at restore, inside the runc link), stage-slow (the write of a
 * staged --leave-running image sleeps 0.5 s a chunk), dump-slow (a tree's
 * CRIU dump starts 1.2 s late, its progress shown), hold-slow (NCCL ranks
 * held 3 s longer once at one collective, before the lock), and
 * "signal-after-checkpoint" (raise SIGTERM mid-way). */
#ifndef STASIS_FAULT_H
#define STASIS_FAULT_H

#include <stdbool.h>
#include <sys/types.h>

bool fault_at(const char *step, pid_t pid);

#endif
