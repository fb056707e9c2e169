/* SPDX-License-Identifier: MIT */
/* The job's communicators behind handles of the interposer's own, so that
 * they can be taken apart before a checkpoint and made again after it
 * with nothing changed for the job.
 *
 * Why: NCCL's fast transports map each rank's GPU and host memory into
 * its peers (P2P through cuMem, cuMem host buffers). The driver checkpoints
 * such a rank but cannot restore it. Destroyed first, a communicator takes
 * those mappings with it; made again from the same parameters, in the
 * order the job made them, it works as before, and the job never sees a
 * handle change: the handle it holds is a slot of this library's, and
 * every NCCL call that takes a communicator goes through here (making and
 * ending them) or nccl-shim-calls.c (the rest).
 *
 * Who does it: a thread of the interposer's ("stasis-nccl"), started with
 * the first communicator, on stasis's word (the block's `teardown`), once
 * every rank is held at one collective boundary (nccl-shim.c). The rank 0
 * of a communicator made from a unique id asks NCCL for the id of its
 * next life before it is taken apart (NCCL's bootstrap root then listens
 * for it, in the image too); stasis copies that id to the peers. Let go
 * (after the driver's unlock, a restore, a rollback, or a holder found
 * gone), each rank makes its communicators again.
 *
 * What cannot be made again is refused by stasis before anything changes
 * (the block's `unsafe`): buffers or windows registered with a
 * communicator, NCCL's device API, communicators from ncclCommInitAll,
 * Shrink or Grow, an NCCL outside the versions this file knows. With an
 * NCCL it does not know, handles are NCCL's own: a function added to
 * NCCL's API later would be handed a handle it cannot read. */
#include <dlfcn.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shim-comms.h"

struct shim_handle shim_handles[NCCL_SHIM_COMMS];
struct creation shim_creations[LOG_MAX];
int shim_ncreations;
pthread_mutex_t shim_comms_lock = PTHREAD_MUTEX_INITIALIZER;
int shim_wrap_handles = -1;
unsigned int shim_inside;
unsigned int shim_gate = GATE_OPEN;
__thread bool shim_servicing;
uint64_t shim_creation_seq[LOG_MAX];
static uint64_t next_seq;
static uint32_t made_unsafe; /* unsafe bits no longer tied to a live count */

/* ---- handles ---- */

int shim_slot_of(nccl_comm handle)
{
	uintptr_t h = (uintptr_t)handle, base = (uintptr_t)shim_handles;

	if (shim_wrap_handles == 1) {
		if (h < base || h >= base + sizeof(shim_handles) ||
		    (h - base) % sizeof(shim_handles[0]))
			return -1;
		return (int)((h - base) / sizeof(shim_handles[0]));
	}
	/* NCCL's own handles: the slot that has it. */
	for (int i = 0; handle && i < NCCL_SHIM_COMMS; i++)
		if (__atomic_load_n(&shim_handles[i].real, __ATOMIC_ACQUIRE) == handle)
			return i;
	return -1;
}

nccl_comm shim_real_comm(int slot)
{
	return __atomic_load_n(&shim_handles[slot].real, __ATOMIC_ACQUIRE);
}

bool shim_gate_open(void)
{
	return __atomic_load_n(&shim_gate, __ATOMIC_SEQ_CST) == GATE_OPEN;
}

bool shim_gate_failed(void)
{
	return __atomic_load_n(&shim_gate, __ATOMIC_SEQ_CST) == GATE_FAILED;
}

void shim_inside_add(void)
{
	__atomic_add_fetch(&shim_inside, 1, __ATOMIC_SEQ_CST);
}

void shim_inside_drop(void)
{
	__atomic_sub_fetch(&shim_inside, 1, __ATOMIC_SEQ_CST);
}

/* Inside, once the communicators are the job's (not while they are taken
 * apart or made again). Fails where making them again failed. */
static nccl_result through_gate(void)
{
	static const struct timespec tick = {.tv_nsec = 100000};

	if (shim_servicing) {
		shim_inside_add(); /* dropped as the job's are */
		return NCCL_SUCCESS;
	}
	for (;;) {
		shim_inside_add();
		if (shim_gate_open())
			return NCCL_SUCCESS;
		shim_inside_drop();
		if (shim_gate_failed())
			return NCCL_INTERNAL_ERROR;
		nanosleep(&tick, NULL);
	}
}

/* Into NCCL with handle: *real is NCCL's communicator behind it, *slot
 * its slot (-1: not one of the interposer's, passed on as it is). */
nccl_result shim_enter(nccl_comm handle, nccl_comm *real, int *slot)
{
	*slot = shim_slot_of(handle);
	*real = handle;
	if (*slot < 0)
		return NCCL_SUCCESS;
	if (through_gate() != NCCL_SUCCESS)
		return NCCL_INTERNAL_ERROR;
	*real = shim_real_comm(*slot);
	return NCCL_SUCCESS;
}

void shim_leave(int slot)
{
	if (slot >= 0)
		shim_inside_drop();
}

/* The same for a call that makes a communicator: no handle yet, but none
 * is made while the job's are taken apart or made again. */
static nccl_result enter_making(void)
{
	return shim_wrap_handles == 1 ? through_gate() : NCCL_SUCCESS;
}

static void leave_making(void)
{
	if (shim_wrap_handles == 1)
		shim_inside_drop();
}

/* ---- what cannot be taken apart ---- */

void shim_update_unsafe(void)
{
	uint32_t bits = made_unsafe;

	if (!shim_block)
		return;
	for (int i = 0; i < NCCL_SHIM_COMMS; i++) {
		const struct shim_handle *h = &shim_handles[i];

		if (!h->real && !__atomic_load_n(&shim_block->comms[i].live, __ATOMIC_RELAXED))
			continue;
		if (h->registered)
			bits |= NCCL_UNSAFE_REGISTERED;
		if (h->windows)
			bits |= NCCL_UNSAFE_WINDOW;
		if (h->device_comms)
			bits |= NCCL_UNSAFE_DEVICE;
	}
	__atomic_store_n(&shim_block->unsafe, bits, __ATOMIC_SEQ_CST);
}

void shim_add_unsafe(uint32_t bit)
{
	made_unsafe |= bit;
	shim_update_unsafe();
}

void shim_mark_unsafe(uint32_t bit)
{
	pthread_mutex_lock(&shim_comms_lock);
	made_unsafe |= bit;
	shim_update_unsafe();
	pthread_mutex_unlock(&shim_comms_lock);
}

/* ---- the log and the slots ---- */

static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

#define FNV_OFFSET 0xcbf29ce484222325ull

static uint64_t id_of(const nccl_unique_id *id, int nranks)
{
	return fnv1a(fnv1a(FNV_OFFSET, id->internal, sizeof(id->internal)), &nranks,
		     sizeof(nranks));
}

/* A child forked from a rank (a DataLoader's worker) shares the rank's
 * block but not its communicators nor its thread: it keeps out of both. */
static void forked_child(void)
{
	shim_block = NULL;
	pthread_mutex_init(&shim_comms_lock, NULL);
}

/* At the first communicator: whether this NCCL is one whose API is known,
 * and the thread that takes the communicators apart. */
static void first_comm(void)
{
	typedef nccl_result (*version_fn)(int *);
	version_fn get_version = (version_fn)shim_real("ncclGetVersion");
	int version = 0;
	pthread_t t;

	shim_make_block();
	if (get_version)
		get_version(&version);
	shim_wrap_handles = shim_block && version >= NCCL_KNOWN_FIRST && version <= NCCL_KNOWN_LAST;
	if (!shim_block)
		return;
	shim_block->nccl_version = (uint32_t)version;
	if (!shim_wrap_handles) {
		shim_mark_unsafe(NCCL_UNSAFE_VERSION);
		return;
	}
	if (pthread_create(&t, NULL, shim_service, NULL) != 0) {
		shim_wrap_handles = 0; /* no handles of ours were given yet */
		shim_mark_unsafe(NCCL_UNSAFE_VERSION);
		return;
	}
	pthread_detach(t);
	pthread_atfork(NULL, NULL, forked_child);
	__atomic_store_n(&shim_block->caps, NCCL_SHIM_CAP_REBUILD, __ATOMIC_SEQ_CST);
}

static void ensure_first(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, first_comm);
}

/* A copy of config (NULL: none) that outlives the caller's, its names
 * copied too. */
static bool keep_config(struct creation *c, const void *config)
{
	size_t size;

	c->has_config = config != NULL;
	if (!config)
		return true;
	memcpy(&size, config, sizeof(size));
	if (size < CONFIG_NET_NAME_AT + sizeof(char *) || size > CONFIG_MAX)
		return false;
	memcpy(c->config, config, size);
	for (int k = 0; k < 2; k++) {
		size_t at = k ? CONFIG_COMM_NAME_AT : CONFIG_NET_NAME_AT;
		char *copy = k ? c->comm_name : c->net_name;
		const char *name;

		if (size < at + sizeof(char *))
			continue;
		memcpy(&name, c->config + at, sizeof(name));
		if (!name)
			continue;
		if (strnlen(name, NAME_MAX_LEN) >= NAME_MAX_LEN)
			return false;
		strcpy(copy, name);
		memcpy(c->config + at, &copy, sizeof(copy));
	}
	return true;
}

/* A new creation in the log (-1: the log is full). comms lock held. */
static int log_creation(bool split, int parent, int color, int key, int rank, int nranks,
			const void *config)
{
	int i;

	for (i = 0; i < LOG_MAX && shim_creations[i].used; i++)
		;
	if (i == LOG_MAX) {
		made_unsafe |= NCCL_UNSAFE_LOG;
		return -1;
	}
	memset(&shim_creations[i], 0, sizeof(shim_creations[i]));
	shim_creations[i] = (struct creation){.used = true,
					      .split = split,
					      .slot = -1,
					      .parent = parent,
					      .color = color,
					      .key = key,
					      .rank = rank,
					      .nranks = nranks};
	if (!keep_config(&shim_creations[i], config))
		made_unsafe |= NCCL_UNSAFE_CONFIG;
	if (i >= shim_ncreations)
		shim_ncreations = i + 1;
	return i;
}

/* comm (NCCL's) into a free slot, counted and behind a handle; returns
 * what the job gets: the handle, or comm itself where no slot is free or
 * handles are NCCL's own. comms lock held. */
static nccl_comm add_comm(nccl_comm comm, uint64_t id, int rank, int nranks, int entry,
			  enum nccl_shim_uid_role uid_role)
{
	if (!shim_block || !comm)
		return comm;
	for (uint32_t i = 0; i < NCCL_SHIM_COMMS; i++) {
		struct nccl_shim_comm *c = &shim_block->comms[i];
		struct shim_handle *h = &shim_handles[i];

		if (h->real || __atomic_load_n(&c->live, __ATOMIC_SEQ_CST))
			continue;
		memset(h, 0, sizeof(*h));
		h->entry = entry;
		h->rank = rank;
		h->nranks = nranks;
		h->device = -1;
		/* A slot used before may keep an old hold's target. */
		__atomic_store_n(&c->target, 0, __ATOMIC_SEQ_CST);
		c->id = id;
		c->rank = (uint32_t)rank;
		c->nranks = (uint32_t)nranks;
		c->last_op = NCCL_OP_NONE;
		c->uid_role = uid_role;
		c->uid_gen = 0;
		__atomic_store_n(&c->issued, 0, __ATOMIC_SEQ_CST);
		__atomic_store_n(&c->live, 1, __ATOMIC_SEQ_CST);
		__atomic_store_n(&h->real, comm, __ATOMIC_RELEASE);
		if (entry >= 0) {
			shim_creations[entry].slot = (int)i;
			shim_creations[entry].alive = true;
		}
		if (i >= shim_block->ncomms)
			__atomic_store_n(&shim_block->ncomms, i + 1, __ATOMIC_SEQ_CST);
		return shim_wrap_handles == 1 ? (nccl_comm)(void *)h : comm;
	}
	/* Its collectives cannot be held, nor it taken apart: stasis then
	 * keeps the lock's tries, and refuses fast transports. */
	__atomic_add_fetch(&shim_block->untracked, 1, __ATOMIC_SEQ_CST);
	made_unsafe |= NCCL_UNSAFE_SLOTS;
	if (entry >= 0)
		shim_creations[entry].used = false;
	return comm;
}

/* Whether creation i's communicator, or one split from it, is still the
 * job's: only then is it made again. */
static bool needed(int i)
{
	if (shim_creations[i].alive)
		return true;
	for (int j = 0; j < shim_ncreations; j++)
		if (shim_creations[j].used && shim_creations[j].split &&
		    shim_creations[j].parent == i && shim_creations[j].slot >= 0 && needed(j))
			return true;
	return false;
}

/* Forget creations no longer needed, and their splits. A communicator that
 * the job destroyed while a child of it lives cannot be made again (its
 * peers' ids are gone with it): unsafe. comms lock held. */
static void prune_log(void)
{
	for (int i = 0; i < shim_ncreations; i++) {
		struct creation *c = &shim_creations[i];

		if (!c->used || c->alive)
			continue;
		if (needed(i)) {
			made_unsafe |= NCCL_UNSAFE_MADE;
			continue;
		}
		if (c->split && c->parent >= 0 && shim_creations[c->parent].used &&
		    shim_creations[c->parent].alive)
			continue; /* its parent's ranks split it again */
		c->used = false;
	}
	for (bool again = true; again;) {
		again = false;
		for (int i = 0; i < shim_ncreations; i++)
			if (shim_creations[i].used && shim_creations[i].split &&
			    !shim_creations[shim_creations[i].parent].used) {
				shim_creations[i].used = false;
				again = true;
			}
	}
}

static void drop_comm(int slot)
{
	struct shim_handle *h = &shim_handles[slot];

	pthread_mutex_lock(&shim_comms_lock);
	if (h->entry >= 0) {
		shim_creations[h->entry].alive = false;
		shim_creations[h->entry].slot = -1;
	}
	__atomic_store_n(&shim_block->comms[slot].live, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&h->real, NULL, __ATOMIC_RELEASE);
	h->registered = h->windows = h->device_comms = 0;
	memset(h->ops, 0, sizeof(h->ops));
	prune_log();
	shim_update_unsafe();
	pthread_mutex_unlock(&shim_comms_lock);
}

/* ---- making communicators ---- */

static nccl_comm made_from_id(nccl_comm comm, const nccl_unique_id *id, int nranks, int rank,
			      const void *config)
{
	int entry;

	pthread_mutex_lock(&shim_comms_lock);
	entry = shim_wrap_handles == 1 ? log_creation(false, -1, 0, 0, rank, nranks, config) : -1;
	if (entry >= 0)
		shim_creation_seq[entry] = next_seq++;
	comm = add_comm(comm, id_of(id, nranks), rank, nranks, entry,
			rank == 0 ? NCCL_UID_POSTS : NCCL_UID_TAKES);
	shim_update_unsafe();
	pthread_mutex_unlock(&shim_comms_lock);
	return comm;
}

EXPORT nccl_result ncclCommInitRank(nccl_comm *comm, int nranks, nccl_unique_id id, int rank)
{
	nccl_result r;

	REAL(ncclCommInitRank, nccl_result(*)(nccl_comm *, int, nccl_unique_id, int));
	ensure_first();
	if (enter_making() != NCCL_SUCCESS)
		return NCCL_INTERNAL_ERROR;
	r = fn_ncclCommInitRank(comm, nranks, id, rank);
	if (r == NCCL_SUCCESS)
		*comm = made_from_id(*comm, &id, nranks, rank, NULL);
	leave_making();
	return r;
}

/* ncclInProgress too: a non-blocking communicator has its handle. */
EXPORT nccl_result ncclCommInitRankConfig(nccl_comm *comm, int nranks, nccl_unique_id id, int rank,
					  void *config)
{
	nccl_result r;

	REAL(ncclCommInitRankConfig, nccl_result(*)(nccl_comm *, int, nccl_unique_id, int, void *));
	ensure_first();
	if (enter_making() != NCCL_SUCCESS)
		return NCCL_INTERNAL_ERROR;
	r = fn_ncclCommInitRankConfig(comm, nranks, id, rank, config);
	if (r == NCCL_SUCCESS || r == NCCL_IN_PROGRESS)
		*comm = made_from_id(*comm, &id, nranks, rank, config);
	leave_making();
	return r;
}

/* Made again from one id, as ncclCommInitRankConfig: the same communicator. */
EXPORT nccl_result ncclCommInitRankScalable(nccl_comm *comm, int nranks, int rank, int nids,
					    nccl_unique_id *ids, void *config)
{
	nccl_result r;

	REAL(ncclCommInitRankScalable,
	     nccl_result(*)(nccl_comm *, int, int, int, nccl_unique_id *, void *));
	ensure_first();
	if (enter_making() != NCCL_SUCCESS)
		return NCCL_INTERNAL_ERROR;
	r = fn_ncclCommInitRankScalable(comm, nranks, rank, nids, ids, config);
	if ((r == NCCL_SUCCESS || r == NCCL_IN_PROGRESS) && nids > 0)
		*comm = made_from_id(*comm, &ids[0], nranks, rank, config);
	leave_making();
	return r;
}

/* Every rank of the parent splits it in the same order (a split is
 * collective): the parent's id, its split count and the color name the
 * child alike in each of its ranks. A split without a child (NOCOLOR) is
 * logged too: its rank splits the parent again at the rebuild. */
EXPORT nccl_result ncclCommSplit(nccl_comm comm, int color, int key, nccl_comm *newcomm,
				 void *config)
{
	nccl_comm real;
	nccl_result r;
	uint64_t id = FNV_OFFSET, splits = 0;
	int parent, entry = -1, rank = 0, nranks = 0;

	REAL(ncclCommSplit, nccl_result(*)(nccl_comm, int, int, nccl_comm *, void *));
	if (shim_enter(comm, &real, &parent) != NCCL_SUCCESS)
		return NCCL_INTERNAL_ERROR;
	r = fn_ncclCommSplit(real, color, key, newcomm, config);
	if ((r == NCCL_SUCCESS || r == NCCL_IN_PROGRESS) && parent >= 0) {
		pthread_mutex_lock(&shim_comms_lock);
		id = shim_block->comms[parent].id;
		splits = shim_handles[parent].splits++;
		if (shim_wrap_handles == 1 && shim_handles[parent].entry < 0)
			made_unsafe |= NCCL_UNSAFE_MADE; /* a parent not made again */
		else if (shim_wrap_handles == 1) {
			entry = log_creation(true, shim_handles[parent].entry, color, key, 0, 0,
					     config);
			if (entry >= 0)
				shim_creation_seq[entry] = next_seq++;
		}
		shim_update_unsafe();
		pthread_mutex_unlock(&shim_comms_lock);
	}
	/* A split still in progress (a non-blocking parent, or one inside a
	 * group): NCCL hands the child over later, never seen here. */
	if (r == NCCL_IN_PROGRESS && color != NCCL_SPLIT_NOCOLOR && !*newcomm)
		shim_mark_unsafe(NCCL_UNSAFE_MADE);
	if ((r == NCCL_SUCCESS || r == NCCL_IN_PROGRESS) && parent >= 0 &&
	    color != NCCL_SPLIT_NOCOLOR && *newcomm) {
		REAL(ncclCommUserRank, nccl_result(*)(nccl_comm, int *));
		REAL(ncclCommCount, nccl_result(*)(nccl_comm, int *));
		if (fn_ncclCommUserRank(*newcomm, &rank) == NCCL_SUCCESS &&
		    fn_ncclCommCount(*newcomm, &nranks) == NCCL_SUCCESS) {
			id = fnv1a(fnv1a(id, &splits, sizeof(splits)), &color, sizeof(color));
			pthread_mutex_lock(&shim_comms_lock);
			if (entry >= 0) {
				shim_creations[entry].rank = rank;
				shim_creations[entry].nranks = nranks;
			}
			*newcomm = add_comm(*newcomm, id, rank, nranks, entry, NCCL_UID_NONE);
			shim_update_unsafe();
			pthread_mutex_unlock(&shim_comms_lock);
		}
	}
	shim_leave(parent);
	return r;
}

/* One process, every rank: counted, not made again. */
EXPORT nccl_result ncclCommInitAll(nccl_comm *comms, int ndev, const int *devlist)
{
	nccl_result r;
	pid_t pid = getpid();

	REAL(ncclCommInitAll, nccl_result(*)(nccl_comm *, int, const int *));
	ensure_first();
	if (enter_making() != NCCL_SUCCESS)
		return NCCL_INTERNAL_ERROR;
	r = fn_ncclCommInitAll(comms, ndev, devlist);
	pthread_mutex_lock(&shim_comms_lock);
	for (int i = 0; r == NCCL_SUCCESS && i < ndev; i++)
		comms[i] =
		    add_comm(comms[i], fnv1a(fnv1a(FNV_OFFSET, &pid, sizeof(pid)), &i, sizeof(i)),
			     i, ndev, -1, NCCL_UID_NONE);
	if (r == NCCL_SUCCESS)
		made_unsafe |= NCCL_UNSAFE_MADE;
	shim_update_unsafe();
	pthread_mutex_unlock(&shim_comms_lock);
	leave_making();
	return r;
}

/* Shrink and Grow: NCCL's communicators, handed back as they are (not
 * counted, not made again). */
EXPORT nccl_result ncclCommShrink(nccl_comm comm, int *exclude, int nexclude, nccl_comm *newcomm,
				  void *config, int flags)
{
	nccl_comm real;
	nccl_result r;
	int slot;

	REAL(ncclCommShrink, nccl_result(*)(nccl_comm, int *, int, nccl_comm *, void *, int));
	if (shim_enter(comm, &real, &slot) != NCCL_SUCCESS)
		return NCCL_INTERNAL_ERROR;
	r = fn_ncclCommShrink(real, exclude, nexclude, newcomm, config, flags);
	shim_leave(slot);
	shim_mark_unsafe(NCCL_UNSAFE_MADE);
	return r;
}

EXPORT nccl_result ncclCommGrow(nccl_comm comm, int nranks, const nccl_unique_id *id, int rank,
				nccl_comm *newcomm, void *config)
{
	nccl_comm real;
	nccl_result r;
	int slot;

	REAL(ncclCommGrow,
	     nccl_result(*)(nccl_comm, int, const nccl_unique_id *, int, nccl_comm *, void *));
	if (shim_enter(comm, &real, &slot) != NCCL_SUCCESS)
		return NCCL_INTERNAL_ERROR;
	r = fn_ncclCommGrow(real, nranks, id, rank, newcomm, config);
	shim_leave(slot);
	shim_mark_unsafe(NCCL_UNSAFE_MADE);
	return r;
}

/* ---- ending communicators ---- */

#define ENDING(name)                                                                               \
	EXPORT nccl_result name(nccl_comm comm)                                                    \
	{                                                                                          \
		nccl_comm real;                                                                    \
		nccl_result r;                                                                     \
		int slot;                                                                          \
                                                                                                   \
		REAL(name, nccl_result (*)(nccl_comm));                                            \
		if (shim_enter(comm, &real, &slot) != NCCL_SUCCESS)                                \
			return NCCL_INTERNAL_ERROR;                                                \
		r = fn_##name(real);                                                               \
		if (slot >= 0)                                                                     \
			drop_comm(slot);                                                           \
		shim_leave(slot);                                                                  \
		return r;                                                                          \
	}

ENDING(ncclCommDestroy)
ENDING(ncclCommAbort)

/* NCCL's profiling names (pnccl...) reach the same wrappers: a job that
 * calls them holds the same handles. */
PROFILING_NAME(ncclCommAbort)
PROFILING_NAME(ncclCommDestroy)
PROFILING_NAME(ncclCommGrow)
PROFILING_NAME(ncclCommInitAll)
PROFILING_NAME(ncclCommInitRank)
PROFILING_NAME(ncclCommInitRankConfig)
PROFILING_NAME(ncclCommInitRankScalable)
PROFILING_NAME(ncclCommShrink)
PROFILING_NAME(ncclCommSplit)
