/* SPDX-License-Identifier: MIT */
/* The job of fake-nccl-rank (a library, as a Python extension's are:
 * loaded local to it, it reaches NCCL as PyTorch's libtorch_cuda does).
 * NCCL ranks for the fake driver and the fake NCCL: a parent and NRANKS
 * children, each a "CUDA" process (it issues work only while the fake
 * driver says it runs) with a thread named as PyTorch's NCCL watchdog, and
 * one communicator between the children.
 *   fake-nccl-rank DIR NRANKS [train|group|idle0]
 * train (a DDP job that never pauses): every rank starts collectives
 *   back to back; rank 0 waits 2 ms after each (its loss.item()), the
 *   others run ahead as far as their launch queue lets them.
 * group: the same, each step two all-reduces in one group (as PyTorch
 *   coalesces them), launched at the group's end.
 * idle0 (a server whose idle rank waits in a broadcast): rank 0 starts 5
 *   broadcasts and then waits for a request outside NCCL; the others
 *   start 6, the last one waiting for rank 0.
 * registered: train, with a buffer registered with the communicator
 *   (which keeps stasis's interposer from taking it apart).
 * split: train, each step an all-reduce on the communicator and one on a
 *   child split from it (and a split without a child, NOCOLOR, before).
 * premul: train, each all-reduce with a reduction operator made for it
 *   just before (ncclRedOpCreatePreMulSum) and destroyed after, as FSDP
 *   does.
 * DIR/count-PID: each rank's collectives (ticks, once idle), rewritten
 * as they go; DIR/ranks: the ranks' PIDs. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../fake-cuda/fake-state.h"

typedef struct {
	char internal[128];
} nccl_unique_id;
struct fake_comm;
int ncclGetUniqueId(nccl_unique_id *id);
int ncclCommInitRank(struct fake_comm **comm, int nranks, nccl_unique_id id, int rank);
int ncclAllReduce(const void *s, void *d, size_t n, int t, int op, struct fake_comm *c, void *st);
int ncclGroupStart(void);
int ncclGroupEnd(void);
int ncclBroadcast(const void *s, void *d, size_t n, int t, int root, struct fake_comm *c, void *st);
int ncclCommRegister(struct fake_comm *c, void *buf, size_t size, void **handle);
int ncclCommSplit(struct fake_comm *c, int color, int key, struct fake_comm **child, void *config);
int ncclRedOpCreatePreMulSum(int *op, void *scalar, int datatype, int residence,
			     struct fake_comm *c);
int ncclRedOpDestroy(int op, struct fake_comm *c);

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static void *watchdog(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "pt_nccl_watchdg");
	while (!stop)
		usleep(10000);
	return NULL;
}

static void write_count(const char *dir, unsigned long n)
{
	char path[4096], tmp[4200];
	FILE *f;

	snprintf(path, sizeof(path), "%s/count-%d", dir, (int)getpid());
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "%lu\n", n);
	fclose(f);
	rename(tmp, path);
}

/* Blocks while the fake driver holds this process (locked, checkpointed). */
static void wait_running(void)
{
	while (!stop && fake_state_read(getpid()) != 0)
		usleep(500);
}

/* One step's collectives of train, split and premul: 0 where they went. */
static int train_step(struct fake_comm *comm, struct fake_comm *child, const char *mode)
{
	if (strcmp(mode, "premul") == 0) {
		float scale = 0.5f;
		int op;

		if (ncclRedOpCreatePreMulSum(&op, &scale, 7, 1, comm) != 0 ||
		    ncclAllReduce(NULL, NULL, 1, 0, op, comm, NULL) != 0)
			return -1;
		return ncclRedOpDestroy(op, comm) ? -1 : 0;
	}
	if (ncclAllReduce(NULL, NULL, 1, 0, 0, comm, NULL) != 0)
		return -1;
	return child && ncclAllReduce(NULL, NULL, 1, 0, 0, child, NULL) != 0 ? -1 : 0;
}

static void rank_main(const char *dir, int rank, int nranks, nccl_unique_id id, const char *mode)
{
	struct fake_comm *comm, *child = NULL, *none = NULL;
	unsigned long n = 0;
	pthread_t t;

	fake_state_write(getpid(), 0);
	pthread_create(&t, NULL, watchdog, NULL);
	if (ncclCommInitRank(&comm, nranks, id, rank) != 0)
		_exit(3);
	if (strcmp(mode, "split") == 0 &&
	    (ncclCommSplit(comm, -1, rank, &none, NULL) != 0 ||
	     ncclCommSplit(comm, 0, rank, &child, NULL) != 0 || none || !child))
		_exit(3);
	if (strcmp(mode, "registered") == 0) {
		static char buf[4096];
		void *handle;

		if (ncclCommRegister(comm, buf, sizeof(buf), &handle) != 0)
			_exit(3);
	}
	if (strcmp(mode, "idle0") == 0) {
		for (int i = 0; i < (rank == 0 ? 5 : 6); i++) {
			wait_running();
			ncclBroadcast(NULL, NULL, 1, 0, 0, comm, NULL);
			write_count(dir, ++n);
		}
		while (!stop) {
			usleep(10000);
			write_count(dir, ++n);
		}
		_exit(0);
	}
	while (!stop) {
		wait_running();
		if (stop)
			break;
		if (strcmp(mode, "group") == 0) {
			ncclGroupStart();
			ncclAllReduce(NULL, NULL, 1, 0, 0, comm, NULL);
			ncclAllReduce(NULL, NULL, 1, 0, 0, comm, NULL);
			ncclGroupEnd();
			n += 2;
		} else if (train_step(comm, child, mode) != 0) {
			/* A communicator that could not be made again. */
			write_count(dir, 0);
			_exit(4);
		} else {
			n++;
		}
		write_count(dir, n);
		if (rank == 0)
			usleep(2000);
	}
	_exit(0);
}

__attribute__((visibility("default"))) int fake_nccl_job(int argc, char **argv)
{
	const char *dir, *mode;
	nccl_unique_id id;
	int nranks;
	pid_t kids[16];
	FILE *f;

	if (argc < 3) {
		fprintf(stderr, "usage: fake-nccl-rank DIR NRANKS [train|idle0]\n");
		return 2;
	}
	dir = argv[1];
	nranks = atoi(argv[2]);
	mode = argc > 3 ? argv[3] : "train";
	if (nranks < 1 || nranks > 16)
		return 2;
	signal(SIGTERM, on_term);
	srandom((unsigned)getpid());
	ncclGetUniqueId(&id);
	for (int r = 0; r < nranks; r++) {
		kids[r] = fork();
		if (kids[r] == 0)
			rank_main(dir, r, nranks, id, mode);
	}
	{
		char path[4096];

		snprintf(path, sizeof(path), "%s/ranks", dir);
		f = fopen(path, "w");
		for (int r = 0; f && r < nranks; r++)
			fprintf(f, "%d\n", (int)kids[r]);
		if (f)
			fclose(f);
	}
	while (!stop)
		pause();
	for (int r = 0; r < nranks; r++)
		kill(kids[r], SIGTERM);
	while (wait(NULL) > 0)
		;
	return 0;
}
