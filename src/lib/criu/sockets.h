/* SPDX-License-Identifier: MIT */
/* Sockets CRIU cannot restore safely or at all, found before anything
 * changes: TCP connections it refuses to save without --tcp-established
 * (it finds them only while it dumps, after the GPU state was
 * checkpointed, and the job then depends on the rollback), and unix
 * sockets bound in folders other users can change. */
#ifndef STASIS_SOCKETS_H
#define STASIS_SOCKETS_H

#include "error.h"
#include "manifest.h"

/* Refuse a process of m that holds a unix socket bound to a path whose
 * folders a user other than root can change: CRIU's restore binds it again
 * as root along that path (stasis's CRIU then sets its owner and mode
 * through a descriptor, patch 0009). Directly in a sticky folder shared by
 * all (/tmp) only with both link protections on: CRIU connects the
 * socket's clients to it by path, as root. Then, unless m's options
 * keep established connections, one that holds a TCP socket connected or
 * closing (CRIU's sk-inet.c refuses those states), naming the process and
 * the connection's ports: found by sock_diag in the process's network
 * namespace, and refused too where the kernel cannot be asked. */
int sockets_check(const struct manifest *m, struct stasis_error **err);

#endif
