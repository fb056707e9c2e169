/* SPDX-License-Identifier: MIT */
/* The communicators behind the job's handles: what nccl-shim-comms.c
 * (the calls that make, use and end them) and nccl-shim-rebuild.c (their
 * teardown and rebuild, on stasis's word) share. */
#ifndef STASIS_SHIM_COMMS_H
#define STASIS_SHIM_COMMS_H

#include <pthread.h>

#include "shim.h"

/* NCCL 2.19 to 2.30: every function of theirs that takes a communicator
 * is wrapped below, and their ncclConfig_t has netName and commName at
 * these offsets. */
#define NCCL_KNOWN_FIRST 21900
#define NCCL_KNOWN_LAST 23099
#define CONFIG_NET_NAME_AT 32
#define CONFIG_COMM_NAME_AT 48
#define CONFIG_MAX 256
#define NAME_MAX_LEN 128

#define LOG_MAX 128 /* creations kept for the rebuild */
#define OPS_MAX 8   /* live reduction operators of one communicator */

/* A reduction operator made for a communicator (ncclRedOpCreatePreMulSum),
 * made again with it. NCCL's ids mix in the communicator's address, so the
 * job holds an id of the interposer's (synthetic_op) and gets NCCL's
 * current one at each call. */
struct redop {
	bool used;
	int real; /* NCCL's id, for the communicator of now */
	int datatype, residence;
	unsigned char scalar[8]; /* the value (host) or the pointer (device) */
};

/* The job's id of slot's operator i: far above NCCL's built-in ones, never
 * a value NCCL hands out for another communicator of the interposer's. */
#define SYNTHETIC_OP_BASE 0x51000000
#define SYNTHETIC_OP(slot, i) (SYNTHETIC_OP_BASE | ((slot) << 8) | (i))

/* One creation of the job's, in the order it came: what it takes to make
 * the communicator again. A split stays in the log while its parent does,
 * whatever became of its child: every rank of the parent must split it
 * again, in the same order. */
struct creation {
	bool used;
	bool split;
	bool alive;	/* the job holds its communicator */
	int slot;	/* its handle's slot, -1: none (NOCOLOR, or destroyed) */
	int parent;	/* a split's parent, an index in the log */
	int color, key; /* a split's */
	int rank, nranks;
	int device; /* the CUDA device, read at the teardown */
	bool has_config;
	unsigned char config[CONFIG_MAX];
	char net_name[NAME_MAX_LEN], comm_name[NAME_MAX_LEN];
	nccl_comm made; /* made again, during the rebuild */
};

/* A handle the job holds is &handles[slot]. */
struct shim_handle {
	nccl_comm real; /* NULL while taken apart */
	int entry;	/* its creation, an index in the log */
	int rank, nranks, device;
	uint64_t splits; /* how many times it was split, for its children's ids */
	unsigned int registered, windows, device_comms;
	struct redop ops[OPS_MAX];
};

extern struct shim_handle shim_handles[NCCL_SHIM_COMMS];
extern struct creation shim_creations[LOG_MAX];
extern int shim_ncreations;
extern pthread_mutex_t shim_comms_lock;
/* Handles of the interposer's: an NCCL it knows. Decided at the first
 * communicator, never changed after. */
extern int shim_wrap_handles;
extern unsigned int shim_inside;
enum gate { GATE_OPEN, GATE_CLOSED, GATE_FAILED };
extern unsigned int shim_gate;

/* Order of creation: a slot of the log is reused, so each keeps its rank
 * in the order (the rebuild follows it). */
extern uint64_t shim_creation_seq[LOG_MAX];

#define SCALAR_DEVICE 0 /* ncclScalarDevice */

/* NCCL's id of the operator op of slot's communicator (op itself where it
 * is not one of the interposer's). */
int shim_real_op(int slot, int op);

/* Into NCCL with handle, once the communicators are the job's (waits
 * while they are taken apart): *real is NCCL's communicator behind it,
 * *slot its slot (-1: not one of the interposer's, passed on as it is).
 * Fails where making them again failed. shim_leave after the call. */
nccl_result shim_enter(nccl_comm handle, nccl_comm *real, int *slot);
void shim_leave(int slot);

/* The block's unsafe bits from what the live communicators hold; with
 * bit added for good. Both with the comms lock held. */
void shim_update_unsafe(void);
void shim_add_unsafe(uint32_t bit);

/* The thread that takes the communicators apart and makes them again. */
void *shim_service(void *arg);

#endif
