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
 * Held there, the ranks also take their communicators apart and make them
 * again behind the same handles (nccl-shim-comms.c).
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
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "shim.h"

struct nccl_shim_block *shim_block;
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
void *shim_real(const char *name)
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

/* The block, made at the first communicator. Without it (no memfd: an old
 * kernel, a seccomp filter), collectives are only passed on. */
static void make_block_once(void)
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
	shim_block = map;
	shim_block->version = NCCL_SHIM_VERSION;
	__atomic_store_n(&shim_block->magic, NCCL_SHIM_MAGIC, __ATOMIC_RELEASE);
	/* The descriptor stays open: it is how stasis finds the block. */
}

void shim_make_block(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, make_block_once);
}

static bool behind(int slot)
{
	const struct nccl_shim_comm *c = &shim_block->comms[slot];

	return __atomic_load_n(&c->issued, __ATOMIC_SEQ_CST) <
	       __atomic_load_n(&c->target, __ATOMIC_SEQ_CST);
}

/* Whether any communicator of this process is behind its target (a
 * group's start, whose collectives are not known yet). */
static bool any_behind(void)
{
	uint32_t n = __atomic_load_n(&shim_block->ncomms, __ATOMIC_SEQ_CST);

	for (uint32_t i = 0; i < n && i < NCCL_SHIM_COMMS; i++)
		if (__atomic_load_n(&shim_block->comms[i].live, __ATOMIC_SEQ_CST) && behind((int)i))
			return true;
	return false;
}

/* Whether the stasis that holds this rank has gone (killed in the
 * middle): its PID is no more, or is another process's. A hold whose
 * holder is not known is waited out. */
bool shim_holder_gone(void)
{
	uint32_t pid = __atomic_load_n(&shim_block->holder_pid, __ATOMIC_SEQ_CST);
	uint64_t since = __atomic_load_n(&shim_block->holder_start, __ATOMIC_SEQ_CST);
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
	if (!shim_gate_open())
		return shim_gate_failed();
	if (__atomic_load_n(&shim_block->request, __ATOMIC_SEQ_CST) != NCCL_SHIM_HOLD)
		return true;
	return slot >= 0 ? behind(slot) : any_behind();
}

/* At a boundary: waits while held unless this rank is behind, and while
 * the communicators are taken apart (slot: the collective's communicator,
 * counted once it may go; -1: a group's start, in in_group once it may
 * go; a thread waiting here is in neither). in_check covers the check and
 * the count alone, never NCCL's call (a launch may block while the GPU's
 * queue is full, until a peer catches up): stasis reads the counts when
 * no thread is between the two. A thread that may go is inside (the
 * teardown waits for it) from before its check to the end of NCCL's call:
 * a collective counted is launched on the communicator it was counted on. */
static void boundary(int slot)
{
	static const struct timespec tick = {.tv_nsec = 100000};
	bool parked = false;
	unsigned int ticks = 0;

	for (;;) {
		__atomic_add_fetch(&shim_block->in_check, 1, __ATOMIC_SEQ_CST);
		shim_inside_add();
		if (may_go(slot))
			break;
		shim_inside_drop();
		__atomic_sub_fetch(&shim_block->in_check, 1, __ATOMIC_SEQ_CST);
		if (!parked) {
			parked = true;
			__atomic_add_fetch(&shim_block->parked, 1, __ATOMIC_SEQ_CST);
			__atomic_add_fetch(&shim_block->holds, 1, __ATOMIC_RELAXED);
		}
		/* Every 0.1 s: a holder killed in the middle lets no one go. */
		if (++ticks % 1000 == 0 && shim_holder_gone()) {
			uint32_t held = NCCL_SHIM_HOLD;

			/* For every thread of the rank; a new stasis's hold
			 * names its own holder first. */
			__atomic_compare_exchange_n(&shim_block->request, &held, NCCL_SHIM_RUN,
						    false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
			continue;
		}
		nanosleep(&tick, NULL);
	}
	/* A collective counted, or a group entered, before in_check drops:
	 * there is no moment when the thread is in neither. */
	if (slot >= 0)
		__atomic_add_fetch(&shim_block->comms[slot].issued, 1, __ATOMIC_SEQ_CST);
	else
		__atomic_add_fetch(&shim_block->in_group, 1, __ATOMIC_SEQ_CST);
	__atomic_sub_fetch(&shim_block->in_check, 1, __ATOMIC_SEQ_CST);
	if (parked)
		__atomic_sub_fetch(&shim_block->parked, 1, __ATOMIC_SEQ_CST);
}

/* Before a collective on handle: counted, after a wait at a boundary where
 * it starts one (outside a group). Returns NCCL's communicator to launch
 * it on; *inside says whether the caller drops inside after the launch. */
static nccl_comm collective_begin(nccl_comm handle, enum nccl_shim_op op, bool *inside, int *slotp)
{
	int slot = shim_slot_of(handle);

	*inside = false;
	*slotp = slot;
	if (!shim_block || slot < 0 || shim_servicing)
		return slot >= 0 ? shim_real_comm(slot) : handle;
	if (group_depth == 0) {
		boundary(slot);
		*inside = true;
	} else {
		__atomic_add_fetch(&shim_block->comms[slot].issued, 1, __ATOMIC_SEQ_CST);
		group_counts[slot]++;
	}
	__atomic_store_n(&shim_block->comms[slot].last_op, op, __ATOMIC_RELAXED);
	return shim_real_comm(slot);
}

/* Whether this thread's open group was counted in in_group (the block may
 * be made inside a group, by a communicator's creation). */
static __thread bool group_counted;

/* The thread's group left: in_group no more, its counts kept or, for a
 * group only simulated (never launched), taken back. */
static bool group_left(bool launched)
{
	bool counted = group_counted;

	if (group_depth == 0 || --group_depth > 0)
		return false;
	for (int i = 0; i < NCCL_SHIM_COMMS; i++) {
		if (group_counts[i] && !launched)
			__atomic_sub_fetch(&shim_block->comms[i].issued, group_counts[i],
					   __ATOMIC_SEQ_CST);
		group_counts[i] = 0;
	}
	if (counted) {
		group_counted = false;
		__atomic_sub_fetch(&shim_block->in_group, 1, __ATOMIC_SEQ_CST);
	}
	return counted;
}

/* A group's collectives are counted without a check, as they come: from
 * its start to its end it is in in_group, and stasis does not take the
 * counts as final while any is. Its end is left before NCCL's launch,
 * which may block until a peer catches up; the thread stays inside until
 * the launch is done. */
EXPORT nccl_result ncclGroupStart(void)
{
	REAL(ncclGroupStart, nccl_result(*)(void));
	if (shim_block && group_depth == 0 && !shim_servicing) {
		boundary(-1); /* in in_group, and inside, once it may go */
		group_counted = true;
	}
	group_depth++;
	return fn_ncclGroupStart();
}

EXPORT nccl_result ncclGroupEnd(void)
{
	bool was_counted;
	nccl_result r;

	REAL(ncclGroupEnd, nccl_result(*)(void));
	was_counted = group_left(true);
	r = fn_ncclGroupEnd();
	if (was_counted)
		shim_inside_drop();
	return r;
}

/* Ends a group without launching it (NCCL's estimate of its time). */
EXPORT nccl_result ncclGroupSimulateEnd(void *info)
{
	bool was_counted;
	nccl_result r;

	REAL(ncclGroupSimulateEnd, nccl_result(*)(void *));
	was_counted = group_left(false);
	r = fn_ncclGroupSimulateEnd(info);
	if (was_counted)
		shim_inside_drop();
	return r;
}

/* ---- collectives ---- */

/* A collective launched into a CUDA graph being captured: the graph, which
 * the job may replay at any time, holds its communicator's kernels and
 * buffers, which a teardown would take away. Asked of the driver, which
 * every CUDA process has loaded (cuStreamIsCapturing may be asked during
 * a capture). */
static void note_capture(cuda_stream stream)
{
	static int (*is_capturing)(void *, int *);
	static bool resolved;
	int status = 0;

	if (!__atomic_load_n(&resolved, __ATOMIC_ACQUIRE)) {
		void *cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);

		if (cuda)
			is_capturing = (int (*)(void *, int *))dlsym(cuda, "cuStreamIsCapturing");
		__atomic_store_n(&resolved, true, __ATOMIC_RELEASE);
	}
	if (is_capturing && is_capturing(stream, &status) == 0 && status != 0)
		shim_mark_unsafe(NCCL_UNSAFE_GRAPH);
}

#define COLLECTIVE(name, op, params, args, type)                                                   \
	EXPORT nccl_result name params                                                             \
	{                                                                                          \
		bool inside;                                                                       \
		nccl_result r;                                                                     \
		int slot;                                                                          \
                                                                                                   \
		REAL(name, type);                                                                  \
		comm = collective_begin(comm, op, &inside, &slot);                                 \
		if (shim_block)                                                                    \
			note_capture(st);                                                          \
		r = shim_gate_failed() && inside ? NCCL_INTERNAL_ERROR : fn_##name args;           \
		if (inside)                                                                        \
			shim_inside_drop();                                                        \
		return r;                                                                          \
	}
COLLECTIVE(ncclAllReduce, NCCL_OP_ALL_REDUCE,
	   (const void *s, void *d, size_t n, int t, int o, nccl_comm comm, cuda_stream st),
	   (s, d, n, t, shim_real_op(slot, o), comm, st),
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
	   (s, d, n, t, shim_real_op(slot, o), root, comm, st),
	   nccl_result (*)(const void *, void *, size_t, int, int, int, nccl_comm, cuda_stream))
COLLECTIVE(ncclAllGather, NCCL_OP_ALL_GATHER,
	   (const void *s, void *d, size_t n, int t, nccl_comm comm, cuda_stream st),
	   (s, d, n, t, comm, st),
	   nccl_result (*)(const void *, void *, size_t, int, nccl_comm, cuda_stream))
COLLECTIVE(ncclReduceScatter, NCCL_OP_REDUCE_SCATTER,
	   (const void *s, void *d, size_t n, int t, int o, nccl_comm comm, cuda_stream st),
	   (s, d, n, t, shim_real_op(slot, o), comm, st),
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
COLLECTIVE(ncclSignal, NCCL_OP_SEND,
	   (int peer, int sig, int ctx, unsigned int flags, nccl_comm comm, cuda_stream st),
	   (peer, sig, ctx, flags, comm, st),
	   nccl_result (*)(int, int, int, unsigned int, nccl_comm, cuda_stream))
COLLECTIVE(ncclWaitSignal, NCCL_OP_RECV, (int n, void *descs, nccl_comm comm, cuda_stream st),
	   (n, descs, comm, st), nccl_result (*)(int, void *, nccl_comm, cuda_stream))
COLLECTIVE(ncclPutSignal, NCCL_OP_SEND,
	   (const void *s, size_t n, int t, int peer, void *win, size_t off, int sig, int ctx,
	    unsigned int flags, nccl_comm comm, cuda_stream st),
	   (s, n, t, peer, win, off, sig, ctx, flags, comm, st),
	   nccl_result (*)(const void *, size_t, int, int, void *, size_t, int, int, unsigned int,
			   nccl_comm, cuda_stream))

/* NCCL's profiling names (pnccl...) reach the same wrappers: a job that
 * calls them holds the same handles. */
PROFILING_NAME(ncclAllGather)
PROFILING_NAME(ncclAllReduce)
PROFILING_NAME(ncclAlltoAll)
PROFILING_NAME(ncclBcast)
PROFILING_NAME(ncclBroadcast)
PROFILING_NAME(ncclGather)
PROFILING_NAME(ncclGroupEnd)
PROFILING_NAME(ncclGroupSimulateEnd)
PROFILING_NAME(ncclGroupStart)
PROFILING_NAME(ncclPutSignal)
PROFILING_NAME(ncclRecv)
PROFILING_NAME(ncclReduce)
PROFILING_NAME(ncclReduceScatter)
PROFILING_NAME(ncclScatter)
PROFILING_NAME(ncclSend)
PROFILING_NAME(ncclSignal)
PROFILING_NAME(ncclWaitSignal)
