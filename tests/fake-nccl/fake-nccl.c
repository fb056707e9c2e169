/* SPDX-License-Identifier: MIT */
/* A fake libnccl.so.2 for CI: communicators whose ranks are processes of
 * one machine, each collective a count in a file that the communicator's
 * ranks share ($FAKE_NCCL_DIR/comm-ID: one 64-bit count a rank). What it
 * keeps of NCCL's behaviour is what the driver's lock depends on: a
 * rank's collectives are queued work that completes only once every peer
 * has started the same collective, and a rank runs at most QUEUE
 * collectives ahead of its slowest peer before its launch blocks (a full
 * launch queue). The fake driver (fake-cuda.c) reads the same counts to
 * decide whether a rank's queued work can drain for its lock.
 * Each rank also says where its counts are: $FAKE_NCCL_DIR/rank-PID holds
 * "ID RANK NRANKS".
 * NCCL's fast transports map a rank's memory into its peers; the real
 * driver checkpoints such a rank but fails its restore. Here a rank with a
 * live communicator made without NCCL_P2P_DISABLE=1 has the file
 * $FAKE_NCCL_DIR/p2p-PID, and the fake driver fails the restore of a rank
 * checkpointed with it (fake-cuda.c). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define QUEUE 4

typedef struct {
	char internal[128];
} nccl_unique_id;

struct fake_comm {
	int rank, nranks;
	int p2p; /* made with the fast transports on */
	uint64_t *counts;
	char id[17];
	unsigned int splits;   /* ncclCommSplit calls, for the children's ids */
	unsigned int user_ops; /* live ncclRedOpCreatePreMulSum ids, bit (id - FIRST_OP) */
};

/* NCCL's built-in reduction operators come first (ncclNumOps); as NCCL
 * does, a communicator's own ids mix in its address: an id is valid only
 * for the communicator that made it. */
#define FIRST_OP 5
#define OP_BASE(c) (FIRST_OP + (int)(((uintptr_t)(c) >> 4) & 0xffff) * 32)
#define OP_BIT(c, op) ((op)-OP_BASE(c))

static int p2p_live;

static const char *dir(void)
{
	const char *d = getenv("FAKE_NCCL_DIR");

	return d && *d ? d : "/tmp/fake-nccl";
}

static void p2p_file(int delta)
{
	char path[4096];
	int fd;

	p2p_live += delta;
	snprintf(path, sizeof(path), "%s/p2p-%d", dir(), (int)getpid());
	if (p2p_live > 0) {
		fd = open(path, O_WRONLY | O_CREAT, 0600);
		if (fd >= 0)
			close(fd);
	} else {
		unlink(path);
	}
}

EXPORT int ncclGetVersion(int *version)
{
	*version = 22809;
	return 0;
}

EXPORT int ncclGetUniqueId(nccl_unique_id *id)
{
	memset(id, 0, sizeof(*id));
	snprintf(id->internal, sizeof(id->internal), "%08lx%08lx", (long)getpid(), (long)random());
	return 0;
}

/* NCCL's entry points call its internals, never each other: an
 * interposer sees each of the job's calls once. */
static int init_rank(struct fake_comm **comm, int nranks, nccl_unique_id id, int rank, int say_rank)
{
	char path[4096];
	struct fake_comm *c = calloc(1, sizeof(*c));
	size_t len = (size_t)nranks * sizeof(uint64_t);
	int fd;
	FILE *f;

	if (!c || nranks < 1 || rank < 0 || rank >= nranks)
		return 4; /* ncclInvalidArgument */
	snprintf(path, sizeof(path), "%s/comm-%.16s", dir(), id.internal);
	fd = open(path, O_RDWR | O_CREAT, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)len) < 0)
		return 2;
	c->counts = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (c->counts == MAP_FAILED)
		return 2;
	c->rank = rank;
	c->nranks = nranks;
	snprintf(c->id, sizeof(c->id), "%.16s", id.internal);
	snprintf(path, sizeof(path), "%s/rank-%d", dir(), (int)getpid());
	f = say_rank ? fopen(path, "w") : NULL;
	if (f) {
		fprintf(f, "%.16s %d %d\n", id.internal, rank, nranks);
		fclose(f);
	}
	{
		const char *p2p = getenv("NCCL_P2P_DISABLE");

		c->p2p = !p2p || strcmp(p2p, "1") != 0;
		if (c->p2p)
			p2p_file(1);
	}
	*comm = c;
	return 0;
}

EXPORT int ncclCommInitRank(struct fake_comm **comm, int nranks, nccl_unique_id id, int rank)
{
	return init_rank(comm, nranks, id, rank, 1);
}

/* Every rank splits alike here (one color, or NOCOLOR for all): the child
 * has the parent's ranks, its id the parent's, its split count and the
 * color. The fake driver keeps watching the parent. */
EXPORT int ncclCommSplit(struct fake_comm *parent, int color, int key, struct fake_comm **child,
			 void *config)
{
	nccl_unique_id id;
	unsigned long h = 5381;

	(void)key;
	(void)config;
	*child = NULL;
	if (!parent)
		return 4;
	for (const char *p = parent->id; *p; p++)
		h = h * 33 + (unsigned char)*p;
	h = h * 33 + parent->splits++;
	if (color < 0)
		return 0; /* NCCL_SPLIT_NOCOLOR: no child for this rank */
	h = h * 33 + (unsigned int)color;
	memset(&id, 0, sizeof(id));
	snprintf(id.internal, sizeof(id.internal), "%016lx", h);
	return init_rank(child, parent->nranks, id, parent->rank, 0);
}

EXPORT int ncclRedOpCreatePreMulSum(int *op, void *scalar, int datatype, int residence,
				    struct fake_comm *c)
{
	(void)scalar;
	(void)datatype;
	(void)residence;
	for (int i = 0; c && i < 32; i++)
		if (!(c->user_ops & (1u << i))) {
			c->user_ops |= 1u << i;
			*op = OP_BASE(c) + i;
			return 0;
		}
	return 4;
}

EXPORT int ncclRedOpDestroy(int op, struct fake_comm *c)
{
	if (!c || OP_BIT(c, op) < 0 || OP_BIT(c, op) >= 32 ||
	    !(c->user_ops & (1u << OP_BIT(c, op))))
		return 4;
	c->user_ops &= ~(1u << OP_BIT(c, op));
	return 0;
}

EXPORT int ncclCommInitRankConfig(struct fake_comm **comm, int nranks, nccl_unique_id id, int rank,
				  void *config)
{
	(void)config;
	return init_rank(comm, nranks, id, rank, 1);
}

EXPORT int ncclCommFinalize(struct fake_comm *c)
{
	return c ? 0 : 4;
}

EXPORT int ncclCommGetAsyncError(struct fake_comm *c, int *error)
{
	*error = 0;
	return c ? 0 : 4;
}

EXPORT int ncclCommCuDevice(struct fake_comm *c, int *device)
{
	*device = 0;
	return c ? 0 : 4;
}

/* Counted by the interposer: a communicator that holds one cannot be
 * taken apart. */
EXPORT int ncclCommRegister(struct fake_comm *c, void *buf, size_t size, void **handle)
{
	*handle = buf;
	return c ? 0 : 4;
}

static uint64_t slowest(const struct fake_comm *c)
{
	uint64_t min = UINT64_MAX;

	for (int i = 0; i < c->nranks; i++) {
		uint64_t n = __atomic_load_n(&c->counts[i], __ATOMIC_SEQ_CST);

		if (n < min)
			min = n;
	}
	return min;
}

/* A group's collectives are launched at its end: only there may a full
 * launch queue block. */
static __thread int depth;
static __thread struct fake_comm *grouped;

/* A full launch queue: the launch blocks until the slowest peer has
 * caught up enough for the oldest queued collective to complete. */
static void launch(struct fake_comm *c)
{
	uint64_t mine = __atomic_load_n(&c->counts[c->rank], __ATOMIC_SEQ_CST);

	while (mine > slowest(c) + QUEUE)
		usleep(200);
}

static int collective(struct fake_comm *c)
{
	__atomic_add_fetch(&c->counts[c->rank], 1, __ATOMIC_SEQ_CST);
	if (depth)
		grouped = c;
	else
		launch(c);
	return 0;
}

/* An operator the communicator did not make is NCCL's invalid argument:
 * one made before a teardown must be made again with its communicator. */
EXPORT int ncclAllReduce(const void *s, void *d, size_t n, int t, int op, struct fake_comm *c,
			 void *stream)
{
	if (op >= FIRST_OP &&
	    (OP_BIT(c, op) < 0 || OP_BIT(c, op) >= 32 || !(c->user_ops & (1u << OP_BIT(c, op)))))
		return 4;
	return collective(c);
}

EXPORT int ncclBroadcast(const void *s, void *d, size_t n, int t, int root, struct fake_comm *c,
			 void *stream)
{
	return collective(c);
}

EXPORT int ncclGroupStart(void)
{
	depth++;
	return 0;
}

EXPORT int ncclGroupEnd(void)
{
	if (depth > 0 && --depth == 0 && grouped) {
		launch(grouped);
		grouped = NULL;
	}
	return 0;
}

EXPORT int ncclCommUserRank(struct fake_comm *c, int *rank)
{
	*rank = c->rank;
	return 0;
}

EXPORT int ncclCommCount(struct fake_comm *c, int *count)
{
	*count = c->nranks;
	return 0;
}

EXPORT int ncclCommDestroy(struct fake_comm *c)
{
	if (c->p2p)
		p2p_file(-1);
	munmap(c->counts, (size_t)c->nranks * sizeof(uint64_t));
	free(c);
	return 0;
}
