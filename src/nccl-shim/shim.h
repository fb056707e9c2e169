/* SPDX-License-Identifier: MIT */
/* What the interposer's two halves share: the counting at collective
 * boundaries (nccl-shim.c) and the communicators behind the job's handles,
 * taken apart and made again (nccl-shim-comms.c). */
#ifndef STASIS_NCCL_SHIM_H
#define STASIS_NCCL_SHIM_H

#include <stdbool.h>
#include <stdint.h>

#include "nccl-shim-wire.h"

/* NCCL's types, as its ABI has them: enums are ints, handles pointers. */
typedef int nccl_result;
typedef struct nccl_comm *nccl_comm;
typedef void *cuda_stream;
typedef struct {
	char internal[NCCL_SHIM_UID_BYTES];
} nccl_unique_id;

#define NCCL_SUCCESS 0
#define NCCL_SYSTEM_ERROR 2
#define NCCL_INTERNAL_ERROR 3
#define NCCL_INVALID_USAGE 5
#define NCCL_IN_PROGRESS 7
#define NCCL_SPLIT_NOCOLOR -1

#define EXPORT __attribute__((visibility("default")))

/* NCCL's profiling name of a wrapper (pncclX for ncclX): the same
 * function, so that a job calling it holds the same handles. */
#define PROFILING_NAME(name) EXPORT __typeof__(name) p##name __attribute__((alias(#name)));

/* NCCL's definition of name (nccl-shim.c). */
void *shim_real(const char *name);

#define REAL(name, type)                                                                           \
	static __typeof__(type) fn_##name;                                                         \
	if (!fn_##name)                                                                            \
		fn_##name = (type)shim_real(#name);                                                \
	if (!fn_##name)                                                                            \
		return NCCL_SYSTEM_ERROR;

/* The block, once a communicator made it (NULL before, or without memfd). */
extern struct nccl_shim_block *shim_block;
void shim_make_block(void);

/* Whether the stasis that holds this rank has gone (nccl-shim.c). */
bool shim_holder_gone(void);

/* ---- nccl-shim-comms.c ---- */

/* The slot of a handle the job holds (-1: not one of the interposer's). */
int shim_slot_of(nccl_comm handle);

/* NCCL's communicator behind a slot's handle (NULL while taken apart). */
nccl_comm shim_real_comm(int slot);

/* NCCL's id of a reduction operator the job got for slot's communicator. */
int shim_real_op(int slot, int op);

/* Whether the job's threads may use NCCL's communicators: not while they
 * are taken apart or being made again. */
bool shim_gate_open(void);
/* Whether making them again failed: a call then fails rather than wait. */
bool shim_gate_failed(void);

/* Something of the job's that keeps its communicators from being taken
 * apart (enum nccl_shim_unsafe), for good. */
void shim_mark_unsafe(uint32_t bit);

/* Set in the interposer's own thread: what NCCL calls back into the
 * wrappers from it (while it makes communicators again, the gate closed)
 * passes straight on. */
extern __thread bool shim_servicing;

/* Threads inside one of NCCL's calls on a communicator (or a group): the
 * teardown waits until there are none. */
void shim_inside_add(void);
void shim_inside_drop(void);

#endif
