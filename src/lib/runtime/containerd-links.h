/* SPDX-License-Identifier: MIT */
/* The runc link folders of the containers stasis restored under containerd
 * ($STASIS_RUN_DIR/containerd/NS/ID, runc-wrap.h), each with the address of
 * the containerd its container lives in: their lock and the sweep of the
 * ones whose container is gone. Internal to the containerd target. */
#ifndef STASIS_CONTAINERD_LINKS_H
#define STASIS_CONTAINERD_LINKS_H

#include "containerd.h"

#define LINKS_ADDRESS_FILE "address"

/* The lock between restores and the sweep of stale link folders, the
 * flock of their common folder: a restore makes its link folder link_dir
 * and holds the lock shared from then until containerd knows its container
 * (or the restore has cleaned up); a sweep takes it exclusive, without
 * waiting. Returns the fd to close, or -1. */
int containerd_links_hold(const char *link_dir);

/* Every link folder of c's containerd whose container it no longer knows
 * (deleted with ctr, or lost with its state), unless a restore holds the
 * lock now (the next command sweeps then). */
void containerd_links_sweep(const struct containerd *c);

#endif
