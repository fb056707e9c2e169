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
 * every NCCL call that takes a communicator goes through here.
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
static nccl_result enter(nccl_comm handle, nccl_comm *real, int *slot)
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

static void leave(int slot)
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

static void update_unsafe(void)
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

void shim_mark_unsafe(uint32_t bit)
{
	pthread_mutex_lock(&shim_comms_lock);
	made_unsafe |= bit;
	update_unsafe();
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
	update_unsafe();
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
	update_unsafe();
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
	if (enter(comm, &real, &parent) != NCCL_SUCCESS)
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
		update_unsafe();
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
			update_unsafe();
			pthread_mutex_unlock(&shim_comms_lock);
		}
	}
	leave(parent);
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
	update_unsafe();
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
	if (enter(comm, &real, &slot) != NCCL_SUCCESS)
		return NCCL_INTERNAL_ERROR;
	r = fn_ncclCommShrink(real, exclude, nexclude, newcomm, config, flags);
	leave(slot);
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
	if (enter(comm, &real, &slot) != NCCL_SUCCESS)
		return NCCL_INTERNAL_ERROR;
	r = fn_ncclCommGrow(real, nranks, id, rank, newcomm, config);
	leave(slot);
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
		if (enter(comm, &real, &slot) != NCCL_SUCCESS)                                     \
			return NCCL_INTERNAL_ERROR;                                                \
		r = fn_##name(real);                                                               \
		if (slot >= 0)                                                                     \
			drop_comm(slot);                                                           \
		leave(slot);                                                                       \
		return r;                                                                          \
	}

ENDING(ncclCommDestroy)
ENDING(ncclCommAbort)

/* ---- calls passed on with NCCL's communicator ---- */

#define THROUGH(name, params, args, type)                                                          \
	EXPORT nccl_result name params                                                             \
	{                                                                                          \
		nccl_comm real;                                                                    \
		nccl_result r;                                                                     \
		int slot;                                                                          \
                                                                                                   \
		REAL(name, type);                                                                  \
		if (enter(comm, &real, &slot) != NCCL_SUCCESS)                                     \
			return NCCL_INTERNAL_ERROR;                                                \
		r = fn_##name args;                                                                \
		leave(slot);                                                                       \
		return r;                                                                          \
	}

THROUGH(ncclCommFinalize, (nccl_comm comm), (real), nccl_result (*)(nccl_comm))
THROUGH(ncclCommRevoke, (nccl_comm comm, int flags), (real, flags), nccl_result (*)(nccl_comm, int))
THROUGH(ncclCommGetUniqueId, (nccl_comm comm, nccl_unique_id *id), (real, id),
	nccl_result (*)(nccl_comm, nccl_unique_id *))
THROUGH(ncclCommSuspend, (nccl_comm comm, int flags), (real, flags),
	nccl_result (*)(nccl_comm, int))
THROUGH(ncclCommResume, (nccl_comm comm), (real), nccl_result (*)(nccl_comm))
THROUGH(ncclCommMemStats, (nccl_comm comm, int stat, uint64_t *value), (real, stat, value),
	nccl_result (*)(nccl_comm, int, uint64_t *))
THROUGH(ncclWinGetUserPtr, (nccl_comm comm, void *win, void **ptr), (real, win, ptr),
	nccl_result (*)(nccl_comm, void *, void **))
THROUGH(ncclGinBarrierCreateRequirement,
	(nccl_comm comm, void *team, int n, void *handle, void *req), (real, team, n, handle, req),
	nccl_result (*)(nccl_comm, void *, int, void *, void *))

/* ---- questions answered while the communicators are taken apart ----
 * PyTorch's watchdog asks for a communicator's errors all the time: it
 * must neither wait for a checkpoint nor see an error then. */

/* Into NCCL with handle where the communicators are the job's (as
 * enter); where they are taken apart, or being, false at once, with the
 * answer kept to give. */
static bool enter_or_keep(nccl_comm comm, nccl_comm *real, int *slot)
{
	*slot = shim_slot_of(comm);
	*real = comm;
	if (*slot < 0)
		return true;
	shim_inside_add();
	if (!shim_gate_open() && !shim_servicing) {
		shim_inside_drop();
		return false;
	}
	*real = shim_real_comm(*slot);
	return true;
}

EXPORT nccl_result ncclCommGetAsyncError(nccl_comm comm, nccl_result *error)
{
	nccl_comm real;
	nccl_result r;
	int slot;

	REAL(ncclCommGetAsyncError, nccl_result(*)(nccl_comm, nccl_result *));
	if (!enter_or_keep(comm, &real, &slot)) {
		*error = shim_gate_failed() ? NCCL_INTERNAL_ERROR : NCCL_SUCCESS;
		return NCCL_SUCCESS;
	}
	r = fn_ncclCommGetAsyncError(real, error);
	leave(slot);
	return r;
}

/* The size, rank and device a communicator had, until it is back. */
#define KEPT_INT(name, field)                                                                      \
	EXPORT nccl_result name(nccl_comm comm, int *value)                                        \
	{                                                                                          \
		nccl_comm real;                                                                    \
		nccl_result r;                                                                     \
		int slot;                                                                          \
                                                                                                   \
		REAL(name, nccl_result (*)(nccl_comm, int *));                                     \
		if (!enter_or_keep(comm, &real, &slot)) {                                          \
			if (shim_handles[slot].field >= 0) {                                       \
				*value = shim_handles[slot].field;                                 \
				return NCCL_SUCCESS;                                               \
			}                                                                          \
			if (enter(comm, &real, &slot) != NCCL_SUCCESS) /* not known yet */         \
				return NCCL_INTERNAL_ERROR;                                        \
		}                                                                                  \
		r = fn_##name(real, value);                                                        \
		leave(slot);                                                                       \
		return r;                                                                          \
	}

KEPT_INT(ncclCommCount, nranks)
KEPT_INT(ncclCommUserRank, rank)
KEPT_INT(ncclCommCuDevice, device)

EXPORT const char *ncclGetLastError(nccl_comm comm)
{
	static const char *(*fn)(nccl_comm);
	nccl_comm real;
	const char *s;
	int slot;

	if (!fn)
		fn = (const char *(*)(nccl_comm))shim_real("ncclGetLastError");
	if (!fn)
		return "";
	if (!enter_or_keep(comm, &real, &slot))
		return shim_gate_failed() ? "the communicator could not be made again after a "
					    "checkpoint"
					  : "";
	s = fn(real);
	leave(slot);
	return s;
}

/* ---- NCCL's device API, on the host: passed on ---- */

struct nccl_team {
	int nranks, rank, stride;
};

#define TEAM(name)                                                                                 \
	EXPORT struct nccl_team name(nccl_comm comm)                                               \
	{                                                                                          \
		static struct nccl_team (*fn)(nccl_comm);                                          \
		struct nccl_team t = {0, 0, 0};                                                    \
		nccl_comm real;                                                                    \
		int slot;                                                                          \
                                                                                                   \
		if (!fn)                                                                           \
			fn = (struct nccl_team(*)(nccl_comm))shim_real(#name);                     \
		if (!fn || enter(comm, &real, &slot) != NCCL_SUCCESS)                              \
			return t;                                                                  \
		t = fn(real);                                                                      \
		leave(slot);                                                                       \
		return t;                                                                          \
	}

TEAM(ncclTeamWorld)
TEAM(ncclTeamLsa)
TEAM(ncclTeamRail)

#define TEAM_RANK(name)                                                                            \
	EXPORT int name(nccl_comm comm, struct nccl_team team, int rank)                           \
	{                                                                                          \
		static int (*fn)(nccl_comm, struct nccl_team, int);                                \
		nccl_comm real;                                                                    \
		int slot, r;                                                                       \
                                                                                                   \
		if (!fn)                                                                           \
			fn = (int (*)(nccl_comm, struct nccl_team, int))shim_real(#name);          \
		if (!fn || enter(comm, &real, &slot) != NCCL_SUCCESS)                              \
			return -1;                                                                 \
		r = fn(real, team, rank);                                                          \
		leave(slot);                                                                       \
		return r;                                                                          \
	}

TEAM_RANK(ncclTeamRankToWorld)
TEAM_RANK(ncclTeamRankToLsa)

THROUGH(ncclCommQueryProperties, (nccl_comm comm, void *props), (real, props),
	nccl_result (*)(nccl_comm, void *))

/* ---- what a communicator holds: counted, refused while it lives ---- */

#define HELD(name, params, args, type, field, delta)                                               \
	EXPORT nccl_result name params                                                             \
	{                                                                                          \
		nccl_comm real;                                                                    \
		nccl_result r;                                                                     \
		int slot;                                                                          \
                                                                                                   \
		REAL(name, type);                                                                  \
		if (enter(comm, &real, &slot) != NCCL_SUCCESS)                                     \
			return NCCL_INTERNAL_ERROR;                                                \
		r = fn_##name args;                                                                \
		if (r == NCCL_SUCCESS && slot >= 0) {                                              \
			pthread_mutex_lock(&shim_comms_lock);                                      \
			if (delta > 0 || shim_handles[slot].field > 0)                             \
				shim_handles[slot].field += (unsigned int)(delta);                 \
			update_unsafe();                                                           \
			pthread_mutex_unlock(&shim_comms_lock);                                    \
		}                                                                                  \
		leave(slot);                                                                       \
		return r;                                                                          \
	}

HELD(ncclCommRegister, (nccl_comm comm, void *buf, size_t size, void **handle),
     (real, buf, size, handle), nccl_result (*)(nccl_comm, void *, size_t, void **), registered, 1)
HELD(ncclCommDeregister, (nccl_comm comm, void *handle), (real, handle),
     nccl_result (*)(nccl_comm, void *), registered, -1)
HELD(ncclCommWindowRegister, (nccl_comm comm, void *buf, size_t size, void **win, int flags),
     (real, buf, size, win, flags), nccl_result (*)(nccl_comm, void *, size_t, void **, int),
     windows, 1)
HELD(ncclCommWindowDeregister, (nccl_comm comm, void *win), (real, win),
     nccl_result (*)(nccl_comm, void *), windows, -1)
HELD(ncclDevCommCreate, (nccl_comm comm, const void *reqs, void *dev), (real, reqs, dev),
     nccl_result (*)(nccl_comm, const void *, void *), device_comms, 1)
HELD(ncclDevCommDestroy, (nccl_comm comm, const void *dev), (real, dev),
     nccl_result (*)(nccl_comm, const void *), device_comms, -1)

/* ---- reduction operators, made again with their communicator ---- */

static size_t datatype_size(int t)
{
	/* ncclInt8 .. ncclFloat8e5m2 */
	static const unsigned char sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

	return t >= 0 && t < (int)sizeof(sizes) ? sizes[t] : 0;
}

int shim_real_op(int slot, int op)
{
	int i = op - SYNTHETIC_OP(slot, 0);

	if (slot < 0 || i < 0 || i >= OPS_MAX || !shim_handles[slot].ops[i].used)
		return op;
	return shim_handles[slot].ops[i].real;
}

EXPORT nccl_result ncclRedOpCreatePreMulSum(int *op, void *scalar, int datatype, int residence,
					    nccl_comm comm)
{
	nccl_comm real;
	nccl_result r;
	int slot;

	REAL(ncclRedOpCreatePreMulSum, nccl_result(*)(int *, void *, int, int, nccl_comm));
	if (enter(comm, &real, &slot) != NCCL_SUCCESS)
		return NCCL_INTERNAL_ERROR;
	r = fn_ncclRedOpCreatePreMulSum(op, scalar, datatype, residence, real);
	if (r == NCCL_SUCCESS && slot >= 0 && shim_wrap_handles == 1) {
		struct shim_handle *h = &shim_handles[slot];
		size_t size = residence == SCALAR_DEVICE ? sizeof(void *) : datatype_size(datatype);
		int i;

		pthread_mutex_lock(&shim_comms_lock);
		for (i = 0; i < OPS_MAX && h->ops[i].used; i++)
			;
		if (i < OPS_MAX && size) {
			struct redop *o = &h->ops[i];

			*o = (struct redop){.used = true,
					    .real = *op,
					    .datatype = datatype,
					    .residence = residence};
			memcpy(o->scalar, residence == SCALAR_DEVICE ? (void *)&scalar : scalar,
			       size);
			*op = SYNTHETIC_OP(slot, i);
		} else {
			made_unsafe |= NCCL_UNSAFE_OPS;
		}
		update_unsafe();
		pthread_mutex_unlock(&shim_comms_lock);
	}
	leave(slot);
	return r;
}

EXPORT nccl_result ncclRedOpDestroy(int op, nccl_comm comm)
{
	nccl_comm real;
	nccl_result r;
	int slot;

	REAL(ncclRedOpDestroy, nccl_result(*)(int, nccl_comm));
	if (enter(comm, &real, &slot) != NCCL_SUCCESS)
		return NCCL_INTERNAL_ERROR;
	r = fn_ncclRedOpDestroy(shim_real_op(slot, op), real);
	if (r == NCCL_SUCCESS && slot >= 0) {
		int i = op - SYNTHETIC_OP(slot, 0);

		if (i >= 0 && i < OPS_MAX)
			shim_handles[slot].ops[i].used = false;
	}
	leave(slot);
	return r;
}

/* NCCL's profiling names (pnccl...) reach the same wrappers: a job that
 * calls them holds the same handles. */
EXPORT __typeof__(ncclCommAbort) pncclCommAbort __attribute__((alias("ncclCommAbort")));
EXPORT __typeof__(ncclCommCount) pncclCommCount __attribute__((alias("ncclCommCount")));
EXPORT __typeof__(ncclCommCuDevice) pncclCommCuDevice __attribute__((alias("ncclCommCuDevice")));
EXPORT __typeof__(ncclCommDeregister) pncclCommDeregister
    __attribute__((alias("ncclCommDeregister")));
EXPORT __typeof__(ncclCommDestroy) pncclCommDestroy __attribute__((alias("ncclCommDestroy")));
EXPORT __typeof__(ncclCommFinalize) pncclCommFinalize __attribute__((alias("ncclCommFinalize")));
EXPORT __typeof__(ncclCommGetAsyncError) pncclCommGetAsyncError
    __attribute__((alias("ncclCommGetAsyncError")));
EXPORT __typeof__(ncclCommGetUniqueId) pncclCommGetUniqueId
    __attribute__((alias("ncclCommGetUniqueId")));
EXPORT __typeof__(ncclCommGrow) pncclCommGrow __attribute__((alias("ncclCommGrow")));
EXPORT __typeof__(ncclCommInitAll) pncclCommInitAll __attribute__((alias("ncclCommInitAll")));
EXPORT __typeof__(ncclCommInitRank) pncclCommInitRank __attribute__((alias("ncclCommInitRank")));
EXPORT __typeof__(ncclCommInitRankConfig) pncclCommInitRankConfig
    __attribute__((alias("ncclCommInitRankConfig")));
EXPORT __typeof__(ncclCommInitRankScalable) pncclCommInitRankScalable
    __attribute__((alias("ncclCommInitRankScalable")));
EXPORT __typeof__(ncclCommMemStats) pncclCommMemStats __attribute__((alias("ncclCommMemStats")));
EXPORT __typeof__(ncclCommQueryProperties) pncclCommQueryProperties
    __attribute__((alias("ncclCommQueryProperties")));
EXPORT __typeof__(ncclCommRegister) pncclCommRegister __attribute__((alias("ncclCommRegister")));
EXPORT __typeof__(ncclCommResume) pncclCommResume __attribute__((alias("ncclCommResume")));
EXPORT __typeof__(ncclCommRevoke) pncclCommRevoke __attribute__((alias("ncclCommRevoke")));
EXPORT __typeof__(ncclCommShrink) pncclCommShrink __attribute__((alias("ncclCommShrink")));
EXPORT __typeof__(ncclCommSplit) pncclCommSplit __attribute__((alias("ncclCommSplit")));
EXPORT __typeof__(ncclCommSuspend) pncclCommSuspend __attribute__((alias("ncclCommSuspend")));
EXPORT __typeof__(ncclCommUserRank) pncclCommUserRank __attribute__((alias("ncclCommUserRank")));
EXPORT __typeof__(ncclCommWindowDeregister) pncclCommWindowDeregister
    __attribute__((alias("ncclCommWindowDeregister")));
EXPORT __typeof__(ncclCommWindowRegister) pncclCommWindowRegister
    __attribute__((alias("ncclCommWindowRegister")));
EXPORT __typeof__(ncclDevCommCreate) pncclDevCommCreate __attribute__((alias("ncclDevCommCreate")));
EXPORT __typeof__(ncclDevCommDestroy) pncclDevCommDestroy
    __attribute__((alias("ncclDevCommDestroy")));
EXPORT __typeof__(ncclGetLastError) pncclGetLastError __attribute__((alias("ncclGetLastError")));
EXPORT __typeof__(ncclGinBarrierCreateRequirement) pncclGinBarrierCreateRequirement
    __attribute__((alias("ncclGinBarrierCreateRequirement")));
EXPORT __typeof__(ncclRedOpCreatePreMulSum) pncclRedOpCreatePreMulSum
    __attribute__((alias("ncclRedOpCreatePreMulSum")));
EXPORT __typeof__(ncclRedOpDestroy) pncclRedOpDestroy __attribute__((alias("ncclRedOpDestroy")));
EXPORT __typeof__(ncclTeamLsa) pncclTeamLsa __attribute__((alias("ncclTeamLsa")));
EXPORT __typeof__(ncclTeamRail) pncclTeamRail __attribute__((alias("ncclTeamRail")));
EXPORT __typeof__(ncclTeamRankToLsa) pncclTeamRankToLsa __attribute__((alias("ncclTeamRankToLsa")));
EXPORT __typeof__(ncclTeamRankToWorld) pncclTeamRankToWorld
    __attribute__((alias("ncclTeamRankToWorld")));
EXPORT __typeof__(ncclTeamWorld) pncclTeamWorld __attribute__((alias("ncclTeamWorld")));
EXPORT __typeof__(ncclWinGetUserPtr) pncclWinGetUserPtr __attribute__((alias("ncclWinGetUserPtr")));
