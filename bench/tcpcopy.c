/* SPDX-License-Identifier: MIT */
/* The migration benchmark's network tool (bench/migrate):
 *   tcpcopy recv PORT        accepts one connection on 127.0.0.1, copies it to stdout
 *   tcpcopy send HOST PORT   copies stdin to HOST:PORT
 *   tcpcopy bound GIB        the loopback's own bound: GIB sent through one
 *                            TCP connection, prints GB/s
 * The copy is the three-step baseline's "copy"; the bound is what the
 * network gives one stream, measured beside it. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BUF (4u << 20)

static int die(const char *what)
{
	fprintf(stderr, "tcpcopy: %s: %s\n", what, strerror(errno));
	exit(1);
}

static int copy(int in, int out)
{
	static char buf[BUF];
	ssize_t n;

	while ((n = read(in, buf, sizeof(buf))) > 0)
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(out, buf + off, n - off);
			if (w < 0)
				return die("write");
			off += w;
		}
	return n < 0 ? die("read") : 0;
}

static int listen_on(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 1) < 0)
		die("listen");
	return fd;
}

static int connect_to(const char *host, int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || inet_pton(AF_INET, host, &a.sin_addr) != 1)
		die("address");
	for (int i = 0; connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0; i++)
		if (i == 100)
			die("connect");
		else
			usleep(50000);
	return fd;
}

static void *drain(void *arg)
{
	static char buf[BUF];
	int fd = accept(*(int *)arg, NULL, NULL);

	if (fd < 0)
		die("accept");
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	close(fd);
	return NULL;
}

static int bound(double gib)
{
	static char buf[BUF];
	int lfd = listen_on(7079), fd;
	unsigned long long total = (unsigned long long)(gib * (1ull << 30)), sent = 0;
	struct timespec t0, t1;
	pthread_t reader;

	memset(buf, 0x5a, sizeof(buf));
	pthread_create(&reader, NULL, drain, &lfd);
	fd = connect_to("127.0.0.1", 7079);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (sent < total) {
		ssize_t w = write(fd, buf, sizeof(buf));
		if (w < 0)
			die("write");
		sent += w;
	}
	close(fd);
	pthread_join(reader, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("%.2f\n", sent / ((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9) / 1e9);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "recv")) {
		int lfd = listen_on(atoi(argv[2])), fd = accept(lfd, NULL, NULL);
		return fd < 0 ? die("accept") : copy(fd, 1);
	}
	if (argc == 4 && !strcmp(argv[1], "send"))
		return copy(0, connect_to(argv[2], atoi(argv[3])));
	if (argc == 3 && !strcmp(argv[1], "bound"))
		return bound(atof(argv[2]));
	fprintf(stderr, "usage: tcpcopy recv PORT | send HOST PORT | bound GIB\n");
	return 2;
}
