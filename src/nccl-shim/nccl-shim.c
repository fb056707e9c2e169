/* SPDX-License-Identifier: MIT */
/* stasis's NCCL interposer, preloaded by `stasis run` (LD_PRELOAD): NCCL's
 * collectives, counted per communicator, and a place where a rank's host
 * threads wait while stasis holds the job for a checkpoint.
 *
 * Why: the driver's lock waits for a process's queued GPU work. A rank
 * whose queued collective waits for a peer that is already locked never
 * drains, and its lock times out (a DDP job that trains without pauses,
 * where one rank runs ahead of another). Held here first, every rank
 * stops at the same collective boundary: a rank behind launches up to the
 * count its peers reached, a rank there waits before its next collective,
 * and what is queued then completes on every rank.
 *
 * Where a thread may wait: at a collective outside a group, or at the
 * ncclGroupStart that opens one (a group's collectives are launched by
 * its ncclGroupEnd: waiting inside one would keep the group's earlier
 * collectives, already counted, from their peers). Nothing else of NCCL's
 * is changed; with no hold, a collective costs a few atomic operations.
 *
 * The counters live in a memfd sealed at its size (nccl-shim-wire.h), of
 * which stasis takes a copy through the rank's pidfd; CRIU saves and
 * restores it with the process, so a restored rank still waits until
 * stasis lets it go (or finds the stasis that held it gone). */

#include <dlfcn.h>
#include <link.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "nccl-shim-wire.h"

/* NCCL's types, as its ABI has them: enums are ints, handles pointers. */
typedef int nccl_result;
typedef struct nccl_comm *nccl_comm;
typedef void *cuda_stream;
typedef struct {
	char internal[128];
} nccl_unique_id;

#define NCCL_SUCCESS 0
#define NCCL_SYSTEM_ERROR 2
#define NCCL_SPLIT_NOCOLOR -1

#define EXPORT __attribute__((visibility("default")))

static struct nccl_shim_block *block;
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
/* Which slot each live communicator has (the handles stay the process's). */
static nccl_comm slot_comm[NCCL_SHIM_COMMS];
/* How many times each slot's communicator was split, for its children's ids. */
static uint64_t slot_splits[NCCL_SHIM_COMMS];
static __thread int group_depth;
/* The collectives this thread's open group counted, by slot. */
static __thread uint32_t group_counts[NCCL_SHIM_COMMS];

/* The loaded libnccl, for a handle of its own. */
static int find_nccl(struct dl_phdr_info *info, size_t size, void *data)
{
	const char *base = strrchr(info->dlpi_name, '/');

	(void)size;
	base = base ? base + 1 : info->dlpi_name;
	if (strncmp(base, "libnccl.so", strlen("libnccl.so")) != 0)
		return 0;
	*(void **)data = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
	return *(void **)data != NULL;
}

/* NCCL's definition of name. RTLD_NEXT finds it only where NCCL is in the
 * global scope; a Python extension's libraries are loaded local to it
 * (PyTorch's libtorch_cuda and its libnccl): their calls still reach this
 * library, first in the global scope, but NCCL is then found only by a
 * handle of its own. */
static void *real(const char *name)
{
	static void *nccl;
	void *fn = dlsym(RTLD_NEXT, name);

	if (fn)
		return fn;
	if (!__atomic_load_n(&nccl, __ATOMIC_ACQUIRE)) {
		void *h = NULL;

		dl_iterate_phdr(find_nccl, &h);
		__atomic_store_n(&nccl, h, __ATOMIC_RELEASE);
	}
	return nccl ? dlsym(nccl, name) : NULL;
}

#define REAL(name, type)                                                                           \
	static __typeof__(type) fn_##name;                                                         \
	if (!fn_##name)                                                                            \
		fn_##name = (type)real(#name);                                                     \
	if (!fn_##name)                                                                            \
		return NCCL_SYSTEM_ERROR;

static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

#define FNV_OFFSET 0xcbf29ce484222325ull

/* The block, made at the first communicator. Without it (no memfd: an old
 * kernel, a seccomp filter), collectives are only passed on. */
static void make_block(void)
{
	int fd = memfd_create(NCCL_SHIM_MEMFD, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *map;

	if (fd < 0)
		return;
	/* Sealed at its size: stasis maps it, and a file that shrank under
	 * that mapping would fault in stasis's process. */
	if (ftruncate(fd, sizeof(struct nccl_shim_block)) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		close(fd);
		return;
	}
	map = mmap(NULL, sizeof(struct nccl_shim_block), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		close(fd);
		return;
	}
	block = map;
	block->version = NCCL_SHIM_VERSION;
	__atomic_store_n(&block->magic, NCCL_SHIM_MAGIC, __ATOMIC_RELEASE);
	/* The descriptor stays open: it is how stasis finds the block. */
}

static pthread_once_t block_once = PTHREAD_ONCE_INIT;

static void add_comm(nccl_comm comm, uint64_t id, int rank, int nranks)
{
	pthread_once(&block_once, make_block);
	if (!block || !comm)
		return;
	pthread_mutex_lock(&slots_lock);
	for (uint32_t i = 0; i < NCCL_SHIM_COMMS; i++) {
		struct nccl_shim_comm *c = &block->comms[i];

		if (slot_comm[i])
			continue;
		slot_splits[i] = 0;
		/* A slot used before may keep an old hold's target. */
		__atomic_store_n(&c->target, 0, __ATOMIC_SEQ_CST);
		c->id = id;
		c->rank = (uint32_t)rank;
		c->nranks = (uint32_t)nranks;
		c->last_op = NCCL_OP_NONE;
		__atomic_store_n(&c->issued, 0, __ATOMIC_SEQ_CST);
		__atomic_store_n(&c->live, 1, __ATOMIC_SEQ_CST);
		__atomic_store_n(&slot_comm[i], comm, __ATOMIC_RELEASE);
		if (i >= block->ncomms)
			__atomic_store_n(&block->ncomms, i + 1, __ATOMIC_SEQ_CST);
		pthread_mutex_unlock(&slots_lock);
		return;
	}
	/* Its collectives cannot be held: stasis then keeps the lock's tries. */
	__atomic_add_fetch(&block->untracked, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&slots_lock);
}

static int slot_of(nccl_comm comm)
{
	for (int i = 0; comm && i < NCCL_SHIM_COMMS; i++)
		if (__atomic_load_n(&slot_comm[i], __ATOMIC_ACQUIRE) == comm)
			return i;
	return -1;
}

static void drop_comm(nccl_comm comm)
{
	int i;

	if (!block)
		return;
	pthread_mutex_lock(&slots_lock);
	i = slot_of(comm);
	if (i >= 0) {
		__atomic_store_n(&block->comms[i].live, 0, __ATOMIC_SEQ_CST);
		__atomic_store_n(&slot_comm[i], NULL, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&slots_lock);
}

static bool behind(int slot)
{
	const struct nccl_shim_comm *c = &block->comms[slot];

	return __atomic_load_n(&c->issued, __ATOMIC_SEQ_CST) <
	       __atomic_load_n(&c->target, __ATOMIC_SEQ_CST);
}

/* Whether any communicator of this process is behind its target (a
 * group's start, whose collectives are not known yet). */
static bool any_behind(void)
{
	uint32_t n = __atomic_load_n(&block->ncomms, __ATOMIC_SEQ_CST);

	for (uint32_t i = 0; i < n && i < NCCL_SHIM_COMMS; i++)
		if (__atomic_load_n(&block->comms[i].live, __ATOMIC_SEQ_CST) && behind((int)i))
			return true;
	return false;
}

/* Whether the stasis that holds this rank has gone (killed in the
 * middle): its PID is no more, or is another process's. A hold whose
 * holder is not known is waited out. */
static bool holder_gone(void)
{
	uint32_t pid = __atomic_load_n(&block->holder_pid, __ATOMIC_SEQ_CST);
	uint64_t since = __atomic_load_n(&block->holder_start, __ATOMIC_SEQ_CST);
	char path[64], line[1024];
	uint64_t now;
	ssize_t n;
	int fd;

	if (!pid || !since)
		return false;
	snprintf(path, sizeof(path), "/proc/%u/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true;
	n = read(fd, line, sizeof(line) - 1);
	close(fd);
	if (n <= 0)
		return true;
	line[n] = '\0';
	now = nccl_shim_stat_start(line);
	return now && now != since;
}

static bool may_go(int slot)
{
	if (__atomic_load_n(&block->request, __ATOMIC_SEQ_CST) != NCCL_SHIM_HOLD)
		return true;
	return slot >= 0 ? behind(slot) : any_behind();
}

/* At a boundary: waits while held unless this rank is behind (slot: the
 * collective's communicator, counted once it may go; -1: a group's start,
 * in in_group once it may go; a thread waiting here is in neither).
 * in_check covers the check and the count alone, never NCCL's call (a
 * launch may block while the GPU's queue is full, until a peer catches
 * up): stasis reads the counts when no thread is between the two. */
static void boundary(int slot)
{
	static const struct timespec tick = {.tv_nsec = 100000};
	bool parked = false;
	unsigned int ticks = 0;

	for (;;) {
		__atomic_add_fetch(&block->in_check, 1, __ATOMIC_SEQ_CST);
		if (may_go(slot))
			break;
		__atomic_sub_fetch(&block->in_check, 1, __ATOMIC_SEQ_CST);
		if (!parked) {
			parked = true;
			__atomic_add_fetch(&block->parked, 1, __ATOMIC_SEQ_CST);
			__atomic_add_fetch(&block->holds, 1, __ATOMIC_RELAXED);
		}
		/* Every 0.1 s: a holder killed in the middle lets no one go. */
		if (++ticks % 1000 == 0 && holder_gone()) {
			uint32_t held = NCCL_SHIM_HOLD;

			/* For every thread of the rank; a new stasis's hold
			 * names its own holder first. */
			__atomic_compare_exchange_n(&block->request, &held, NCCL_SHIM_RUN, false,
						    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
			continue;
		}
		nanosleep(&tick, NULL);
	}
	/* A collective counted, or a group entered, before in_check drops:
	 * there is no moment when the thread is in neither. */
	if (slot >= 0)
		__atomic_add_fetch(&block->comms[slot].issued, 1, __ATOMIC_SEQ_CST);
	else
		__atomic_add_fetch(&block->in_group, 1, __ATOMIC_SEQ_CST);
	__atomic_sub_fetch(&block->in_check, 1, __ATOMIC_SEQ_CST);
	if (parked)
		__atomic_sub_fetch(&block->parked, 1, __ATOMIC_SEQ_CST);
}

/* Before a collective on comm: counted, after a wait at a boundary where
 * it starts one (outside a group). */
static void collective_begin(nccl_comm comm, enum nccl_shim_op op)
{
	int slot;

	if (!block)
		return;
	slot = slot_of(comm);
	if (slot < 0)
		return;
	if (group_depth == 0) {
		boundary(slot);
	} else {
		__atomic_add_fetch(&block->comms[slot].issued, 1, __ATOMIC_SEQ_CST);
		group_counts[slot]++;
	}
	__atomic_store_n(&block->comms[slot].last_op, op, __ATOMIC_RELAXED);
}

/* Whether this thread's open group was counted in in_group (the block may
 * be made inside a group, by a communicator's creation). */
static __thread bool group_counted;

/* The thread's group left: in_group no more, its counts kept or, for a
 * group only simulated (never launched), taken back. */
static void group_left(bool launched)
{
	if (group_depth == 0 || --group_depth > 0)
		return;
	for (int i = 0; i < NCCL_SHIM_COMMS; i++) {
		if (group_counts[i] && !launched)
			__atomic_sub_fetch(&block->comms[i].issued, group_counts[i],
					   __ATOMIC_SEQ_CST);
		group_counts[i] = 0;
	}
	if (group_counted) {
		group_counted = false;
		__atomic_sub_fetch(&block->in_group, 1, __ATOMIC_SEQ_CST);
	}
}

/* A group's collectives are counted without a check, as they come: from
 * its start to its end it is in in_group, and stasis does not take the
 * counts as final while any is. Its end is left before NCCL's launch,
 * which may block until a peer catches up. */
EXPORT nccl_result ncclGroupStart(void)
{
	REAL(ncclGroupStart, nccl_result(*)(void));
	if (block && group_depth == 0) {
		boundary(-1); /* in in_group once it may go */
		group_counted = true;
	}
	group_depth++;
	return fn_ncclGroupStart();
}

EXPORT nccl_result ncclGroupEnd(void)
{
	REAL(ncclGroupEnd, nccl_result(*)(void));
	group_left(true);
	return fn_ncclGroupEnd();
}

/* Ends a group without launching it (NCCL's estimate of its time). */
EXPORT nccl_result ncclGroupSimulateEnd(void *info)
{
	REAL(ncclGroupSimulateEnd, nccl_result(*)(void *));
	group_left(false);
	return fn_ncclGroupSimulateEnd(info);
}

/* ---- communicators ---- */

static uint64_t id_of(const nccl_unique_id *id, int nranks)
{
	return fnv1a(fnv1a(FNV_OFFSET, id->internal, sizeof(id->internal)), &nranks,
		     sizeof(nranks));
}

EXPORT nccl_result ncclCommInitRank(nccl_comm *comm, int nranks, nccl_unique_id id, int rank)
{
	nccl_result r;

	REAL(ncclCommInitRank, nccl_result(*)(nccl_comm *, int, nccl_unique_id, int));
	r = fn_ncclCommInitRank(comm, nranks, id, rank);
	if (r == NCCL_SUCCESS)
		add_comm(*comm, id_of(&id, nranks), rank, nranks);
	return r;
}

/* ncclInProgress (7) too: a non-blocking communicator has its handle. */
#define NCCL_IN_PROGRESS 7

EXPORT nccl_result ncclCommInitRankConfig(nccl_comm *comm, int nranks, nccl_unique_id id, int rank,
					  void *config)
{
	nccl_result r;

	REAL(ncclCommInitRankConfig, nccl_result(*)(nccl_comm *, int, nccl_unique_id, int, void *));
	r = fn_ncclCommInitRankConfig(comm, nranks, id, rank, config);
	if (r == NCCL_SUCCESS || r == NCCL_IN_PROGRESS)
		add_comm(*comm, id_of(&id, nranks), rank, nranks);
	return r;
}

EXPORT nccl_result ncclCommInitRankScalable(nccl_comm *comm, int nranks, int rank, int nids,
					    nccl_unique_id *ids, void *config)
{
	nccl_result r;

	REAL(ncclCommInitRankScalable,
	     nccl_result(*)(nccl_comm *, int, int, int, nccl_unique_id *, void *));
	r = fn_ncclCommInitRankScalable(comm, nranks, rank, nids, ids, config);
	if ((r == NCCL_SUCCESS || r == NCCL_IN_PROGRESS) && nids > 0)
		add_comm(*comm, id_of(&ids[0], nranks), rank, nranks);
	return r;
}

/* Every rank of the parent splits it in the same order (a split is
 * collective): the parent's id, its split count and the color name the
 * child alike in each of its ranks. */
EXPORT nccl_result ncclCommSplit(nccl_comm comm, int color, int key, nccl_comm *newcomm,
				 void *config)
{
	nccl_result r;
	uint64_t id = FNV_OFFSET, splits = 0;
	int parent, rank = 0, nranks = 0;

	REAL(ncclCommSplit, nccl_result(*)(nccl_comm, int, int, nccl_comm *, void *));
	pthread_mutex_lock(&slots_lock);
	parent = block ? slot_of(comm) : -1;
	if (parent >= 0) {
		id = block->comms[parent].id;
		splits = slot_splits[parent]++;
	}
	pthread_mutex_unlock(&slots_lock);
	r = fn_ncclCommSplit(comm, color, key, newcomm, config);
	if ((r != NCCL_SUCCESS && r != NCCL_IN_PROGRESS) || parent < 0 ||
	    color == NCCL_SPLIT_NOCOLOR || !*newcomm)
		return r;
	{
		REAL(ncclCommUserRank, nccl_result(*)(nccl_comm, int *));
		REAL(ncclCommCount, nccl_result(*)(nccl_comm, int *));
		if (fn_ncclCommUserRank(*newcomm, &rank) != NCCL_SUCCESS ||
		    fn_ncclCommCount(*newcomm, &nranks) != NCCL_SUCCESS)
			return r;
	}
	id = fnv1a(fnv1a(id, &splits, sizeof(splits)), &color, sizeof(color));
	add_comm(*newcomm, id, rank, nranks);
	return r;
}

/* One process, every rank: its collectives go out together in groups. */
EXPORT nccl_result ncclCommInitAll(nccl_comm *comms, int ndev, const int *devlist)
{
	nccl_result r;
	pid_t pid = getpid();

	REAL(ncclCommInitAll, nccl_result(*)(nccl_comm *, int, const int *));
	r = fn_ncclCommInitAll(comms, ndev, devlist);
	for (int i = 0; r == NCCL_SUCCESS && i < ndev; i++)
		add_comm(comms[i], fnv1a(fnv1a(FNV_OFFSET, &pid, sizeof(pid)), &i, sizeof(i)), i,
			 ndev);
	return r;
}

EXPORT nccl_result ncclCommDestroy(nccl_comm comm)
{
	REAL(ncclCommDestroy, nccl_result(*)(nccl_comm));
	drop_comm(comm);
	return fn_ncclCommDestroy(comm);
}

EXPORT nccl_result ncclCommAbort(nccl_comm comm)
{
	REAL(ncclCommAbort, nccl_result(*)(nccl_comm));
	drop_comm(comm);
	return fn_ncclCommAbort(comm);
}

/* ---- collectives ---- */

#define COLLECTIVE(name, op, params, args, type)                                                   \
	EXPORT nccl_result name params                                                             \
	{                                                                                          \
		REAL(name, type);                                                                  \
		collective_begin(comm, op);                                                        \
		return fn_##name args;                                                             \
	}

COLLECTIVE(ncclAllReduce, NCCL_OP_ALL_REDUCE,
	   (const void *s, void *d, size_t n, int t, int o, nccl_comm comm, cuda_stream st),
	   (s, d, n, t, o, comm, st),
	   nccl_result (*)(const void *, void *, size_t, int, int, nccl_comm, cuda_stream))
COLLECTIVE(ncclBroadcast, NCCL_OP_BROADCAST,
	   (const void *s, void *d, size_t n, int t, int root, nccl_comm comm, cuda_stream st),
	   (s, d, n, t, root, comm, st),
	   nccl_result (*)(const void *, void *, size_t, int, int, nccl_comm, cuda_stream))
COLLECTIVE(ncclBcast, NCCL_OP_BROADCAST,
	   (void *b, size_t n, int t, int root, nccl_comm comm, cuda_stream st),
	   (b, n, t, root, comm, st),
	   nccl_result (*)(void *, size_t, int, int, nccl_comm, cuda_stream))
COLLECTIVE(ncclReduce, NCCL_OP_REDUCE,
	   (const void *s, void *d, size_t n, int t, int o, int root, nccl_comm comm,
	    cuda_stream st),
	   (s, d, n, t, o, root, comm, st),
	   nccl_result (*)(const void *, void *, size_t, int, int, int, nccl_comm, cuda_stream))
COLLECTIVE(ncclAllGather, NCCL_OP_ALL_GATHER,
	   (const void *s, void *d, size_t n, int t, nccl_comm comm, cuda_stream st),
	   (s, d, n, t, comm, st),
	   nccl_result (*)(const void *, void *, size_t, int, nccl_comm, cuda_stream))
COLLECTIVE(ncclReduceScatter, NCCL_OP_REDUCE_SCATTER,
	   (const void *s, void *d, size_t n, int t, int o, nccl_comm comm, cuda_stream st),
	   (s, d, n, t, o, comm, st),
	   nccl_result (*)(const void *, void *, size_t, int, int, nccl_comm, cuda_stream))
COLLECTIVE(ncclAlltoAll, NCCL_OP_ALL_TO_ALL,
	   (const void *s, void *d, size_t n, int t, nccl_comm comm, cuda_stream st),
	   (s, d, n, t, comm, st),
	   nccl_result (*)(const void *, void *, size_t, int, nccl_comm, cuda_stream))
COLLECTIVE(ncclGather, NCCL_OP_GATHER,
	   (const void *s, void *d, size_t n, int t, int root, nccl_comm comm, cuda_stream st),
	   (s, d, n, t, root, comm, st),
	   nccl_result (*)(const void *, void *, size_t, int, int, nccl_comm, cuda_stream))
COLLECTIVE(ncclScatter, NCCL_OP_SCATTER,
	   (const void *s, void *d, size_t n, int t, int root, nccl_comm comm, cuda_stream st),
	   (s, d, n, t, root, comm, st),
	   nccl_result (*)(const void *, void *, size_t, int, int, nccl_comm, cuda_stream))
COLLECTIVE(ncclSend, NCCL_OP_SEND,
	   (const void *s, size_t n, int t, int peer, nccl_comm comm, cuda_stream st),
	   (s, n, t, peer, comm, st),
	   nccl_result (*)(const void *, size_t, int, int, nccl_comm, cuda_stream))
COLLECTIVE(ncclRecv, NCCL_OP_RECV,
	   (void *d, size_t n, int t, int peer, nccl_comm comm, cuda_stream st),
	   (d, n, t, peer, comm, st),
	   nccl_result (*)(void *, size_t, int, int, nccl_comm, cuda_stream))
