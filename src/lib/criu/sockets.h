/* SPDX-License-Identifier: MIT */
/* TCP connections CRIU refuses to save without --tcp-established, found
 * before anything changes: CRIU finds them only while it dumps, after the
 * GPU state was checkpointed, and the job then depends on the rollback. */
#ifndef STASIS_SOCKETS_H
#define STASIS_SOCKETS_H

#include "error.h"
#include "manifest.h"

/* Unless m's options keep established connections, refuse a process of m
 * that holds a TCP socket connected or closing (CRIU's sk-inet.c refuses
 * those states), naming the process and the connection's ports. */
int sockets_check(const struct manifest *m, struct stasis_error **err);

#endif
