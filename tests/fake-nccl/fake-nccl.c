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
 * "ID RANK NRANKS". */
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
	uint64_t *counts;
};

static const char *dir(void)
{
	const char *d = getenv("FAKE_NCCL_DIR");

	return d && *d ? d : "/tmp/fake-nccl";
}

EXPORT int ncclGetUniqueId(nccl_unique_id *id)
{
	memset(id, 0, sizeof(*id));
	snprintf(id->internal, sizeof(id->internal), "%08lx%08lx", (long)getpid(), (long)random());
	return 0;
}

EXPORT int ncclCommInitRank(struct fake_comm **comm, int nranks, nccl_unique_id id, int rank)
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
	snprintf(path, sizeof(path), "%s/rank-%d", dir(), (int)getpid());
	f = fopen(path, "w");
	if (f) {
		fprintf(f, "%.16s %d %d\n", id.internal, rank, nranks);
		fclose(f);
	}
	*comm = c;
	return 0;
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

EXPORT int ncclAllReduce(const void *s, void *d, size_t n, int t, int op, struct fake_comm *c,
			 void *stream)
{
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
	munmap(c->counts, (size_t)c->nranks * sizeof(uint64_t));
	free(c);
	return 0;
}
