/* SPDX-License-Identifier: MIT */
/* The blocks are the job's memory: every value read from one is a claim
 * (counts are compared, never used as sizes or indexes beyond the block),
 * each wait has a deadline, and a block is mapped only once it is sealed
 * at its size, so that a job cannot make stasis fault by shrinking it. */
#include "nccl-hold.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fault.h"
#include "nccl-shim-wire.h"
#include "util.h"

#define HOLD_STALL_MS 2000u
#define HOLD_LIMIT_MS 10000u
#define HOLD_POLL_US 1000
/* NCCL's teardown of a rank's communicators: measured in milliseconds;
 * a rank that takes longer has a thread stuck in NCCL. */
#define TEARDOWN_LIMIT_MS 30000u
/* Its first half: the job's threads out of NCCL, with every rank held. */
#define QUIET_LIMIT_MS 10000u

struct nccl_hold_rank {
	pid_t pid;
	struct nccl_shim_block *b;
	uint32_t teardown; /* the teardown asked of it (its gen + 1) */
	uid_t uid;	   /* its owner: ids pass only between one user's ranks */
	dev_t dev;
	ino_t ino;
};

static const char *const op_names[NCCL_OP_COUNT] = {
    "no collective yet", "ncclAllReduce",     "ncclBroadcast", "ncclReduce",
    "ncclAllGather",	 "ncclReduceScatter", "ncclAlltoAll",  "ncclGather",
    "ncclScatter",	 "ncclSend",	      "ncclRecv"};

static const char *op_name(uint32_t op)
{
	return op < NCCL_OP_COUNT ? op_names[op] : "a collective";
}

/* fd is the interposer's block: a memfd (only memfd_create's files take
 * new seals: a tmpfs file of the same name cannot) of the right size that
 * nobody can resize any more. */
static struct nccl_shim_block *map_block(int fd, struct stat *st)
{
	int seals = fcntl(fd, F_GET_SEALS);
	struct nccl_shim_block *b;

	/* Seals first: only shmem files have any, and asking asks no one
	 * else (a stat of a FUSE file would ask its server). */
	if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW) ||
	    fstat(fd, st) < 0 || !S_ISREG(st->st_mode) ||
	    st->st_size != (off_t)sizeof(struct nccl_shim_block))
		return NULL;
	b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (b == MAP_FAILED)
		return NULL;
	if (__atomic_load_n(&b->magic, __ATOMIC_ACQUIRE) != NCCL_SHIM_MAGIC ||
	    __atomic_load_n(&b->version, __ATOMIC_RELAXED) != NCCL_SHIM_VERSION) {
		munmap(b, sizeof(*b));
		return NULL;
	}
	return b;
}

/* Whether a link read (len bytes, not terminated) names the block. */
static bool is_block_link(const char *link, ssize_t len)
{
	return len == (ssize_t)sizeof(NCCL_SHIM_FD_LINK) - 1 &&
	       memcmp(link, NCCL_SHIM_FD_LINK, sizeof(NCCL_SHIM_FD_LINK) - 1) == 0;
}

/* The mount a descriptor's file is on (fdinfo's mnt_id), -1 unknown. */
static int fd_mount(const char *fdinfo)
{
	_cleanup_free_ char *text = read_file_str(fdinfo, NULL);
	const char *line = text ? strstr(text, "mnt_id:") : NULL;
	int id = -1;

	if (line && sscanf(line + 7, "%d", &id) != 1)
		id = -1;
	return id;
}

/* Whether pid's descriptor name is a file of the kernel's memfd mount, as
 * a memfd of stasis's own is: a file elsewhere (a FUSE file named like
 * the block, in a mount namespace of the job's) is never taken, since
 * looking at it or closing it could wait on its server for ever. */
static bool on_memfd_mount(pid_t pid, const char *name)
{
	static int memfd_mount = -2;
	char path[96];

	if (memfd_mount == -2) {
		int fd = memfd_create("stasis-probe", MFD_CLOEXEC);

		snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
		memfd_mount = fd >= 0 ? fd_mount(path) : -1;
		if (fd >= 0)
			close(fd);
	}
	snprintf(path, sizeof(path), "/proc/%d/fdinfo/%s", (int)pid, name);
	return memfd_mount >= 0 && fd_mount(path) == memfd_mount;
}

/* One of pid's descriptors, duplicated into stasis through its pidfd: never
 * opened again by its path, which would let the job swap what the path
 * names between the check and the open (any file of root's, a device whose
 * open has effects) or hold the open on a lease. What comes back is checked
 * as the descriptor stasis now holds. */
static int take_fd(int pidfd, const char *name)
{
	char self[64], link[sizeof(NCCL_SHIM_FD_LINK) + 1];
	char *end;
	long n;
	ssize_t len;
	int fd;

	errno = 0;
	n = strtol(name, &end, 10);
	if (errno || *end || n < 0 || n > INT_MAX)
		return -1;
	fd = (int)syscall(SYS_pidfd_getfd, pidfd, (int)n, 0);
	if (fd < 0)
		return -1;
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	len = readlink(self, link, sizeof(link));
	if (!is_block_link(link, len) || (fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDWR) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The user pid runs as (its real uid, from its status), read while its
 * pidfd holds it: -1 where unknown, or where the PID is no longer it. A
 * /proc folder's owner would not do: it is root for any process that is
 * not dumpable. */
static uid_t owner_of(pid_t pid, int pidfd)
{
	char path[64];
	_cleanup_free_ char *status = NULL;
	const char *line;
	unsigned long uid;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	status = read_file_str(path, NULL);
	line = status ? strstr(status, "\nUid:") : NULL;
	if (!line || sscanf(line + 5, "%lu", &uid) != 1 ||
	    syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) < 0)
		return (uid_t)-1;
	return (uid_t)uid;
}

/* The block behind pid's descriptor named as the interposer names it (the
 * link read first only to pass over the others cheaply), and its owner. */
static struct nccl_shim_block *find_block(pid_t pid, struct stat *st, uid_t *owner)
{
	struct nccl_shim_block *b = NULL;
	char dir[64], link[sizeof(NCCL_SHIM_FD_LINK) + 1];
	struct dirent *de;
	int pidfd;
	DIR *d;

	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0)
		return NULL;
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	d = opendir(dir);
	if (!d) {
		close(pidfd);
		return NULL;
	}
	while (!b && (de = readdir(d))) {
		ssize_t len = readlinkat(dirfd(d), de->d_name, link, sizeof(link));
		int fd;

		if (!is_block_link(link, len) || !on_memfd_mount(pid, de->d_name))
			continue;
		fd = take_fd(pidfd, de->d_name);
		if (fd < 0)
			continue;
		b = map_block(fd, st);
		close(fd);
	}
	closedir(d);
	if (b && owner)
		*owner = owner_of(pid, pidfd);
	close(pidfd);
	return b;
}

int nccl_hold_open(struct nccl_hold *h, const pid_t *pids, size_t n)
{
	memset(h, 0, sizeof(*h));
	h->stall_ms = HOLD_STALL_MS;
	h->limit_ms = HOLD_LIMIT_MS;
	h->quiet_ms = QUIET_LIMIT_MS;
	for (size_t i = 0; i < n; i++) {
		struct nccl_hold_rank *grown;
		struct nccl_shim_block *b;
		struct stat st;
		bool seen = false;

		uid_t owner = (uid_t)-1;

		b = find_block(pids[i], &st, &owner);
		if (!b)
			continue;
		for (size_t j = 0; j < h->n && !seen; j++)
			seen = h->ranks[j].dev == st.st_dev && h->ranks[j].ino == st.st_ino;
		grown = seen ? NULL : realloc(h->ranks, (h->n + 1) * sizeof(*grown));
		if (!grown) {
			munmap(b, sizeof(*b));
			if (seen)
				continue;
			return -ENOMEM;
		}
		h->ranks = grown;
		h->ranks[h->n++] =
		    (struct nccl_hold_rank){pids[i], b, 0, owner, st.st_dev, st.st_ino};
	}
	return 0;
}

static uint32_t comm_count(const struct nccl_shim_block *b)
{
	uint32_t n = __atomic_load_n(&b->ncomms, __ATOMIC_SEQ_CST);

	return n < NCCL_SHIM_COMMS ? n : NCCL_SHIM_COMMS;
}

/* One live communicator of one rank, as read now. */
struct comm_view {
	size_t rank; /* index in the hold */
	uint32_t slot;
	uint64_t id, issued;
};

/* Whether some thread of some rank is between its check and its count,
 * or inside a group, whose collectives are counted as they come. */
static bool checking(const struct nccl_hold *h)
{
	for (size_t i = 0; i < h->n; i++)
		if (__atomic_load_n(&h->ranks[i].b->in_check, __ATOMIC_SEQ_CST) ||
		    __atomic_load_n(&h->ranks[i].b->in_group, __ATOMIC_SEQ_CST))
			return true;
	return false;
}

bool nccl_hold_complete(const struct nccl_hold *h)
{
	for (size_t i = 0; i < h->n; i++)
		if (__atomic_load_n(&h->ranks[i].b->untracked, __ATOMIC_SEQ_CST))
			return false;
	return true;
}

static size_t read_comms(const struct nccl_hold *h, struct comm_view *v, size_t max)
{
	size_t n = 0;

	for (size_t i = 0; i < h->n; i++) {
		struct nccl_shim_block *b = h->ranks[i].b;

		for (uint32_t s = 0; s < comm_count(b) && n < max; s++) {
			struct nccl_shim_comm *c = &b->comms[s];

			if (!__atomic_load_n(&c->live, __ATOMIC_SEQ_CST))
				continue;
			v[n++] = (struct comm_view){i, s, __atomic_load_n(&c->id, __ATOMIC_SEQ_CST),
						    __atomic_load_n(&c->issued, __ATOMIC_SEQ_CST)};
		}
	}
	return n;
}

static uint64_t highest(const struct comm_view *v, size_t n, uint64_t id)
{
	uint64_t max = 0;

	for (size_t i = 0; i < n; i++)
		if (v[i].id == id && v[i].issued > max)
			max = v[i].issued;
	return max;
}

/* Each communicator's target: the most any of its ranks has started.
 * Returns whether every rank is there. */
static bool set_targets(const struct nccl_hold *h, const struct comm_view *v, size_t n)
{
	bool there = true;

	for (size_t i = 0; i < n; i++) {
		uint64_t max = highest(v, n, v[i].id);

		__atomic_store_n(&h->ranks[v[i].rank].b->comms[v[i].slot].target, max,
				 __ATOMIC_SEQ_CST);
		there = there && v[i].issued == max;
	}
	return there;
}

/* This process's start time (field 22 of its stat), 0 when unknown. */
static uint64_t own_start_time(void)
{
	char line[1024];
	FILE *f = fopen("/proc/self/stat", "re");
	bool read = f && fgets(line, sizeof(line), f);

	if (f)
		fclose(f);
	return read ? nccl_shim_stat_start(line) : 0;
}

/* Whether pid sees stasis under stasis's own PID: it shares stasis's PID
 * namespace. Elsewhere it is not told who holds it (it would find no such
 * process and let itself go at once). */
static bool same_pid_ns(pid_t pid)
{
	char path[64];
	struct stat mine, its;

	snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)pid);
	return stat("/proc/self/ns/pid", &mine) == 0 && stat(path, &its) == 0 &&
	       mine.st_dev == its.st_dev && mine.st_ino == its.st_ino;
}

/* The interposer's thread waits on `teardown` (a futex of the shared
 * memfd: the same word in both processes). */
static void wake_service(struct nccl_shim_block *b)
{
	syscall(SYS_futex, &b->teardown, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void set_request(const struct nccl_hold *h, uint32_t request)
{
	uint64_t since = request == NCCL_SHIM_HOLD && !h->outlives_holder ? own_start_time() : 0;

	for (size_t i = 0; i < h->n; i++) {
		struct nccl_shim_block *b = h->ranks[i].b;
		bool told = since && same_pid_ns(h->ranks[i].pid);

		/* Who holds it, before the hold; no one, after. */
		if (request == NCCL_SHIM_HOLD) {
			__atomic_store_n(&b->holder_start, told ? since : 0, __ATOMIC_SEQ_CST);
			__atomic_store_n(&b->holder_pid, told ? (uint32_t)getpid() : 0,
					 __ATOMIC_SEQ_CST);
		}
		/* Let go: the communicators taken apart are made again. Held:
		 * no teardown is asked yet (a stasis killed in the middle of
		 * one may have left its number), only once the ranks align. */
		__atomic_store_n(&b->destroy, 0, __ATOMIC_SEQ_CST);
		__atomic_store_n(&b->teardown, 0, __ATOMIC_SEQ_CST);
		__atomic_store_n(&b->request, request, __ATOMIC_SEQ_CST);
		if (request != NCCL_SHIM_HOLD)
			__atomic_store_n(&b->holder_pid, 0, __ATOMIC_SEQ_CST);
		wake_service(b);
	}
}

/* Which rank is behind and which waits for it, for the refusal. */
static int refuse_stalled(const struct nccl_hold *h, const struct comm_view *v, size_t n,
			  struct stasis_error **err)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t max = highest(v, n, v[i].id);
		const struct nccl_shim_comm *lag = &h->ranks[v[i].rank].b->comms[v[i].slot];

		if (v[i].issued == max)
			continue;
		for (size_t j = 0; j < n; j++) {
			const struct nccl_shim_comm *ahead;

			if (v[j].id != v[i].id || v[j].issued != max)
				continue;
			ahead = &h->ranks[v[j].rank].b->comms[v[j].slot];
			stasis_error_set(
			    err, EBUSY, STASIS_DOMAIN_CUDA, 0,
			    "PID %d (rank %u of an NCCL communicator of %u) waits in its "
			    "collective "
			    "%" PRIu64 " (%s), which PID %d (rank %u) has not started within %u ms",
			    (int)h->ranks[v[j].rank].pid,
			    __atomic_load_n(&ahead->rank, __ATOMIC_RELAXED),
			    __atomic_load_n(&ahead->nranks, __ATOMIC_RELAXED), max,
			    op_name(__atomic_load_n(&ahead->last_op, __ATOMIC_RELAXED)),
			    (int)h->ranks[v[i].rank].pid,
			    __atomic_load_n(&lag->rank, __ATOMIC_RELAXED), h->stall_ms);
			return stasis_error_hint(
			    err,
			    "nothing was changed and the job runs on; a rank that waits outside "
			    "NCCL while its peer waits in a collective (a server's idle rank) "
			    "cannot be brought to a boundary: checkpoint it while its ranks "
			    "are between collectives, or have idle ranks wait on a CPU group");
		}
	}
	stasis_error_set(err, EBUSY, STASIS_DOMAIN_CUDA, 0,
			 "the NCCL ranks did not meet at one collective within %u ms", h->limit_ms);
	return stasis_error_hint(err, "nothing was changed and the job runs on");
}

int nccl_hold_align(struct nccl_hold *h, struct stasis_error **err)
{
	size_t max = h->n * NCCL_SHIM_COMMS, n = 0;
	struct comm_view *v;
	uint64_t start = now_usec(), moved = start, sum = UINT64_MAX;
	unsigned int steady = 0;

	if (!h->n)
		return 0;
	v = calloc(max, sizeof(*v));
	if (!v)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	/* No rank may go past a count before stasis has read them all. */
	for (size_t i = 0; i < h->n; i++)
		for (uint32_t s = 0; s < NCCL_SHIM_COMMS; s++)
			__atomic_store_n(&h->ranks[i].b->comms[s].target, 0, __ATOMIC_SEQ_CST);
	set_request(h, NCCL_SHIM_HOLD);
	h->held = true;
	for (;;) {
		uint64_t now = now_usec(), total = 0;
		bool there;

		if (now - moved > (uint64_t)h->stall_ms * 1000 ||
		    now - start > (uint64_t)h->limit_ms * 1000)
			break;
		if (checking(h)) {
			usleep(100);
			continue;
		}
		n = read_comms(h, v, max);
		there = set_targets(h, v, n);
		for (size_t i = 0; i < n; i++)
			total += v[i].issued;
		if (total != sum) {
			sum = total;
			moved = now;
			steady = 0;
		}
		/* Twice the same counts, all at their targets: no thread was
		 * between its check and its count in between. */
		if (there && ++steady >= 2) {
			free(v);
			return 0;
		}
		usleep(HOLD_POLL_US);
	}
	refuse_stalled(h, v, n, err);
	free(v);
	nccl_hold_release(h);
	return -EBUSY;
}

void nccl_hold_release(struct nccl_hold *h)
{
	if (!h->held)
		return;
	set_request(h, NCCL_SHIM_RUN);
	h->held = false;
	h->torn_down = false;
}

/* ---- communicators taken apart ---- */

static const struct {
	uint32_t bit;
	const char *why;
} unsafe_names[] = {
    {NCCL_UNSAFE_VERSION, "an NCCL version stasis's interposer does not know"},
    {NCCL_UNSAFE_SLOTS, "more communicators than the interposer keeps"},
    {NCCL_UNSAFE_REGISTERED, "buffers registered with a communicator (ncclCommRegister)"},
    {NCCL_UNSAFE_WINDOW, "a symmetric memory window (ncclCommWindowRegister)"},
    {NCCL_UNSAFE_DEVICE, "NCCL's device API (ncclDevCommCreate)"},
    {NCCL_UNSAFE_MADE, "a communicator made by ncclCommInitAll, Shrink or Grow, or split from "
		       "one the job destroyed"},
    {NCCL_UNSAFE_LOG, "more communicators made than the interposer keeps"},
    {NCCL_UNSAFE_OPS, "more live reduction operators than the interposer keeps"},
    {NCCL_UNSAFE_CONFIG, "a communicator configuration larger than the interposer keeps"},
    {NCCL_UNSAFE_GRAPH, "a collective captured in a CUDA graph, which would outlive its "
			"communicator"},
};

const char *nccl_unsafe_reason(uint32_t unsafe)
{
	for (size_t i = 0; i < sizeof(unsafe_names) / sizeof(unsafe_names[0]); i++)
		if (unsafe & unsafe_names[i].bit)
			return unsafe_names[i].why;
	return unsafe ? "a reason this stasis does not know" : NULL;
}

int nccl_rank_caps(pid_t pid, struct nccl_rank_caps *caps)
{
	struct stat st;
	struct nccl_shim_block *b = find_block(pid, &st, NULL);

	memset(caps, 0, sizeof(*caps));
	if (!b)
		return 0;
	caps->block = true;
	caps->rebuild = __atomic_load_n(&b->caps, __ATOMIC_SEQ_CST) & NCCL_SHIM_CAP_REBUILD;
	caps->unsafe = __atomic_load_n(&b->unsafe, __ATOMIC_SEQ_CST);
	caps->nccl_version = __atomic_load_n(&b->nccl_version, __ATOMIC_SEQ_CST);
	munmap(b, sizeof(*b));
	return 1;
}

/* The rank 0 that posts the next id of the communicator id, among the
 * ranks of uid's (-1: none is in the job). An id is where a rank connects
 * to make its communicator: one user's rank never gets another's. */
static int find_poster(const struct nccl_hold *h, uint64_t id, uid_t uid, uint32_t *slot)
{
	for (size_t i = 0; i < h->n; i++) {
		struct nccl_shim_block *b = h->ranks[i].b;

		if (h->ranks[i].uid != uid || uid == (uid_t)-1)
			continue;
		for (uint32_t s = 0; s < comm_count(b); s++) {
			struct nccl_shim_comm *c = &b->comms[s];

			if (__atomic_load_n(&c->live, __ATOMIC_SEQ_CST) &&
			    __atomic_load_n(&c->id, __ATOMIC_SEQ_CST) == id &&
			    __atomic_load_n(&c->uid_role, __ATOMIC_SEQ_CST) == NCCL_UID_POSTS) {
				*slot = s;
				return (int)i;
			}
		}
	}
	return -1;
}

/* How many ranks of the communicator id, among uid's processes, are
 * held: every one must be, or the ones here would make it again without
 * their peers. */
static uint32_t ranks_here(const struct nccl_hold *h, uint64_t id, uid_t uid)
{
	uint32_t n = 0;

	for (size_t i = 0; i < h->n; i++) {
		struct nccl_shim_block *b = h->ranks[i].b;

		if (h->ranks[i].uid != uid)
			continue;
		for (uint32_t s = 0; s < comm_count(b); s++)
			n += __atomic_load_n(&b->comms[s].live, __ATOMIC_SEQ_CST) &&
			     __atomic_load_n(&b->comms[s].id, __ATOMIC_SEQ_CST) == id;
	}
	return n;
}

/* Whether every rank can take its communicators apart and make them again
 * within the job: each says it can, and every communicator made from an
 * id has its rank 0 here (a job's rank on another machine would hold it).
 * Where not, *why says which rank and why. */
static bool teardown_possible(const struct nccl_hold *h, char *why, size_t size)
{
	for (size_t i = 0; i < h->n; i++) {
		struct nccl_shim_block *b = h->ranks[i].b;
		uint32_t unsafe = __atomic_load_n(&b->unsafe, __ATOMIC_SEQ_CST), slot;

		if (!(__atomic_load_n(&b->caps, __ATOMIC_SEQ_CST) & NCCL_SHIM_CAP_REBUILD) ||
		    unsafe) {
			snprintf(why, size, "PID %d's NCCL communicators cannot be taken apart: %s",
				 (int)h->ranks[i].pid,
				 nccl_unsafe_reason(unsafe ? unsafe : NCCL_UNSAFE_VERSION));
			return false;
		}
		for (uint32_t s = 0; s < comm_count(b); s++) {
			struct nccl_shim_comm *c = &b->comms[s];
			uint64_t id = __atomic_load_n(&c->id, __ATOMIC_SEQ_CST);
			uint32_t nranks = __atomic_load_n(&c->nranks, __ATOMIC_SEQ_CST);

			if (!__atomic_load_n(&c->live, __ATOMIC_SEQ_CST))
				continue;
			if ((__atomic_load_n(&c->uid_role, __ATOMIC_SEQ_CST) == NCCL_UID_TAKES &&
			     find_poster(h, id, h->ranks[i].uid, &slot) < 0) ||
			    ranks_here(h, id, h->ranks[i].uid) != nranks) {
				snprintf(
				    why, size,
				    "PID %d is rank %u of an NCCL communicator of %u ranks not "
				    "all in the job (another machine's, another user's, or a "
				    "process left out)",
				    (int)h->ranks[i].pid,
				    __atomic_load_n(&c->rank, __ATOMIC_RELAXED), nranks);
				return false;
			}
		}
	}
	return true;
}

/* Each rank that takes an id gets the one its communicator's rank 0
 * posted for this teardown, marked with the taker's own count. */
static int copy_next_ids(const struct nccl_hold *h, struct stasis_error **err)
{
	for (size_t i = 0; i < h->n; i++) {
		struct nccl_shim_block *b = h->ranks[i].b;
		uint32_t gen = h->ranks[i].teardown;

		for (uint32_t s = 0; s < comm_count(b); s++) {
			struct nccl_shim_comm *c = &b->comms[s], *root;
			uint32_t root_slot;
			int r;

			if (!__atomic_load_n(&c->live, __ATOMIC_SEQ_CST) ||
			    __atomic_load_n(&c->uid_role, __ATOMIC_SEQ_CST) != NCCL_UID_TAKES)
				continue;
			r = find_poster(h, __atomic_load_n(&c->id, __ATOMIC_SEQ_CST),
					h->ranks[i].uid, &root_slot);
			root = r >= 0 ? &h->ranks[r].b->comms[root_slot] : NULL;
			if (!root || __atomic_load_n(&root->uid_gen, __ATOMIC_SEQ_CST) !=
					 h->ranks[r].teardown)
				return stasis_error_set(err, EPROTO, STASIS_DOMAIN_CUDA, 0,
							"PID %d's NCCL communicator got no id for "
							"its next life from its "
							"rank 0",
							(int)h->ranks[i].pid);
			for (size_t k = 0; k < sizeof(c->next_uid); k++)
				__atomic_store_n(
				    &c->next_uid[k],
				    __atomic_load_n(&root->next_uid[k], __ATOMIC_RELAXED),
				    __ATOMIC_RELAXED);
			__atomic_store_n(&c->uid_gen, gen, __ATOMIC_SEQ_CST);
		}
	}
	return 0;
}

/* A rank that failed to get to phase (or could not quiet its
 * communicators), as an error. */
static int refuse_rank(const struct nccl_hold *h, size_t i, uint32_t want,
		       struct stasis_error **err)
{
	struct nccl_shim_block *b = h->ranks[i].b;
	int error = (int)__atomic_load_n(&b->error, __ATOMIC_SEQ_CST);

	if (__atomic_load_n(&b->refused, __ATOMIC_SEQ_CST) == want) {
		stasis_error_set(err, EIO, STASIS_DOMAIN_CUDA, error,
				 "PID %d's NCCL communicators could not be quieted (NCCL error %d)",
				 (int)h->ranks[i].pid, error);
		return stasis_error_hint(err, "nothing was changed and the job runs on");
	}
	stasis_error_set(
	    err, EIO, STASIS_DOMAIN_CUDA, error,
	    "PID %d could not %s its NCCL communicators (NCCL error %d)", (int)h->ranks[i].pid,
	    __atomic_load_n(&b->failed_in, __ATOMIC_SEQ_CST) == NCCL_PHASE_GOING_UP ? "make again"
										    : "take apart",
	    error);
	return stasis_error_hint(err, "the job's NCCL calls fail from now on");
}

/* Every rank at phase (DOWN: of this teardown), or the first that failed
 * or refused; at most limit_ms. */
static int wait_phase(const struct nccl_hold *h, uint32_t phase, unsigned int limit_ms,
		      struct stasis_error **err)
{
	uint64_t start = now_usec();

	for (;;) {
		size_t there = 0, late = 0;

		for (size_t i = 0; i < h->n; i++) {
			struct nccl_shim_block *b = h->ranks[i].b;
			uint32_t now = __atomic_load_n(&b->phase, __ATOMIC_SEQ_CST);
			uint32_t want = h->ranks[i].teardown;

			if (now == NCCL_PHASE_FAILED ||
			    __atomic_load_n(&b->refused, __ATOMIC_SEQ_CST) == want)
				return refuse_rank(h, i, want, err);
			if (now == phase && (phase != NCCL_PHASE_DOWN ||
					     __atomic_load_n(&b->gen, __ATOMIC_SEQ_CST) == want))
				there++;
			else
				late = i;
		}
		if (there == h->n)
			return 0;
		if (now_usec() - start > (uint64_t)limit_ms * 1000) {
			stasis_error_set(err, ETIMEDOUT, STASIS_DOMAIN_CUDA, 0,
					 phase == NCCL_PHASE_QUIET
					     ? "PID %d still had a thread inside NCCL after %u ms"
					     : "PID %d did not take its NCCL communicators apart "
					       "within %u ms",
					 (int)h->ranks[late].pid, limit_ms);
			return stasis_error_hint(err,
						 phase == NCCL_PHASE_QUIET
						     ? "nothing was changed and the job runs on"
						     : "the job's NCCL calls may fail from now on");
		}
		usleep(HOLD_POLL_US);
	}
}

static void ask_all(const struct nccl_hold *h, size_t word)
{
	for (size_t i = 0; i < h->n; i++) {
		struct nccl_shim_block *b = h->ranks[i].b;
		uint32_t *at = word ? &b->destroy : &b->teardown;

		__atomic_store_n(at, h->ranks[i].teardown, __ATOMIC_SEQ_CST);
		wake_service(b);
	}
}

/* Something changed while the ranks got quiet (a buffer registered, a
 * communicator destroyed on one rank): they open again, nothing
 * destroyed; refused where the teardown is needed, else held as they are. */
static int undo_teardown(struct nccl_hold *h, bool needed, const char *why,
			 struct stasis_error **err)
{
	for (size_t i = 0; i < h->n; i++) {
		__atomic_store_n(&h->ranks[i].b->teardown, 0, __ATOMIC_SEQ_CST);
		wake_service(h->ranks[i].b);
	}
	if (!needed)
		return 0;
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_CUDA, 0, "%s", why);
	stasis_error_hint(err, "nothing was changed and the job runs on");
	nccl_hold_release(h);
	return -ENOTSUP;
}

int nccl_hold_teardown(struct nccl_hold *h, bool needed, struct stasis_error **err)
{
	char why[256];
	int r;

	if (!h->held || !h->n)
		return 0;
	if (!teardown_possible(h, why, sizeof(why))) {
		if (!needed)
			return 0;
		stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_CUDA, 0, "%s", why);
		stasis_error_hint(err, "nothing was changed and the job runs on; started with "
				       "NCCL_P2P_DISABLE=1 NCCL_CUMEM_HOST_ENABLE=0, its "
				       "communicators need not be taken apart (docs/MULTI-GPU.md)");
		nccl_hold_release(h);
		return -ENOTSUP;
	}
	for (size_t i = 0; i < h->n; i++) {
		h->ranks[i].teardown = __atomic_load_n(&h->ranks[i].b->gen, __ATOMIC_SEQ_CST) + 1;
		/* A refusal of an earlier try of the same teardown is no answer. */
		__atomic_store_n(&h->ranks[i].b->refused, 0, __ATOMIC_SEQ_CST);
	}
	/* First every rank quiet, which can still be undone, rank 0's next
	 * ids posted and copied: after the destroy every rank can make its
	 * communicators again by itself, stasis gone or not. */
	ask_all(h, 0);
	r = wait_phase(h, NCCL_PHASE_QUIET, h->quiet_ms, err);
	if (r == 0 && !teardown_possible(h, why, sizeof(why)))
		return undo_teardown(h, needed, why, err);
	if (r == 0)
		r = copy_next_ids(h, err);
	if (r == 0) {
		h->torn_down = true;
		ask_all(h, 1);
		r = wait_phase(h, NCCL_PHASE_DOWN, TEARDOWN_LIMIT_MS, err);
	}
	if (r < 0)
		nccl_hold_release(h);
	return r < 0 ? -EIO : 0;
}

uint64_t nccl_hold_teardown_us(const struct nccl_hold *h)
{
	uint64_t max = 0;

	for (size_t i = 0; h->torn_down && i < h->n; i++) {
		uint64_t us = __atomic_load_n(&h->ranks[i].b->down_us, __ATOMIC_SEQ_CST);

		if (us > max)
			max = us;
	}
	return max;
}

void nccl_hold_close(struct nccl_hold *h)
{
	for (size_t i = 0; i < h->n; i++)
		munmap(h->ranks[i].b, sizeof(*h->ranks[i].b));
	free(h->ranks);
	memset(h, 0, sizeof(*h));
}

bool nccl_rank_held(pid_t pid)
{
	struct stat st;
	struct nccl_shim_block *b = find_block(pid, &st, NULL);
	bool held;

	if (!b)
		return false;
	held = __atomic_load_n(&b->request, __ATOMIC_SEQ_CST) == NCCL_SHIM_HOLD;
	munmap(b, sizeof(*b));
	return held;
}

void nccl_release_pids(const pid_t *pids, size_t n)
{
	struct nccl_hold h;

	if (nccl_hold_open(&h, pids, n) == 0) {
		h.held = h.n > 0;
		nccl_hold_release(&h);
	}
	nccl_hold_close(&h);
}

/* NCCL's rebuild of a few communicators: measured in under a second;
 * a rank that takes longer waits for a peer that does not come. */
#define REBUILD_LIMIT_MS 60000u

/* Whether every rank of h is up; fails at the first that failed. */
static int ranks_up(const struct nccl_hold *h, bool *up, struct stasis_error **err)
{
	*up = true;
	for (size_t i = 0; i < h->n; i++) {
		struct nccl_shim_block *b = h->ranks[i].b;
		uint32_t phase = __atomic_load_n(&b->phase, __ATOMIC_SEQ_CST);

		if (phase == NCCL_PHASE_FAILED) {
			stasis_error_set(err, EIO, STASIS_DOMAIN_CUDA,
					 __atomic_load_n(&b->error, __ATOMIC_SEQ_CST),
					 "PID %d could not make its NCCL communicators again (NCCL "
					 "error %d)",
					 (int)h->ranks[i].pid,
					 (int)__atomic_load_n(&b->error, __ATOMIC_SEQ_CST));
			return stasis_error_hint(err, "its NCCL calls fail from now on");
		}
		*up = *up && phase == NCCL_PHASE_UP;
	}
	return 0;
}

int nccl_wait_rebuilt(const pid_t *pids, size_t n, uint64_t since, uint64_t *us,
		      struct stasis_error **err)
{
	struct nccl_hold h;
	uint64_t start = now_usec();
	bool up = true;
	int r = nccl_hold_open(&h, pids, n);

	*us = 0;
	if (r < 0) {
		nccl_hold_close(&h);
		return stasis_error_errno(err, -r, "out of memory");
	}
	/* Only ranks taken apart now count for the time. */
	bool *was_down = calloc(h.n ? h.n : 1, sizeof(*was_down));

	for (size_t i = 0; was_down && i < h.n; i++)
		was_down[i] =
		    __atomic_load_n(&h.ranks[i].b->phase, __ATOMIC_SEQ_CST) != NCCL_PHASE_UP;
	for (;;) {
		r = ranks_up(&h, &up, err);
		if (r < 0 || up)
			break;
		if (now_usec() - start > (uint64_t)REBUILD_LIMIT_MS * 1000) {
			stasis_error_set(err, ETIMEDOUT, STASIS_DOMAIN_CUDA, 0,
					 "the NCCL ranks did not make their communicators again "
					 "within %u ms",
					 REBUILD_LIMIT_MS);
			r = stasis_error_hint(err, "the job runs; its NCCL calls wait for them");
			break;
		}
		usleep(HOLD_POLL_US);
	}
	/* Only rebuilds that ended since the operation began count. */
	for (size_t i = 0; r == 0 && i < h.n; i++) {
		struct nccl_shim_block *b = h.ranks[i].b;
		uint64_t took = __atomic_load_n(&b->up_us, __ATOMIC_SEQ_CST);

		if (__atomic_load_n(&b->up_at_us, __ATOMIC_SEQ_CST) >= since && took > *us)
			*us = took;
	}
	nccl_hold_close(&h);
	return r;
}
