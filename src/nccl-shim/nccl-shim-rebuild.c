/* SPDX-License-Identifier: MIT */
/* The interposer's thread ("stasis-nccl"): on stasis's word, with every
 * rank held at one collective boundary, it takes the job's communicators
 * apart; let go, it makes them again in the order the job made them,
 * behind the same handles (nccl-shim-comms.c says why). */
#include <dlfcn.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shim-comms.h"

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* The log's creations in the order they came. comms lock held. */
static int creation_order(int *order)
{
	int n = 0;

	for (int i = 0; i < shim_ncreations; i++)
		if (shim_creations[i].used)
			order[n++] = i;
	for (int i = 1; i < n; i++)
		for (int j = i;
		     j > 0 && shim_creation_seq[order[j - 1]] > shim_creation_seq[order[j]]; j--) {
			int t = order[j];

			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	return n;
}

/* A non-blocking communicator's call done (NCCL answers in progress until
 * then); at most a minute. */
static nccl_result wait_ready(nccl_comm real)
{
	static const struct timespec tick = {.tv_nsec = 1000000};
	nccl_result r = NCCL_IN_PROGRESS;
	uint64_t start = now_us();

	REAL(ncclCommGetAsyncError, nccl_result(*)(nccl_comm, nccl_result *));
	while (r == NCCL_IN_PROGRESS && now_us() - start < 60000000u) {
		nccl_result q = fn_ncclCommGetAsyncError(real, &r);

		if (q != NCCL_SUCCESS)
			return q;
		if (r == NCCL_IN_PROGRESS)
			nanosleep(&tick, NULL);
	}
	return r;
}

/* This thread on the CUDA device the communicator was made on: NCCL
 * makes one on the caller's current device. Through the driver, which
 * every CUDA process has loaded (the runtime may be local to a Python
 * extension). */
static void use_device(int ordinal)
{
	static int (*device_get)(int *, int);
	static int (*retain)(void **, int);
	static int (*set_current)(void *);
	static void *retained[64];
	void *ctx = NULL;
	int dev;

	if (ordinal < 0)
		return;
	if (!device_get) {
		void *cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);

		if (!cuda)
			return;
		retain = (int (*)(void **, int))dlsym(cuda, "cuDevicePrimaryCtxRetain");
		set_current = (int (*)(void *))dlsym(cuda, "cuCtxSetCurrent");
		device_get = (int (*)(int *, int))dlsym(cuda, "cuDeviceGet");
	}
	if (!device_get || !retain || !set_current || ordinal >= 64 ||
	    device_get(&dev, ordinal) != 0)
		return;
	/* Retained once a device, for the thread's life: the primary context
	 * the job's runtime uses too. */
	if (!retained[ordinal] && retain(&ctx, dev) == 0)
		retained[ordinal] = ctx;
	if (retained[ordinal])
		set_current(retained[ordinal]);
}

static void set_phase(enum nccl_shim_phase phase, nccl_result error)
{
	if (phase == NCCL_PHASE_FAILED)
		__atomic_store_n(&shim_block->failed_in,
				 __atomic_load_n(&shim_block->phase, __ATOMIC_SEQ_CST),
				 __ATOMIC_SEQ_CST);
	__atomic_store_n(&shim_block->error, error, __ATOMIC_SEQ_CST);
	__atomic_store_n(&shim_block->phase, phase, __ATOMIC_SEQ_CST);
}

static bool held(void)
{
	return __atomic_load_n(&shim_block->request, __ATOMIC_SEQ_CST) == NCCL_SHIM_HOLD;
}

static uint32_t next_gen(void)
{
	return __atomic_load_n(&shim_block->gen, __ATOMIC_SEQ_CST) + 1;
}

/* Whether stasis, holding the ranks, asks for the next teardown. */
static bool teardown_asked(void)
{
	return held() && __atomic_load_n(&shim_block->teardown, __ATOMIC_SEQ_CST) == next_gen();
}

static bool destroy_asked(void)
{
	return teardown_asked() &&
	       __atomic_load_n(&shim_block->destroy, __ATOMIC_SEQ_CST) == next_gen();
}

/* Whether the ranks, taken apart, are let go: stasis let them go (or
 * asks for no teardown any more), or the stasis that holds them is gone. */
static bool let_go(void)
{
	return !held() ||
	       __atomic_load_n(&shim_block->teardown, __ATOMIC_SEQ_CST) !=
		   __atomic_load_n(&shim_block->gen, __ATOMIC_SEQ_CST) ||
	       shim_holder_gone();
}

/* Every creation's device: a communicator's own, a split without one
 * (NOCOLOR, or its child since destroyed) its parent's. */
static nccl_result read_devices(const int *order, int n)
{
	REAL(ncclCommCuDevice, nccl_result(*)(nccl_comm, int *));
	for (int k = 0; k < n; k++) {
		struct creation *c = &shim_creations[order[k]];

		c->device = c->split && c->parent >= 0 ? shim_creations[c->parent].device : -1;
		if (c->slot >= 0 && shim_handles[c->slot].real &&
		    fn_ncclCommCuDevice(shim_handles[c->slot].real, &c->device) != NCCL_SUCCESS)
			return NCCL_INTERNAL_ERROR;
		if (c->slot >= 0)
			shim_handles[c->slot].device = c->device;
	}
	return NCCL_SUCCESS;
}

/* The rank 0 of each communicator made from an id asks for the id of its
 * next life, for stasis to copy to the peers; once for each teardown (a
 * teardown undone and asked again keeps the id, whose listener waits). */
static nccl_result post_next_ids(const int *order, int n, uint32_t gen)
{
	REAL(ncclGetUniqueId, nccl_result(*)(nccl_unique_id *));
	for (int k = 0; k < n; k++) {
		const struct creation *c = &shim_creations[order[k]];
		struct nccl_shim_comm *wire;
		nccl_unique_id id;
		nccl_result r;

		if (c->split || c->slot < 0 || c->rank != 0 ||
		    __atomic_load_n(&shim_block->comms[c->slot].uid_gen, __ATOMIC_SEQ_CST) == gen)
			continue;
		r = fn_ncclGetUniqueId(&id);
		if (r != NCCL_SUCCESS)
			return r;
		wire = &shim_block->comms[c->slot];
		memcpy(wire->next_uid, id.internal, sizeof(id.internal));
		__atomic_store_n(&wire->uid_gen, gen, __ATOMIC_SEQ_CST);
	}
	return NCCL_SUCCESS;
}

/* Finalized in the order they were made, then destroyed, children
 * first (in NCCL 2.28 both are the rank's own: none waits for a peer). */
static nccl_result destroy_all(const int *order, int n)
{
	nccl_result r;

	REAL(ncclCommFinalize, nccl_result(*)(nccl_comm));
	REAL(ncclCommDestroy, nccl_result(*)(nccl_comm));
	for (int k = 0; k < n; k++) {
		const struct creation *c = &shim_creations[order[k]];
		nccl_comm real = c->slot >= 0 ? shim_handles[c->slot].real : NULL;

		if (!real)
			continue;
		r = fn_ncclCommFinalize(real);
		if (r == NCCL_IN_PROGRESS || r == NCCL_SUCCESS)
			r = wait_ready(real);
		if (r != NCCL_SUCCESS)
			return r;
	}
	for (int k = n - 1; k >= 0; k--) {
		const struct creation *c = &shim_creations[order[k]];
		nccl_comm real = c->slot >= 0 ? shim_handles[c->slot].real : NULL;

		if (!real)
			continue;
		r = fn_ncclCommDestroy(real);
		if (r != NCCL_SUCCESS)
			return r;
		__atomic_store_n(&shim_handles[c->slot].real, NULL, __ATOMIC_RELEASE);
	}
	return NCCL_SUCCESS;
}

/* Waits until no thread of the job is inside NCCL on a communicator, while
 * stasis still asks; false where it stopped asking. */
static bool job_out_of_nccl(void)
{
	static const struct timespec tick = {.tv_nsec = 100000};

	while (__atomic_load_n(&shim_inside, __ATOMIC_SEQ_CST)) {
		if (!teardown_asked() || shim_holder_gone())
			return false;
		nanosleep(&tick, NULL);
	}
	return true;
}

/* A non-blocking communicator launches from NCCL's own thread after the
 * job's call returned: done once NCCL no longer says in progress. */
static nccl_result drain_all(const int *order, int n)
{
	for (int k = 0; k < n; k++) {
		const struct creation *c = &shim_creations[order[k]];
		nccl_comm real = c->slot >= 0 ? shim_handles[c->slot].real : NULL;
		nccl_result r = real ? wait_ready(real) : NCCL_SUCCESS;

		if (r != NCCL_SUCCESS)
			return r == NCCL_IN_PROGRESS ? NCCL_SYSTEM_ERROR : r;
	}
	return NCCL_SUCCESS;
}

/* Open again, nothing destroyed (the error of a refusal kept). */
static void reopen(void)
{
	__atomic_store_n(&shim_gate, GATE_OPEN, __ATOMIC_SEQ_CST);
	__atomic_store_n(&shim_block->phase, NCCL_PHASE_UP, __ATOMIC_SEQ_CST);
}

/* The first half, which changes nothing that cannot be opened again: the
 * job's threads kept out of NCCL, what NCCL still launches done, the
 * devices read, each rank 0's next id posted. */
static void quiesce(void)
{
	int order[LOG_MAX], n;
	nccl_result r;

	__atomic_store_n(&shim_block->phase, NCCL_PHASE_GOING_DOWN, __ATOMIC_SEQ_CST);
	__atomic_store_n(&shim_gate, GATE_CLOSED, __ATOMIC_SEQ_CST);
	if (!job_out_of_nccl()) {
		reopen();
		return;
	}
	pthread_mutex_lock(&shim_comms_lock);
	n = creation_order(order);
	r = drain_all(order, n);
	if (r == NCCL_SUCCESS)
		r = read_devices(order, n);
	if (r == NCCL_SUCCESS)
		r = post_next_ids(order, n, next_gen());
	pthread_mutex_unlock(&shim_comms_lock);
	if (r != NCCL_SUCCESS) {
		/* Nothing was destroyed: the job goes on; stasis is told. */
		__atomic_store_n(&shim_block->error, r, __ATOMIC_SEQ_CST);
		__atomic_store_n(&shim_block->refused, next_gen(), __ATOMIC_SEQ_CST);
		reopen();
		return;
	}
	set_phase(NCCL_PHASE_QUIET, NCCL_SUCCESS);
}

/* The second half, once every rank is quiet and has its next ids: the
 * communicators are destroyed. */
static void take_apart(void)
{
	int order[LOG_MAX], n;
	uint64_t start = now_us();
	uint32_t gen = next_gen();
	nccl_result r;

	pthread_mutex_lock(&shim_comms_lock);
	n = creation_order(order);
	r = destroy_all(order, n);
	pthread_mutex_unlock(&shim_comms_lock);
	__atomic_store_n(&shim_block->gen, gen, __ATOMIC_SEQ_CST);
	__atomic_store_n(&shim_block->down_us, now_us() - start, __ATOMIC_SEQ_CST);
	if (r != NCCL_SUCCESS) {
		/* Some communicators may be gone: the job's calls fail from
		 * now on rather than reach a communicator that is not there. */
		__atomic_store_n(&shim_gate, GATE_FAILED, __ATOMIC_SEQ_CST);
		set_phase(NCCL_PHASE_FAILED, r);
		return;
	}
	set_phase(NCCL_PHASE_DOWN, NCCL_SUCCESS);
}

/* One creation made again: from the id its rank 0 posted (and stasis
 * copied here), or split from its parent made again. */
/* A child NCCL hands over later (a non-blocking split: it writes the
 * handle from its own thread, into the creation, which outlives the call),
 * at most a minute. */
static void wait_handed_over(struct creation *c)
{
	static const struct timespec tick = {.tv_nsec = 1000000};
	uint64_t start = now_us();

	while (!__atomic_load_n(&c->made, __ATOMIC_ACQUIRE) && now_us() - start < 60000000u)
		nanosleep(&tick, NULL);
}

static nccl_result make_one(struct creation *c, uint32_t gen)
{
	void *config = c->has_config ? c->config : NULL;
	nccl_result r;

	use_device(c->device);
	if (!c->split) {
		const struct nccl_shim_comm *wire =
		    c->slot >= 0 ? &shim_block->comms[c->slot] : NULL;
		nccl_unique_id id;

		REAL(ncclCommInitRankConfig,
		     nccl_result(*)(nccl_comm *, int, nccl_unique_id, int, void *));
		if (!wire || __atomic_load_n(&wire->uid_gen, __ATOMIC_SEQ_CST) != gen)
			return NCCL_INVALID_USAGE; /* no id for this life */
		memcpy(id.internal, wire->next_uid, sizeof(id.internal));
		r = fn_ncclCommInitRankConfig(&c->made, c->nranks, id, c->rank, config);
	} else {
		nccl_comm parent = c->parent >= 0 ? shim_creations[c->parent].made : NULL;

		REAL(ncclCommSplit, nccl_result(*)(nccl_comm, int, int, nccl_comm *, void *));
		if (!parent)
			return NCCL_INTERNAL_ERROR;
		r = fn_ncclCommSplit(parent, c->color, c->key, &c->made, config);
		if (r == NCCL_IN_PROGRESS && c->color != NCCL_SPLIT_NOCOLOR)
			wait_handed_over(c);
	}
	if ((r == NCCL_SUCCESS || r == NCCL_IN_PROGRESS) && c->made)
		r = wait_ready(c->made);
	/* Still in progress after wait_ready's minute: not made. */
	return r == NCCL_IN_PROGRESS ? NCCL_SYSTEM_ERROR : r;
}

/* A communicator's reduction operators made again; the job keeps its
 * ids, which now stand for NCCL's new ones. */
static nccl_result make_ops(struct shim_handle *h)
{
	REAL(ncclRedOpCreatePreMulSum, nccl_result(*)(int *, void *, int, int, nccl_comm));
	for (int i = 0; i < OPS_MAX; i++) {
		struct redop *o = &h->ops[i];
		void *scalar = o->scalar;
		nccl_result r;

		if (!o->used)
			continue;
		if (o->residence == SCALAR_DEVICE)
			memcpy(&scalar, o->scalar, sizeof(scalar));
		r = fn_ncclRedOpCreatePreMulSum(&o->real, scalar, o->datatype, o->residence,
						h->real);
		if (r != NCCL_SUCCESS)
			return r;
	}
	return NCCL_SUCCESS;
}

/* Splits made again only so that the peers could split: their children
 * are not the job's any more. */
static nccl_result destroy_unused(const int *order, int n)
{
	REAL(ncclCommDestroy, nccl_result(*)(nccl_comm));
	for (int k = n - 1; k >= 0; k--) {
		const struct creation *c = &shim_creations[order[k]];
		nccl_result r;

		if (c->slot >= 0 || !c->made)
			continue;
		r = fn_ncclCommDestroy(c->made);
		if (r != NCCL_SUCCESS)
			return r;
	}
	return NCCL_SUCCESS;
}

static void make_again(void)
{
	int order[LOG_MAX], n;
	uint64_t start = now_us();
	uint32_t gen = __atomic_load_n(&shim_block->gen, __ATOMIC_SEQ_CST);
	nccl_result r = NCCL_SUCCESS;

	set_phase(NCCL_PHASE_GOING_UP, NCCL_SUCCESS);
	pthread_mutex_lock(&shim_comms_lock);
	n = creation_order(order);
	for (int k = 0; r == NCCL_SUCCESS && k < n; k++) {
		struct creation *c = &shim_creations[order[k]];

		r = make_one(c, gen);
		if (r == NCCL_SUCCESS && c->slot >= 0)
			__atomic_store_n(&shim_handles[c->slot].real, c->made, __ATOMIC_RELEASE);
	}
	for (int i = 0; r == NCCL_SUCCESS && i < NCCL_SHIM_COMMS; i++)
		if (shim_handles[i].real)
			r = make_ops(&shim_handles[i]);
	if (r == NCCL_SUCCESS)
		r = destroy_unused(order, n);
	for (int k = 0; k < n; k++)
		shim_creations[order[k]].made = NULL;
	pthread_mutex_unlock(&shim_comms_lock);
	__atomic_store_n(&shim_block->up_us, now_us() - start, __ATOMIC_SEQ_CST);
	__atomic_store_n(&shim_block->up_at_us, now_us(), __ATOMIC_SEQ_CST);
	if (r != NCCL_SUCCESS) {
		__atomic_store_n(&shim_gate, GATE_FAILED, __ATOMIC_SEQ_CST);
		set_phase(NCCL_PHASE_FAILED, r);
		return;
	}
	__atomic_store_n(&shim_gate, GATE_OPEN, __ATOMIC_SEQ_CST);
	set_phase(NCCL_PHASE_UP, NCCL_SUCCESS);
}

/* Waits for stasis to change `teardown` or `destroy` (it wakes the futex
 * on `teardown` after either), at most 0.1 s: the holder's life is
 * checked as often. */
static void wait_for_word(uint32_t seen)
{
	struct timespec timeout = {.tv_nsec = 100000000};
	uint32_t now = __atomic_load_n(&shim_block->teardown, __ATOMIC_SEQ_CST);

	if (now + __atomic_load_n(&shim_block->destroy, __ATOMIC_SEQ_CST) != seen)
		return;
	syscall(SYS_futex, &shim_block->teardown, FUTEX_WAIT, now, &timeout, NULL, 0);
}

void *shim_service(void *arg)
{
	(void)arg;
	shim_servicing = true;
	prctl(PR_SET_NAME, "stasis-nccl");
	for (;;) {
		uint32_t asked = __atomic_load_n(&shim_block->teardown, __ATOMIC_SEQ_CST) +
				 __atomic_load_n(&shim_block->destroy, __ATOMIC_SEQ_CST);
		uint32_t phase = __atomic_load_n(&shim_block->phase, __ATOMIC_SEQ_CST);

		if (phase == NCCL_PHASE_UP && teardown_asked() && !shim_holder_gone() &&
		    __atomic_load_n(&shim_block->refused, __ATOMIC_SEQ_CST) != next_gen())
			quiesce();
		else if (phase == NCCL_PHASE_QUIET && destroy_asked() && !shim_holder_gone())
			take_apart();
		else if (phase == NCCL_PHASE_QUIET && (!teardown_asked() || shim_holder_gone()))
			reopen();
		else if (phase == NCCL_PHASE_DOWN && let_go())
			make_again();
		else
			wait_for_word(asked);
	}
	return NULL;
}
