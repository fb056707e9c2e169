/* SPDX-License-Identifier: MIT */
/* The TCP part of sockets_check, against the kernel's own sock_diag: the
 * test process's connections over IPv4 and IPv6, and a child's in a network
 * namespace of its own, which stasis's namespace does not hold. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sockets.h"

/* A listener on family's loopback address and a connection to it, both
 * ends accepted: fds[0] the listener, fds[1] the client, fds[2] the
 * server's end; the listener's port in *port. -1 where family has no
 * loopback here. */
static int loopback_pair(int family, int fds[3], unsigned int *port)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *in = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
	socklen_t len = family == AF_INET ? sizeof(*in) : sizeof(*in6);

	ss.ss_family = family;
	if (family == AF_INET)
		in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	else
		in6->sin6_addr = in6addr_loopback;
	fds[0] = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fds[0] < 0 || bind(fds[0], (struct sockaddr *)&ss, len) < 0 || listen(fds[0], 1) < 0 ||
	    getsockname(fds[0], (struct sockaddr *)&ss, &len) < 0)
		return -1;
	*port = ntohs(family == AF_INET ? in->sin_port : in6->sin6_port);
	fds[1] = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fds[1] < 0 || connect(fds[1], (struct sockaddr *)&ss, len) < 0)
		return -1;
	fds[2] = accept4(fds[0], NULL, NULL, SOCK_CLOEXEC);
	return fds[2] < 0 ? -1 : 0;
}

static void close_all(int fds[3])
{
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

static struct manifest one_process(struct manifest_process *p, pid_t pid)
{
	*p = (struct manifest_process){.pid = pid};
	snprintf(p->comm, sizeof(p->comm), "test");
	return (struct manifest){.procs = p, .nprocs = 1};
}

/* Refused for a connected socket whose ports are port and another. */
static void assert_refused(const struct manifest *m, unsigned int port)
{
	struct stasis_error *err = NULL;
	char server[64], client[64];

	assert_int_equal(sockets_check(m, &err), -ENOTSUP);
	assert_non_null(err);
	assert_non_null(strstr(err->message, "holds a connected TCP socket"));
	assert_non_null(strstr(err->message, "which CRIU saves only with --tcp-established"));
	/* Either end may come first. */
	snprintf(server, sizeof(server), "(local port %u, remote port", port);
	snprintf(client, sizeof(client), "remote port %u)", port);
	assert_true(strstr(err->message, server) || strstr(err->message, client));
	stasis_error_free(err);
}

static void connected_refused(int family)
{
	struct manifest_process p;
	struct manifest m = one_process(&p, getpid());
	struct stasis_error *err = NULL;
	int fds[3] = {-1, -1, -1};
	unsigned int port;

	if (loopback_pair(family, fds, &port) < 0) {
		close_all(fds);
		skip();
	}
	assert_refused(&m, port);
	/* With --tcp-established CRIU saves it. */
	m.options.tcp_established = true;
	assert_int_equal(sockets_check(&m, &err), 0);
	assert_null(err);
	close_all(fds);
}

static void ipv4_connection_refused(void **state)
{
	(void)state;
	connected_refused(AF_INET);
}

static void ipv6_connection_refused(void **state)
{
	(void)state;
	connected_refused(AF_INET6);
}

/* A listener alone is no connection: CRIU saves it. */
static void listener_passes(void **state)
{
	struct manifest_process p;
	struct manifest m = one_process(&p, getpid());
	struct stasis_error *err = NULL;
	int fds[3] = {-1, -1, -1};
	unsigned int port;

	(void)state;
	assert_int_equal(loopback_pair(AF_INET, fds, &port), 0);
	close(fds[1]);
	close(fds[2]);
	fds[1] = fds[2] = -1;
	assert_int_equal(sockets_check(&m, &err), 0);
	assert_null(err);
	close_all(fds);
}

/* The child's end: a network namespace of its own with its loopback up,
 * and a connection there, held until it is killed (or the test dies, as a
 * failed assert leaves it: it must not hold the test's output open). */
static void hold_connection_in_new_netns(int ready)
{
	struct ifreq ifr = {0};
	int fds[3] = {-1, -1, -1}, sk;
	unsigned int port;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || unshare(CLONE_NEWNET) < 0)
		_exit(2);
	sk = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (sk < 0 || ioctl(sk, SIOCGIFFLAGS, &ifr) < 0)
		_exit(3);
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(sk, SIOCSIFFLAGS, &ifr) < 0 || loopback_pair(AF_INET, fds, &port) < 0)
		_exit(4);
	if (write(ready, &port, sizeof(port)) != sizeof(port))
		_exit(5);
	for (;;)
		pause();
}

/* The child's connection is only in its namespace: found there. */
static void connection_in_other_netns_refused(void **state)
{
	struct manifest_process p;
	struct manifest m;
	int ready[2], status;
	unsigned int port;
	ssize_t n;
	pid_t pid;

	(void)state;
	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(ready[0]);
		hold_connection_in_new_netns(ready[1]);
	}
	close(ready[1]);
	n = read(ready[0], &port, sizeof(port));
	close(ready[0]);
	if (n != sizeof(port)) {
		waitpid(pid, &status, 0);
		skip(); /* no network namespace to be had here */
	}
	m = one_process(&p, pid);
	assert_refused(&m, port);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(ipv4_connection_refused),
	    cmocka_unit_test(ipv6_connection_refused),
	    cmocka_unit_test(listener_passes),
	    cmocka_unit_test(connection_in_other_netns_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
