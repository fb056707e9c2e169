/* SPDX-License-Identifier: MIT */
/* A peer that attacks stasis's migration, for the end-to-end tests: it
 * speaks the protocol through the library's own channel (tls.c, wire.c),
 * and breaks it on purpose.
 *
 * Against a receiver (stasis receive):
 *   hostile-peer idle ADDR N SECONDS     N TCP connections that say nothing
 *   hostile-peer flood ADDR N SECONDS [FROM...]
 *                                        N TCP connections that say nothing,
 *                                        from the source addresses FROM in
 *                                        turn; each one the receiver closes
 *                                        is opened again within 100 ms;
 *                                        ends after SECONDS (or at SIGTERM),
 *                                        printing how many it opened
 *   hostile-peer scan ADDR               connect and close at once
 *   hostile-peer garbage ADDR            4 KiB that is not TLS
 *   hostile-peer stall ADDR KEY          with the key: 5 bytes of a frame
 *                                        header, then silence until killed
 *   hostile-peer bad-manifest ADDR KEY PID
 *                                        with the key: a HELLO for a tree
 *                                        rooted at PID, then a MANIFEST
 *                                        that is not JSON; prints what the
 *                                        receiver answered
 * Against a source (stasis migrate), as a receiver that lies:
 *   hostile-peer partial-restored LISTEN KEY  READY, takes the image, then
 *                                        5 bytes of RESTORED and silence
 *   hostile-peer silent LISTEN KEY       READY, takes the image, then
 *                                        silence
 * Each prints "ready" on stdout once it holds its position. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "message.h"
#include "tls.h"
#include "wire.h"

static int tcp_connect(const char *addr)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	char host[256], port[16];
	int fd;

	if (wire_split_addr(addr, host, sizeof(host), port, sizeof(port)) < 0 ||
	    getaddrinfo(host, port, &hints, &res) != 0)
		return -1;
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) < 0) {
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd;
}

static void hold(void)
{
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}

static int idle(const char *addr, int n, int seconds)
{
	for (int i = 0; i < n; i++)
		if (tcp_connect(addr) < 0)
			return 1;
	printf("ready\n");
	fflush(stdout);
	sleep((unsigned int)seconds);
	return 0;
}

#define FLOOD_ROUND_MS 100

static volatile sig_atomic_t flood_stop;

static void on_term(int sig)
{
	(void)sig;
	flood_stop = 1;
}

/* A connection to ai that is under way (non-blocking), from the address
 * from (NULL: the kernel's choice); -1 when none could be begun. */
static int flood_open(const struct addrinfo *ai, const char *from)
{
	struct sockaddr_storage sa = {.ss_family = (sa_family_t)ai->ai_family};
	struct sockaddr_in *in = (struct sockaddr_in *)&sa;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&sa;
	void *at = ai->ai_family == AF_INET ? (void *)&in->sin_addr : (void *)&in6->sin6_addr;
	socklen_t len = ai->ai_family == AF_INET ? sizeof(*in) : sizeof(*in6);
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		return -1;
	if (from && (inet_pton(ai->ai_family, from, at) != 1 ||
		     bind(fd, (struct sockaddr *)&sa, len) < 0)) {
		close(fd);
		return -1;
	}
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	return fd;
}

static uint64_t ms_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* n connections held open, saying nothing, each one closed by the
 * receiver opened again at the next round, for seconds; from[i % nfrom]
 * is connection i's source address. */
static int flood(const char *addr, int n, int seconds, char **from, int nfrom)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	struct pollfd *p = calloc((size_t)n, sizeof(*p));
	uint64_t start = ms_now(), end = start + (uint64_t)seconds * 1000u, opened = 0;
	char host[256], port[16];

	if (!p || n <= 0 || wire_split_addr(addr, host, sizeof(host), port, sizeof(port)) < 0 ||
	    getaddrinfo(host, port, &hints, &res) != 0)
		return 1;
	for (int i = 0; i < n; i++) {
		p[i] = (struct pollfd){.fd = flood_open(res, nfrom ? from[i % nfrom] : NULL),
				       .events = POLLIN | POLLRDHUP};
		if (p[i].fd < 0) {
			fprintf(stderr, "hostile-peer: connection %d: %s\n", i, strerror(errno));
			return 1;
		}
		opened++;
	}
	signal(SIGTERM, on_term);
	printf("ready\n");
	fflush(stdout);
	while (ms_now() < end && !flood_stop) {
		uint64_t round = ms_now();
		int left;

		/* Closed by the receiver (or never connected): noticed now,
		 * opened again once the round is over. */
		while ((left = (int)(round + FLOOD_ROUND_MS - ms_now())) > 0 &&
		       poll(p, (nfds_t)n, left) > 0) {
			for (int i = 0; i < n; i++) {
				if (p[i].fd >= 0 && p[i].revents) {
					close(p[i].fd);
					p[i].fd = -1;
				}
			}
		}
		for (int i = 0; i < n; i++) {
			if (p[i].fd < 0 &&
			    (p[i].fd = flood_open(res, nfrom ? from[i % nfrom] : NULL)) >= 0)
				opened++;
		}
	}
	printf("opened %llu connections in %.1f s\n", (unsigned long long)opened,
	       (double)(ms_now() - start) / 1000);
	freeaddrinfo(res);
	return 0;
}

static int garbage(const char *addr)
{
	char junk[4096];
	int fd = tcp_connect(addr);

	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (char)(i * 131 + 7);
	if (fd < 0 || write(fd, junk, sizeof(junk)) < 0)
		return 1;
	sleep(1);
	close(fd);
	return 0;
}

static int load_key(const char *path, struct tls_key *key)
{
	unsigned char *data = NULL;
	size_t len = 0;

	if (wire_key_load(path, &data, &len, NULL) < 0)
		return -1;
	key->data = data;
	key->len = len;
	return 0;
}

static int client(const char *addr, const char *keyfile, struct tls_key *key,
		  struct tls_channel **ch)
{
	struct stasis_error *err = NULL;

	if (load_key(keyfile, key) < 0 || tls_connect(addr, key, ch, &err) < 0) {
		fprintf(stderr, "hostile-peer: %s\n", err ? err->message : "no key");
		return -1;
	}
	return 0;
}

static int stall(const char *addr, const char *keyfile)
{
	static const unsigned char part[5] = {0x53, 0x54, 0x4d, 0x31, 0x01};
	struct tls_key key;
	struct tls_channel *ch;

	if (client(addr, keyfile, &key, &ch) < 0 || tls_send_raw(ch, part, sizeof(part)) < 0)
		return 1;
	hold();
	return 0;
}

static int bad_manifest(const char *addr, const char *keyfile, const char *pid)
{
	static const char junk[] = "{\"format_version\": 1, \"processes\": [";
	unsigned char *buf = malloc(WIRE_MAX_PAYLOAD);
	struct stasis_error *err = NULL;
	struct wire_header h;
	struct tls_key key;
	struct tls_channel *ch;
	char hello[512];
	int r;

	snprintf(hello, sizeof(hello),
		 "{\"manifest\":{\"format_version\":1,\"processes\":[{\"pid\":%s,\"ppid\":1,"
		 "\"comm\":\"x\"}],\"files\":[]},\"estimate\":4096,\"gpu_bytes\":0}",
		 pid);
	if (!buf || client(addr, keyfile, &key, &ch) < 0 ||
	    tls_send(ch, WIRE_HELLO, 0, hello, strlen(hello)) < 0)
		return 1;
	r = msg_recv(ch, "the receiver", 30000, &h, buf, &err);
	if (r < 0 || h.type != WIRE_READY) {
		printf("refused at HELLO: %s\n", err ? err->message : "?");
		return 1;
	}
	if (tls_send(ch, WIRE_MANIFEST, 0, junk, strlen(junk)) < 0)
		return 1;
	r = msg_recv(ch, "the receiver", 30000, &h, buf, &err);
	printf("answer: %s\n", r < 0 && err ? err->message : "none");
	return 0;
}

/* A receiver that takes the image and then lies about its restore. */
static int liar(const char *listen_addr, const char *keyfile, bool partial)
{
	static const unsigned char part[5] = {0x53, 0x54, 0x4d, 0x31, WIRE_RESTORED};
	unsigned char *buf = malloc(WIRE_MAX_PAYLOAD);
	struct stasis_error *err = NULL;
	struct tls_channel *ch = NULL;
	struct wire_header h;
	struct tls_key key;
	char peer[128];
	int lfd, fd;

	if (!buf || load_key(keyfile, &key) < 0 || tls_listen(listen_addr, &lfd, &err) < 0)
		return 1;
	printf("listening\n");
	fflush(stdout);
	if (tls_accept_fd(lfd, &fd, NULL, peer, sizeof(peer)) < 0 ||
	    tls_serve(fd, peer, &key, 15000, &ch, &err) < 0)
		return 1;
	if (msg_recv(ch, "the source", 30000, &h, buf, &err) < 0 || h.type != WIRE_HELLO)
		return 1;
	if (tls_send(ch, WIRE_READY, 0, "{\"gpus\":\"none\"}", 15) < 0)
		return 1;
	do {
		if (msg_recv(ch, "the source", 120000, &h, buf, &err) < 0) {
			fprintf(stderr, "hostile-peer: %s\n", err ? err->message : "?");
			return 1;
		}
	} while (h.type != WIRE_MANIFEST);
	if (partial && tls_send_raw(ch, part, sizeof(part)) < 0)
		return 1;
	hold();
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 2 ? argv[1] : "";

	if (!strcmp(mode, "idle") && argc == 5)
		return idle(argv[2], atoi(argv[3]), atoi(argv[4]));
	if (!strcmp(mode, "flood") && argc >= 5)
		return flood(argv[2], atoi(argv[3]), atoi(argv[4]), argv + 5, argc - 5);
	if (!strcmp(mode, "scan") && argc == 3) {
		int fd = tcp_connect(argv[2]);

		return fd < 0 ? 1 : (close(fd), 0);
	}
	if (!strcmp(mode, "garbage") && argc == 3)
		return garbage(argv[2]);
	if (!strcmp(mode, "stall") && argc == 4)
		return stall(argv[2], argv[3]);
	if (!strcmp(mode, "bad-manifest") && argc == 5)
		return bad_manifest(argv[2], argv[3], argv[4]);
	if (!strcmp(mode, "partial-restored") && argc == 4)
		return liar(argv[2], argv[3], true);
	if (!strcmp(mode, "silent") && argc == 4)
		return liar(argv[2], argv[3], false);
	fprintf(stderr, "usage: hostile-peer MODE ARGS (see its source)\n");
	return 2;
}
