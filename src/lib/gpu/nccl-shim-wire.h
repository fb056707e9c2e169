/* SPDX-License-Identifier: MIT */
/* What stasis's NCCL interposer (src/nccl-shim) and stasis share: a few
 * pages of counters in a sealed memfd of the rank's, of which stasis takes
 * a copy through the rank's pidfd (pidfd_getfd). The interposer counts the collectives each
 * communicator has started; stasis, to hold the ranks, sets `request`,
 * reads the counts of every rank and writes each communicator's `target`,
 * the count every rank may reach and none pass. A rank behind launches up
 * to it, a rank at it waits on the host before its next collective, and
 * nothing in flight then waits for a peer that will not come: the driver's
 * lock lands.
 * Held there, the ranks take their communicators apart on stasis's word
 * (`teardown`): what NCCL's fast transports map between processes (P2P
 * and cuMem buffers, which the driver checkpoints but cannot restore) is
 * gone before the lock. The rank 0 of each communicator made from a
 * unique id leaves the id of its next life in `next_uid`, which stasis
 * copies to the peers; once let go, each rank makes its communicators
 * again in the order they were made, behind the same handles.
 * Every field is read and written with atomics on both sides; stasis
 * trusts none of it (a job may write anything there). */
#ifndef STASIS_NCCL_SHIM_WIRE_H
#define STASIS_NCCL_SHIM_WIRE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The memfd's name; /proc/PID/fd shows it as "/memfd:stasis-nccl (deleted)". */
#define NCCL_SHIM_MEMFD "stasis-nccl"
#define NCCL_SHIM_MAGIC 0x4e434353u /* "SCCN" */
#define NCCL_SHIM_VERSION 2
#define NCCL_SHIM_COMMS 60

enum nccl_shim_request { NCCL_SHIM_RUN = 0, NCCL_SHIM_HOLD = 1 };

/* Where a rank's communicators are (the interposer's `phase`). */
enum nccl_shim_phase {
	NCCL_PHASE_UP = 0,     /* in use */
	NCCL_PHASE_GOING_DOWN, /* being taken apart */
	NCCL_PHASE_DOWN,       /* gone; made again once let go */
	NCCL_PHASE_GOING_UP,   /* being made again */
	NCCL_PHASE_FAILED,     /* taking apart or making failed: `error` says */
	/* Closed to the job's threads, none inside NCCL, nothing destroyed
	 * yet: opened again if let go, destroyed on stasis's `destroy`. */
	NCCL_PHASE_QUIET,
};

/* Why a rank's communicators cannot be taken apart (`unsafe`, bits). */
enum nccl_shim_unsafe {
	NCCL_UNSAFE_VERSION = 1 << 0,	 /* an NCCL the interposer does not know */
	NCCL_UNSAFE_SLOTS = 1 << 1,	 /* more communicators than slots */
	NCCL_UNSAFE_REGISTERED = 1 << 2, /* buffers registered with a communicator */
	NCCL_UNSAFE_WINDOW = 1 << 3,	 /* a symmetric memory window */
	NCCL_UNSAFE_DEVICE = 1 << 4,	 /* a device communicator (NCCL's device API) */
	NCCL_UNSAFE_MADE = 1 << 5,	 /* made by ncclCommInitAll, Shrink or Grow */
	NCCL_UNSAFE_LOG = 1 << 6,	 /* more creations than the log keeps */
	NCCL_UNSAFE_OPS = 1 << 7,	 /* more live reduction operators than kept */
	NCCL_UNSAFE_CONFIG = 1 << 8,	 /* a configuration larger than kept */
	NCCL_UNSAFE_GRAPH = 1 << 9,	 /* a collective captured in a CUDA graph */
};

/* A communicator made from a unique id is made again from a new one: its
 * rank 0 posts it, the others take it (stasis copies it); a split is made
 * again from its parent and needs none. */
enum nccl_shim_uid_role { NCCL_UID_NONE = 0, NCCL_UID_POSTS = 1, NCCL_UID_TAKES = 2 };

/* The capabilities of the interposer (`caps`). */
#define NCCL_SHIM_CAP_REBUILD 1u

#define NCCL_SHIM_UID_BYTES 128

/* The collective a communicator started last, for the messages. */
enum nccl_shim_op {
	NCCL_OP_NONE,
	NCCL_OP_ALL_REDUCE,
	NCCL_OP_BROADCAST,
	NCCL_OP_REDUCE,
	NCCL_OP_ALL_GATHER,
	NCCL_OP_REDUCE_SCATTER,
	NCCL_OP_ALL_TO_ALL,
	NCCL_OP_GATHER,
	NCCL_OP_SCATTER,
	NCCL_OP_SEND,
	NCCL_OP_RECV,
	NCCL_OP_COUNT
};

struct nccl_shim_comm {
	uint64_t id;	 /* the same in every rank of the communicator */
	uint64_t issued; /* collectives this rank has started on it */
	uint64_t target; /* under a hold, how far it may go (stasis's) */
	uint32_t rank, nranks;
	uint32_t last_op;  /* enum nccl_shim_op */
	uint32_t live;	   /* 1 from its creation to its destruction */
	uint32_t uid_role; /* enum nccl_shim_uid_role */
	uint32_t pad;
	/* The teardown (`gen`) that next_uid is for: the root's own, a peer's
	 * as stasis copied it. */
	uint64_t uid_gen;
	unsigned char next_uid[NCCL_SHIM_UID_BYTES];
};

struct nccl_shim_block {
	uint32_t magic, version;
	uint32_t request;   /* enum nccl_shim_request, stasis's */
	uint32_t in_check;  /* threads between their check and their count */
	uint32_t in_group;  /* threads past a group's start, not yet at its end */
	uint32_t parked;    /* threads waiting at a boundary */
	uint32_t ncomms;    /* slots used */
	uint32_t untracked; /* communicators made with every slot taken */
	uint64_t holds;	    /* holds this process has seen */
	/* The stasis that holds the ranks, where the rank sees it in its /proc
	 * (0: not known): its PID and start time (field 22 of its stat). A
	 * rank whose holder is gone lets itself go: a stasis killed while it
	 * holds the job must not leave it waiting for ever. */
	uint64_t holder_start;
	uint32_t holder_pid;
	uint32_t caps;	 /* NCCL_SHIM_CAP_*, the interposer's */
	uint32_t unsafe; /* enum nccl_shim_unsafe bits, the interposer's */
	/* Stasis's: the teardown it asks for, gen + 1 (a number, not a flag:
	 * one left by a stasis killed in the middle asks for nothing). First
	 * `teardown` (to QUIET), then, once every rank is quiet, `destroy`
	 * (to DOWN): no rank destroys anything while a peer may still be in
	 * NCCL, so a teardown that cannot finish changes nothing. */
	uint32_t teardown;
	uint32_t destroy;
	uint32_t phase; /* enum nccl_shim_phase, the interposer's */
	int32_t error;	/* NCCL's result where phase is FAILED */
	uint32_t gen;	/* communicators destroyed so far (teardowns done) */
	/* The teardown this rank could not quiet (its number; `error` says
	 * NCCL's result): nothing was destroyed, the job goes on. */
	uint32_t refused;
	uint64_t down_us; /* the last teardown's and rebuild's time */
	uint64_t up_us;
	uint64_t up_at_us;     /* when the last rebuild ended (CLOCK_MONOTONIC) */
	uint32_t nccl_version; /* ncclGetVersion's code */
	uint32_t failed_in;    /* the phase that failed: GOING_DOWN or GOING_UP */
	struct nccl_shim_comm comms[NCCL_SHIM_COMMS];
};

/* A /proc/PID/stat line's start time (field 22), the holder's identity
 * on both sides; 0 when the line has none. */
static inline uint64_t nccl_shim_stat_start(const char *line)
{
	const char *p = strrchr(line, ')');
	unsigned long long t = 0;

	if (!p || sscanf(p + 1,
			 " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
			 "%*d %*d %*d %llu",
			 &t) != 1)
		return 0;
	return t;
}

/* The memfd's descriptor as /proc shows its link. */
#define NCCL_SHIM_FD_LINK "/memfd:" NCCL_SHIM_MEMFD " (deleted)"

#endif
