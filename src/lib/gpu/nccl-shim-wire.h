/* SPDX-License-Identifier: MIT */
/* What stasis's NCCL interposer (src/nccl-shim) and stasis share: one
 * page of counters in a sealed memfd of the rank's, of which stasis takes
 * a copy through the rank's pidfd (pidfd_getfd). The interposer counts the collectives each
 * communicator has started; stasis, to hold the ranks, sets `request`,
 * reads the counts of every rank and writes each communicator's `target`,
 * the count every rank may reach and none pass. A rank behind launches up
 * to it, a rank at it waits on the host before its next collective, and
 * nothing in flight then waits for a peer that will not come: the driver's
 * lock lands. Every field is read and written with atomics on both sides;
 * stasis trusts none of it (a job may write anything there). */
#ifndef STASIS_NCCL_SHIM_WIRE_H
#define STASIS_NCCL_SHIM_WIRE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The memfd's name; /proc/PID/fd shows it as "/memfd:stasis-nccl (deleted)". */
#define NCCL_SHIM_MEMFD "stasis-nccl"
#define NCCL_SHIM_MAGIC 0x4e434353u /* "SCCN" */
#define NCCL_SHIM_VERSION 1
#define NCCL_SHIM_COMMS 60

enum nccl_shim_request { NCCL_SHIM_RUN = 0, NCCL_SHIM_HOLD = 1 };

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
	uint32_t last_op; /* enum nccl_shim_op */
	uint32_t live;	  /* 1 from its creation to its destruction */
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
	uint32_t pad;
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
