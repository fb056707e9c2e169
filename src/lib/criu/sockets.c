/* SPDX-License-Identifier: MIT */
#include "sockets.h"

#include <errno.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/inet_diag.h>
#include <linux/sock_diag.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/un.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mappings.h"
#include "proc.h"
#include "util.h"

/* linux/un.h's, which cannot be included beside sys/un.h. */
#ifndef SIOCUNIXFILE
#define SIOCUNIXFILE (SIOCPROTOPRIVATE + 0)
#endif

/* pid's socket descriptors: their numbers and inodes. */
struct socket_fd {
	int fd;
	unsigned long ino;
};

struct socket_fds {
	struct socket_fd *at;
	size_t n, cap;
};

static int add_socket_fd(int dirfd, const char *fd, const char *target, void *ctx)
{
	struct socket_fds *set = ctx;
	struct socket_fd *bigger;
	unsigned long ino;

	if (sscanf(target, "socket:[%lu]", &ino) != 1)
		return 0;
	bigger = grow_array(set->at, set->n, &set->cap, sizeof(*bigger), 16);
	if (!bigger)
		return -ENOMEM;
	set->at = bigger;
	set->at[set->n++] = (struct socket_fd){.fd = atoi(fd), .ino = ino};
	return 0;
}

/* The TCP states CRIU saves only with --tcp-established (include/net/tcp_states.h),
 * as sock_diag's bitmask of states. */
#define CONNECTED_STATES                                                                           \
	(1u << TCP_ESTABLISHED | 1u << TCP_SYN_SENT | 1u << TCP_FIN_WAIT1 | 1u << TCP_FIN_WAIT2 |  \
	 1u << TCP_CLOSE_WAIT | 1u << TCP_LAST_ACK | 1u << TCP_CLOSING)

/* A dump's messages fill the reader's buffer up to the size it read with
 * (netlink's max_recvmsg_len, 32 KiB at most): libmnl's later
 * MNL_SOCKET_DUMP_SIZE. */
#define DIAG_BUFFER 32768

static bool has_inode(const struct socket_fds *set, unsigned long ino)
{
	for (size_t i = 0; i < set->n; i++)
		if (set->at[i].ino == ino)
			return true;
	return false;
}

/* What the search for a connected TCP socket of pid's found: its ports,
 * or where none was found, what failed. */
struct tcp_search {
	const struct socket_fds *set;
	bool found;
	unsigned int local, remote;
	const char *failed;
};

static void mnl_socket_closep(struct mnl_socket **nl)
{
	if (*nl)
		mnl_socket_close(*nl);
}

/* A netlink socket of NETLINK_SOCK_DIAG made in the network namespace of
 * nsfd, by a thread of its own that joins it: a socket keeps the namespace
 * it was made in, and the thread's end leaves stasis's threads in theirs. */
struct ns_socket {
	int nsfd;
	int sk; /* or -errno */
};

static void *make_ns_socket(void *arg)
{
	struct ns_socket *n = arg;

	if (setns(n->nsfd, CLONE_NEWNET) < 0)
		n->sk = -errno;
	else if ((n->sk = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG)) < 0)
		n->sk = -errno;
	return NULL;
}

/* A sock_diag socket in pid's network namespace (the one its
 * /proc/PID/net/tcp shows), each of whose waits ends within a second; -errno
 * with s->failed set where it cannot be made. */
static int diag_socket(pid_t pid, struct tcp_search *s)
{
	static const struct timeval second = {.tv_sec = 1};
	_cleanup_close_ int nsfd = -1;
	struct ns_socket n;
	pthread_t thread;
	char path[64];
	int r;

	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	nsfd = open(path, O_RDONLY | O_CLOEXEC);
	if (nsfd < 0) {
		s->failed = "its network namespace cannot be opened";
		return -errno;
	}
	n = (struct ns_socket){.nsfd = nsfd, .sk = -EAGAIN};
	r = pthread_create(&thread, NULL, make_ns_socket, &n);
	if (r != 0) {
		s->failed = "no thread can join its network namespace";
		return -r;
	}
	pthread_join(thread, NULL);
	if (n.sk < 0) {
		s->failed = "no sock_diag socket can be made in its network namespace";
		return n.sk;
	}
	if (setsockopt(n.sk, SOL_SOCKET, SO_RCVTIMEO, &second, sizeof(second)) < 0 ||
	    setsockopt(n.sk, SOL_SOCKET, SO_SNDTIMEO, &second, sizeof(second)) < 0) {
		r = -errno;
		close(n.sk);
		s->failed = "its sock_diag socket cannot be given a deadline";
		return r;
	}
	return n.sk;
}

/* One socket of a sock_diag dump: the search's end where it is one of pid's. */
static int on_tcp_socket(const struct nlmsghdr *nlh, void *data)
{
	const struct inet_diag_msg *msg = mnl_nlmsg_get_payload(nlh);
	struct tcp_search *s = data;

	if (mnl_nlmsg_get_payload_len(nlh) < sizeof(*msg)) {
		errno = EBADMSG;
		return MNL_CB_ERROR;
	}
	if (!has_inode(s->set, msg->idiag_inode))
		return MNL_CB_OK;
	s->found = true;
	s->local = ntohs(msg->id.idiag_sport);
	s->remote = ntohs(msg->id.idiag_dport);
	return MNL_CB_STOP;
}

/* Dump the TCP sockets of family in the connected states through nl until
 * one of s's is found or the dump ends; -errno with s->failed set where the
 * kernel does not answer in time or answers with an error. */
static int dump_tcp(struct mnl_socket *nl, uint8_t family, struct tcp_search *s)
{
	_cleanup_free_ char *buf = malloc(DIAG_BUFFER);
	unsigned int seq = family, portid = mnl_socket_get_portid(nl);
	struct inet_diag_req_v2 *req;
	struct nlmsghdr *nlh;
	ssize_t n;
	int r;

	if (!buf) {
		s->failed = "out of memory";
		return -ENOMEM;
	}
	nlh = mnl_nlmsg_put_header(buf);
	nlh->nlmsg_type = SOCK_DIAG_BY_FAMILY;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	nlh->nlmsg_seq = seq;
	req = mnl_nlmsg_put_extra_header(nlh, sizeof(*req));
	req->sdiag_family = family;
	req->sdiag_protocol = IPPROTO_TCP;
	req->idiag_states = CONNECTED_STATES;
	s->failed = "sock_diag cannot be asked for its TCP sockets";
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
		return errno == EAGAIN ? -ETIMEDOUT : -errno;
	s->failed = "sock_diag's dump of its TCP sockets failed";
	do {
		n = mnl_socket_recvfrom(nl, buf, DIAG_BUFFER);
		if (n < 0)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		r = mnl_cb_run(buf, n, seq, portid, on_tcp_socket, s);
	} while (r == MNL_CB_OK);
	if (r < 0)
		return -errno;
	s->failed = NULL;
	return 0;
}

/* Find the first TCP socket of pid's among set that is connected or
 * closing, by sock_diag in pid's network namespace, IPv4 then IPv6: its
 * ports in s. -errno with s->failed set where the kernel cannot be asked:
 * then nobody can say there is none. */
static int find_connected(pid_t pid, struct tcp_search *s)
{
	_cleanup_(mnl_socket_closep) struct mnl_socket *nl = NULL;
	int sk = diag_socket(pid, s), r;

	if (sk < 0)
		return sk;
	nl = mnl_socket_fdopen(sk);
	if (!nl) {
		r = -errno;
		close(sk);
		s->failed = "its sock_diag socket cannot be used";
		return r;
	}
	if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		s->failed = "its sock_diag socket cannot be bound";
		return -errno;
	}
	r = dump_tcp(nl, AF_INET, s);
	if (r == 0 && !s->found)
		r = dump_tcp(nl, AF_INET6, s);
	return r;
}

/* Where CRIU's restore binds a unix socket of pid's again, as root, then
 * chowns and chmods it by that path (sk-unix.c): the name it was bound to
 * within pid's root, and for a relative name the folder its file is in
 * (CRIU finds it so, with SIOCUNIXFILE). Both from the socket itself, not
 * /proc/PID/net/unix, whose lines cannot tell an abstract name from one
 * that begins with '@' and are split by a newline in a name. */
struct unix_name {
	char name[sizeof(((struct sockaddr_un *)0)->sun_path) + 1]; /* as bound */
	char file[PATH_MAX]; /* its file's path as this process sees it */
	struct stat st;	     /* its file's */
};

/* Whether sk is a stream or seqpacket socket with a peer: CRIU's restore
 * never binds those again (bind_unix_sk), though an accepted one carries
 * its listener's name, which may be gone since. */
static bool connected_stream(int sk)
{
	struct sockaddr_un peer;
	socklen_t len = sizeof(peer);
	int type;
	socklen_t tlen = sizeof(type);

	return getsockopt(sk, SOL_SOCKET, SO_TYPE, &type, &tlen) == 0 &&
	       (type == SOCK_STREAM || type == SOCK_SEQPACKET) &&
	       getpeername(sk, (struct sockaddr *)&peer, &len) == 0;
}

/* fd's device and inode in st, from what the kernel holds: a FUSE file's
 * daemon, a user's, is not asked (and could leave stasis waiting). */
static int file_identity(int fd, struct stat *st)
{
	struct statx stx;

	if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_INO, &stx) < 0)
		return -1;
	memset(st, 0, sizeof(*st));
	st->st_dev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
	st->st_ino = stx.stx_ino;
	return 0;
}

/* 1 with u filled where the socket sk (a copy of pid's) is a unix socket
 * bound to a path, 0 where it is not, -errno where its file cannot be
 * found. */
static int unix_bound_name(int sk, struct unix_name *u)
{
	struct sockaddr_un sun;
	socklen_t len = sizeof(sun);
	int domain, file;
	socklen_t dlen = sizeof(domain);
	char link[64];
	ssize_t n;

	if (getsockopt(sk, SOL_SOCKET, SO_DOMAIN, &domain, &dlen) < 0 || domain != AF_UNIX)
		return 0;
	if (connected_stream(sk))
		return 0;
	if (getsockname(sk, (struct sockaddr *)&sun, &len) < 0)
		return -errno;
	/* Unnamed, or abstract (a name in no file system). */
	if (len <= offsetof(struct sockaddr_un, sun_path) || sun.sun_path[0] == '\0')
		return 0;
	/* A name of the whole sun_path is given a length one past it (the
	 * kernel counts the NUL it adds), of which only sizeof(sun) came. */
	len = (len < sizeof(sun) ? len : sizeof(sun)) - offsetof(struct sockaddr_un, sun_path);
	memcpy(u->name, sun.sun_path, len);
	u->name[len] = '\0';
	file = ioctl(sk, SIOCUNIXFILE);
	if (file < 0)
		return -errno;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", file);
	n = file_identity(file, &u->st) < 0 ? -1 : readlink(link, u->file, sizeof(u->file) - 1);
	if (n < 0)
		n = -errno;
	close(file);
	if (n < 0)
		return (int)n;
	u->file[n] = '\0';
	/* A file unlinked since: CRIU binds it again in the same folder. */
	if ((size_t)n > strlen(DELETED) && strcmp(u->file + n - strlen(DELETED), DELETED) == 0)
		u->file[n - strlen(DELETED)] = '\0';
	return 1;
}

/* Copy src into dst with its control characters as '?': a name can hold
 * a newline, and an error is one line. */
static void printable(char *dst, size_t size, const char *src)
{
	size_t i = 0;

	for (; src[i] && i + 1 < size; i++)
		dst[i] = (unsigned char)src[i] < 0x20 || src[i] == 0x7f ? '?' : src[i];
	dst[i] = '\0';
}

/* The process whose /proc/PID/root is the root CRIU binds pid's sockets
 * again in: its mount namespace's, for CRIU binds before it chroots a task.
 * This process where pid shares stasis's mount namespace (a chroot then
 * does not count), pid (a container's root) where not. */
static pid_t bind_root(pid_t pid)
{
	char link[64];
	struct stat mine, its;

	snprintf(link, sizeof(link), "/proc/%d/ns/mnt", (int)pid);
	if (stat("/proc/self/ns/mnt", &mine) == 0 && stat(link, &its) == 0 &&
	    mine.st_dev == its.st_dev && mine.st_ino == its.st_ino)
		return getpid();
	return pid;
}

/* The mount a path is on (statx's STATX_MNT_ID), or 0 where unknown. */
static uint64_t mount_id(const char *path)
{
	struct statx stx;

	if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &stx) < 0 ||
	    !(stx.stx_mask & STATX_MNT_ID))
		return 0;
	return stx.stx_mnt_id;
}

/* Whether path, within root's /proc/PID/root, is the socket's own file,
 * on its folder's mount: otherwise CRIU's bind by that path would unlink
 * and take what is there now (another socket, one a user's mount hides
 * the real folder of, the socket itself mounted over a name of root's). */
static bool names_file(pid_t root, const char *path, const struct stat *file)
{
	char at[PATH_MAX + 32];
	int prefix = snprintf(at, sizeof(at), "/proc/%d/root", (int)root);
	struct stat st;
	uint64_t id;
	char *slash;

	if ((size_t)snprintf(at + prefix, sizeof(at) - prefix, "%s", path) >= sizeof(at) - prefix)
		return false;
	if (lstat(at, &st) < 0 || !S_ISSOCK(st.st_mode) || st.st_dev != file->st_dev ||
	    st.st_ino != file->st_ino)
		return false;
	id = mount_id(at);
	/* Its folder; the root as "/proc/PID/root/", the link followed. */
	slash = strrchr(at, '/');
	slash[slash == at + prefix ? 1 : 0] = '\0';
	return id != 0 && id == mount_id(at);
}

enum unix_finding { UNIX_SAFE, UNIX_EXPOSED, UNIX_SHARED, UNIX_ELSEWHERE, UNIX_ODD_NAME };

/* The first unix socket of pid's (among fds) that CRIU's restore would bind
 * where it must not: in folders a user other than root can change, directly
 * in a sticky folder shared by all while a link protection is off (CRIU
 * connects the socket's clients to it by that path, as root, after its
 * owner could rename it and put a link there), or at a name that no longer
 * leads to the socket's file. Its path in bad. -errno,
 * with bad saying what, where a socket cannot be looked at: then nobody
 * can say it is safe. */
static int find_exposed_unix(pid_t pid, const struct socket_fds *set, char *bad, size_t size)
{
	_cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	pid_t root = bind_root(pid);

	if (pidfd < 0) {
		int e = errno;

		snprintf(bad, size, "(its descriptors cannot be read: %s)", strerror(e));
		return -e;
	}
	for (size_t i = 0; i < set->n; i++) {
		_cleanup_close_ int sk = (int)syscall(SYS_pidfd_getfd, pidfd, set->at[i].fd, 0);
		struct unix_name u;
		const char *where;
		int r;

		if (sk < 0 && errno == EBADF)
			continue; /* closed since */
		r = sk < 0 ? -errno : unix_bound_name(sk, &u);
		if (r < 0) {
			snprintf(bad, size, "(descriptor %d cannot be looked at: %s)",
				 set->at[i].fd, strerror(-r));
			return r;
		}
		if (r == 0)
			continue;
		/* Where CRIU binds it: the name as bound, or a relative name in
		 * the folder its file is in. The folders first: a stat of the
		 * file itself could reach a FUSE mount. */
		where = u.name[0] == '/' ? u.name : u.file;
		printable(bad, size, where);
		if (!mappings_path_canonical(where, strlen(where)))
			return UNIX_ODD_NAME;
		if (!mappings_folders_root_only(root, where, strlen(where)))
			return UNIX_EXPOSED;
		if (mappings_folder_shared_sticky(root, where) && !mappings_links_protected())
			return UNIX_SHARED;
		if (!names_file(root, where, &u.st))
			return UNIX_ELSEWHERE;
	}
	return UNIX_SAFE;
}

static int refuse_unix(const struct manifest_process *p, const char *path,
		       struct stasis_error **err)
{
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
			 "PID %d (%s) holds a unix socket bound to %s, in a folder that a user "
			 "other than root can change: at restore CRIU binds it again as root "
			 "along that path, and chowns and chmods it",
			 (int)p->pid, p->comm, path);
	return stasis_error_hint(err, "nothing was changed; bind it in a folder of root's or "
				      "to an abstract name, or close it before the checkpoint "
				      "(docs/SECURITY.md)");
}

static int refuse_shared(const struct manifest_process *p, const char *path,
			 struct stasis_error **err)
{
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
			 "PID %d (%s) holds a unix socket bound to %s, in a sticky folder, while "
			 "fs.protected_symlinks or fs.protected_hardlinks is off: at restore CRIU "
			 "connects the socket's clients to that name as root, after its owner "
			 "could put a link there",
			 (int)p->pid, p->comm, path);
	return stasis_error_hint(err, "nothing was changed; bind it in a folder of root's or to "
				      "an abstract name, or " LINKS_PROTECTION_ON);
}

static int refuse_elsewhere(const struct manifest_process *p, const char *path,
			    struct stasis_error **err)
{
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
			 "PID %d (%s) holds a unix socket bound to %s, a name that no longer "
			 "leads to it (unlinked, moved, or in a mount of another namespace): at "
			 "restore CRIU binds it again as root at that name, over what is there",
			 (int)p->pid, p->comm, path);
	return stasis_error_hint(err, "nothing was changed; close the socket, or bind it "
				      "again, before the checkpoint");
}

static int refuse_odd_name(const struct manifest_process *p, const char *path,
			   struct stasis_error **err)
{
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
			 "PID %d (%s) holds a unix socket bound to %s, a name with an empty, "
			 "'.' or '..' part, whose folders stasis does not check: at restore CRIU "
			 "binds it again as root by that name",
			 (int)p->pid, p->comm, path);
	return stasis_error_hint(err, "nothing was changed; bind it by a plain absolute or "
				      "relative name");
}

static int refuse_unlooked(const struct manifest_process *p, const char *why, int r,
			   struct stasis_error **err)
{
	stasis_error_set(err, -r, STASIS_DOMAIN_SYSTEM, -r,
			 "the unix sockets of PID %d (%s) cannot be checked %s", (int)p->pid,
			 p->comm, why);
	return stasis_error_hint(err, "nothing was changed");
}

static int refuse_tcp(const struct manifest_process *p, unsigned int local, unsigned int remote,
		      struct stasis_error **err)
{
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0,
			 "PID %d (%s) holds a connected TCP socket (local port %u, remote "
			 "port %u), which CRIU saves only with --tcp-established",
			 (int)p->pid, p->comm, local, remote);
	return stasis_error_hint(err, "checkpoint with --tcp-established to keep the "
				      "connection (its peer must still be there at restore), "
				      "or close it first");
}

static int refuse_tcp_unchecked(const struct manifest_process *p, const char *why, int r,
				struct stasis_error **err)
{
	stasis_error_set(err, -r, STASIS_DOMAIN_SYSTEM, -r,
			 "the TCP sockets of PID %d (%s) cannot be checked: %s: %s", (int)p->pid,
			 p->comm, why, strerror(-r));
	return stasis_error_hint(err, "nothing was changed");
}

int sockets_check(const struct manifest *m, struct stasis_error **err)
{
	for (size_t i = 0; i < m->nprocs; i++) {
		const struct manifest_process *p = &m->procs[i];
		struct socket_fds set = {0};
		struct tcp_search tcp = {.set = &set};
		char path[PATH_MAX];
		int r, asked = 0;

		/* Each process's descriptors read once, for both kinds. */
		r = proc_each_fd(p->pid, add_socket_fd, &set);
		if (r < 0) {
			free(set.at);
			return refuse_unlooked(p, "(out of memory)", r, err);
		}
		r = set.n ? find_exposed_unix(p->pid, &set, path, sizeof(path)) : UNIX_SAFE;
		if (r == UNIX_SAFE && set.n && !m->options.tcp_established)
			asked = find_connected(p->pid, &tcp);
		free(set.at);
		if (r < 0)
			return refuse_unlooked(p, path, r, err);
		if (r == UNIX_EXPOSED)
			return refuse_unix(p, path, err);
		if (r == UNIX_SHARED)
			return refuse_shared(p, path, err);
		if (r == UNIX_ELSEWHERE)
			return refuse_elsewhere(p, path, err);
		if (r == UNIX_ODD_NAME)
			return refuse_odd_name(p, path, err);
		if (asked < 0)
			return refuse_tcp_unchecked(p, tcp.failed, asked, err);
		if (tcp.found)
			return refuse_tcp(p, tcp.local, tcp.remote, err);
	}
	return 0;
}
