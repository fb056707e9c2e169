/* SPDX-License-Identifier: MIT */
/* The NCCL hold against blocks made here as the interposer makes them,
 * and as a hostile job might: not sealed, the wrong size, another magic;
 * and the alignment of two ranks, one behind (a thread that acts as its
 * interposer) and one that never catches up; their communicators taken
 * apart (threads acting as the interposers' own), undone where a rank
 * cannot, and no unique id passed to another user's rank. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "nccl-hold.h"
#include "nccl-shim-wire.h"

/* A block in this process, as the interposer makes it unless told not to. */
static struct nccl_shim_block *make_block(int *fd, off_t size, bool seal, uint32_t magic)
{
	struct nccl_shim_block *b;

	*fd = memfd_create(NCCL_SHIM_MEMFD, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	assert_true(*fd >= 0);
	assert_int_equal(ftruncate(*fd, size), 0);
	b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	assert_true(b != MAP_FAILED);
	if (size >= (off_t)sizeof(*b)) {
		b->version = NCCL_SHIM_VERSION;
		b->magic = magic;
	}
	if (seal)
		assert_int_equal(fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
				 0);
	return b;
}

/* A job's file of tmpfs that reads as the interposer's memfd from the
 * host (its path is /memfd:stasis-nccl, deleted), held open with a read
 * lease: an open of it by root would wait for the lease to break
 * (fs.lease-break-time, 45 s). stasis must not open it, nor map it. */
static void leased_lookalike_passed_over(void **state)
{
	int ready[2], fd;
	char c;
	pid_t child;
	struct nccl_hold h;
	struct timespec t0, t1;

	(void)state;
	assert_int_equal(pipe(ready), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		int null = open("/dev/null", O_WRONLY);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(null, 1);
		dup2(null, 2);
		fd = open("/memfd:" NCCL_SHIM_MEMFD, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0 || ftruncate(fd, sizeof(struct nccl_shim_block)) < 0)
			_exit(1);
		close(fd);
		/* A lease wants a read-only descriptor of the file's owner. */
		fd = open("/memfd:" NCCL_SHIM_MEMFD, O_RDONLY);
		if (fd < 0 || unlink("/memfd:" NCCL_SHIM_MEMFD) < 0 ||
		    fcntl(fd, F_SETLEASE, F_RDLCK) < 0)
			_exit(1);
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(ready[1]);
	assert_int_equal(read(ready[0], &c, 1), 1);
	close(ready[0]);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(nccl_hold_open(&h, &child, 1), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_int_equal(h.n, 0);
	assert_true(t1.tv_sec - t0.tv_sec < 2);
	nccl_hold_close(&h);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
}

static void drop_block(struct nccl_shim_block *b, int fd)
{
	munmap(b, sizeof(*b));
	close(fd);
}

static void hostile_blocks_ignored(void **state)
{
	pid_t self = getpid();
	struct nccl_hold h;
	int fd;
	struct nccl_shim_block *b;

	(void)state;
	/* Not sealed: the job could shrink it under stasis's mapping. */
	b = make_block(&fd, sizeof(*b), false, NCCL_SHIM_MAGIC);
	assert_int_equal(nccl_hold_open(&h, &self, 1), 0);
	assert_int_equal(h.n, 0);
	nccl_hold_close(&h);
	drop_block(b, fd);
	/* Sealed, another size. */
	b = make_block(&fd, 4096 * 4, true, NCCL_SHIM_MAGIC);
	assert_int_equal(nccl_hold_open(&h, &self, 1), 0);
	assert_int_equal(h.n, 0);
	nccl_hold_close(&h);
	drop_block(b, fd);
	/* Sealed, right size, another magic. */
	b = make_block(&fd, sizeof(*b), true, 0x12345678);
	assert_int_equal(nccl_hold_open(&h, &self, 1), 0);
	assert_int_equal(h.n, 0);
	nccl_hold_close(&h);
	drop_block(b, fd);
	/* The interposer's: found once, whoever else shares it. */
	b = make_block(&fd, sizeof(*b), true, NCCL_SHIM_MAGIC);
	{
		pid_t twice[2] = {self, self};

		assert_int_equal(nccl_hold_open(&h, twice, 2), 0);
		assert_int_equal(h.n, 1);
	}
	nccl_hold_close(&h);
	drop_block(b, fd);
}

/* A process holding only fd (another rank's block), until killed: ready
 * once the other block is closed in it, and gone with the test, without
 * the test's output (a runner waits for that pipe's end). */
static pid_t holder_as(int fd, int other, uid_t uid)
{
	int ready[2];
	pid_t child;
	char c;

	assert_int_equal(pipe(ready), 0);
	child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		int null = open("/dev/null", O_WRONLY);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(null, 1);
		dup2(null, 2);
		close(other);
		if (uid && setresuid(uid, uid, uid) != 0)
			_exit(1);
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(ready[1]);
	assert_int_equal(read(ready[0], &c, 1), 1);
	close(ready[0]);
	(void)fd;
	return child;
}

static void end_holder(pid_t child)
{
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
}

/* Two ranks of one communicator: a at 7, b at 4. */
static void two_ranks(struct nccl_shim_block *a, struct nccl_shim_block *b)
{
	a->ncomms = b->ncomms = 1;
	a->comms[0] = (struct nccl_shim_comm){.id = 42,
					      .issued = 7,
					      .rank = 0,
					      .nranks = 2,
					      .last_op = NCCL_OP_ALL_REDUCE,
					      .live = 1};
	b->comms[0] = (struct nccl_shim_comm){.id = 42,
					      .issued = 4,
					      .rank = 1,
					      .nranks = 2,
					      .last_op = NCCL_OP_ALL_REDUCE,
					      .live = 1};
}

/* Two ranks' blocks, one in this process and one in a holder process. */
struct two {
	struct nccl_shim_block *a, *b;
	int fa, fb;
	pid_t pids[2];
	struct nccl_hold h;
};

/* Opened by a hold once edit (if any) has set the blocks up; b's holder
 * runs as uid (0: as the test). */
static void two_open_as(struct two *t,
			void (*edit)(struct nccl_shim_block *, struct nccl_shim_block *), uid_t uid)
{
	t->a = make_block(&t->fa, sizeof(*t->a), true, NCCL_SHIM_MAGIC);
	t->b = make_block(&t->fb, sizeof(*t->b), true, NCCL_SHIM_MAGIC);
	two_ranks(t->a, t->b);
	if (edit)
		edit(t->a, t->b);
	t->pids[0] = getpid();
	t->pids[1] = holder_as(t->fb, t->fa, uid);
	assert_int_equal(nccl_hold_open(&t->h, t->pids, 2), 0);
	assert_int_equal(t->h.n, 2);
}

static void two_open(struct two *t,
		     void (*edit)(struct nccl_shim_block *, struct nccl_shim_block *))
{
	two_open_as(t, edit, 0);
}

static void two_close(struct two *t)
{
	nccl_hold_close(&t->h);
	end_holder(t->pids[1]);
	drop_block(t->a, t->fa);
	drop_block(t->b, t->fb);
}

/* As the interposer of a rank behind: starts collectives up to its target. */
static void *catch_up(void *arg)
{
	struct nccl_shim_block *b = arg;

	for (int i = 0; i < 4000; i++) {
		struct nccl_shim_comm *c = &b->comms[0];

		if (__atomic_load_n(&b->request, __ATOMIC_SEQ_CST) == NCCL_SHIM_HOLD &&
		    __atomic_load_n(&c->issued, __ATOMIC_SEQ_CST) <
			__atomic_load_n(&c->target, __ATOMIC_SEQ_CST))
			__atomic_add_fetch(&c->issued, 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&c->issued, __ATOMIC_SEQ_CST) == 7)
			break;
		usleep(500);
	}
	return NULL;
}

static void behind_rank_catches_up(void **state)
{
	struct stasis_error *err = NULL;
	struct two t;
	pthread_t thread;

	(void)state;
	two_open(&t, NULL);
	pthread_create(&thread, NULL, catch_up, t.b);
	assert_int_equal(nccl_hold_align(&t.h, &err), 0);
	pthread_join(thread, NULL);
	assert_int_equal(t.b->comms[0].issued, 7);
	assert_int_equal(t.a->request, NCCL_SHIM_HOLD);
	assert_int_equal(t.a->comms[0].target, 7);
	nccl_hold_release(&t.h);
	assert_int_equal(t.a->request, NCCL_SHIM_RUN);
	assert_int_equal(t.b->request, NCCL_SHIM_RUN);
	two_close(&t);
}

static void last_op_broadcast(struct nccl_shim_block *a, struct nccl_shim_block *b)
{
	(void)b;
	a->comms[0].last_op = NCCL_OP_BROADCAST;
}

static void stalled_rank_refused(void **state)
{
	struct stasis_error *err = NULL;
	struct two t;

	(void)state;
	two_open(&t, last_op_broadcast);
	t.h.stall_ms = 200;
	assert_int_equal(nccl_hold_align(&t.h, &err), -EBUSY);
	assert_non_null(err);
	assert_non_null(strstr(err->message, "(rank 0 of an NCCL communicator of 2) waits in its "
					     "collective 7 (ncclBroadcast)"));
	assert_non_null(strstr(err->message, "(rank 1) has not started within 200 ms"));
	/* Let go: the job runs on. */
	assert_int_equal(t.a->request, NCCL_SHIM_RUN);
	assert_int_equal(t.b->request, NCCL_SHIM_RUN);
	stasis_error_free(err);
	two_close(&t);
}

/* Rank b at the same count, inside a group. */
static void b_in_group(struct nccl_shim_block *a, struct nccl_shim_block *b)
{
	(void)a;
	b->comms[0].issued = 7;
	b->in_group = 1;
}

/* A rank inside a group counts its collectives as they come: while it is
 * there, equal counts are not final, and a group that never ends is a
 * stall (refused, every rank let go). */
static void open_group_not_final(void **state)
{
	struct stasis_error *err = NULL;
	struct two t;

	(void)state;
	two_open(&t, b_in_group);
	t.h.stall_ms = 200;
	assert_int_equal(nccl_hold_align(&t.h, &err), -EBUSY);
	assert_int_equal(t.a->request, NCCL_SHIM_RUN);
	stasis_error_free(err);
	err = NULL;
	t.b->in_group = 0;
	assert_int_equal(nccl_hold_align(&t.h, &err), 0);
	nccl_hold_release(&t.h);
	two_close(&t);
}

/* ---- communicators taken apart ---- */

/* Both ranks at 7, able to take their communicator apart: a made it from
 * a unique id as rank 0 (it posts the next id), b takes one. */
static void rebuildable(struct nccl_shim_block *a, struct nccl_shim_block *b)
{
	b->comms[0].issued = 7;
	a->caps = b->caps = NCCL_SHIM_CAP_REBUILD;
	a->comms[0].uid_role = NCCL_UID_POSTS;
	b->comms[0].uid_role = NCCL_UID_TAKES;
}

/* As the interposers' threads: each rank in ranks quiets when asked (rank
 * 0 posting its next id), and destroys when asked again; every rank opens
 * again once let go. */
struct services {
	struct nccl_shim_block *ranks[2];
	size_t n;
	volatile bool stop;
};

static void *serve(void *arg)
{
	struct services *s = arg;

	while (!s->stop) {
		for (size_t i = 0; i < s->n; i++) {
			struct nccl_shim_block *b = s->ranks[i];
			uint32_t next = __atomic_load_n(&b->gen, __ATOMIC_SEQ_CST) + 1;
			uint32_t phase = __atomic_load_n(&b->phase, __ATOMIC_SEQ_CST);
			bool held =
			    __atomic_load_n(&b->request, __ATOMIC_SEQ_CST) == NCCL_SHIM_HOLD;

			if (phase == NCCL_PHASE_UP && held && b->teardown == next) {
				if (b->comms[0].uid_role == NCCL_UID_POSTS) {
					memset(b->comms[0].next_uid, 'u',
					       sizeof(b->comms[0].next_uid));
					b->comms[0].uid_gen = next;
				}
				__atomic_store_n(&b->phase, NCCL_PHASE_QUIET, __ATOMIC_SEQ_CST);
			} else if (phase == NCCL_PHASE_QUIET && held && b->destroy == next) {
				__atomic_store_n(&b->gen, next, __ATOMIC_SEQ_CST);
				__atomic_store_n(&b->phase, NCCL_PHASE_DOWN, __ATOMIC_SEQ_CST);
			} else if (phase != NCCL_PHASE_UP && !held)
				__atomic_store_n(&b->phase, NCCL_PHASE_UP, __ATOMIC_SEQ_CST);
		}
		usleep(200);
	}
	return NULL;
}

/* Every rank quiet, then destroyed: rank 0's next id copied to its peer,
 * marked for the peer's teardown; let go, they are asked for nothing. */
static void teardown_copies_next_id(void **state)
{
	struct stasis_error *err = NULL;
	/* Static: a failed assertion leaves the thread, never a dead stack. */
	static struct services s;
	struct two t;
	pthread_t thread;

	(void)state;
	two_open(&t, rebuildable);
	s = (struct services){.ranks = {t.a, t.b}, .n = 2};
	pthread_create(&thread, NULL, serve, &s);
	assert_int_equal(nccl_hold_align(&t.h, &err), 0);
	if (nccl_hold_teardown(&t.h, true, &err) != 0)
		fail_msg("%s", err->message);
	assert_true(t.h.torn_down);
	assert_int_equal(t.b->comms[0].uid_gen, 1);
	assert_memory_equal(t.b->comms[0].next_uid, t.a->comms[0].next_uid,
			    sizeof(t.a->comms[0].next_uid));
	nccl_hold_release(&t.h);
	assert_int_equal(t.a->teardown, 0);
	assert_int_equal(t.b->destroy, 0);
	s.stop = true;
	pthread_join(thread, NULL);
	two_close(&t);
}

/* One rank never gets quiet (a thread of its own stays inside NCCL): the
 * teardown is refused before any rank destroys anything, and undone. */
static void teardown_undone_when_a_rank_stays(void **state)
{
	struct stasis_error *err = NULL;
	static struct services s;
	struct two t;
	pthread_t thread;

	(void)state;
	two_open(&t, rebuildable);
	s = (struct services){.ranks = {t.a}, .n = 1};
	t.h.quiet_ms = 200;
	pthread_create(&thread, NULL, serve, &s);
	assert_int_equal(nccl_hold_align(&t.h, &err), 0);
	assert_int_equal(nccl_hold_teardown(&t.h, true, &err), -EIO);
	assert_non_null(strstr(err->message, "still had a thread inside NCCL after 200 ms"));
	assert_non_null(strstr(err->hint, "nothing was changed"));
	assert_int_equal(t.a->destroy, 0);
	assert_int_equal(t.a->gen, 0);
	assert_int_equal(t.a->request, NCCL_SHIM_RUN);
	usleep(20000);
	assert_int_equal(t.a->phase, NCCL_PHASE_UP);
	stasis_error_free(err);
	s.stop = true;
	pthread_join(thread, NULL);
	two_close(&t);
}

/* The peer that would take rank 0's next id runs as another user: an id is
 * where a rank connects, so none passes; refused before anything changes
 * where the fast transports are on, left alone where they are off. */
static void next_id_not_passed_to_another_user(void **state)
{
	struct stasis_error *err = NULL;
	struct two t;

	(void)state;
	two_open_as(&t, rebuildable, 65534);
	assert_int_equal(nccl_hold_align(&t.h, &err), 0);
	assert_int_equal(nccl_hold_teardown(&t.h, false, &err), 0);
	assert_false(t.h.torn_down);
	assert_int_equal(t.b->teardown, 0);
	assert_int_equal(nccl_hold_teardown(&t.h, true, &err), -ENOTSUP);
	assert_non_null(strstr(err->message, "not all in the job"));
	assert_int_equal(t.a->teardown, 0);
	assert_int_equal(t.a->request, NCCL_SHIM_RUN);
	stasis_error_free(err);
	two_close(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(hostile_blocks_ignored),
	    cmocka_unit_test(leased_lookalike_passed_over),
	    cmocka_unit_test(open_group_not_final),
	    cmocka_unit_test(behind_rank_catches_up),
	    cmocka_unit_test(stalled_rank_refused),
	    cmocka_unit_test(teardown_copies_next_id),
	    cmocka_unit_test(teardown_undone_when_a_rank_stays),
	    cmocka_unit_test(next_id_not_passed_to_another_user),
	};

	return cmocka_run_group_tests_name("nccl-hold", tests, NULL, NULL);
}
