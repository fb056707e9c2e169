/* SPDX-License-Identifier: MIT */
/* One message each way over the plugin channel's SOCK_SEQPACKET socket:
 * shared by stasis (plugin-channel.c) and its CRIU plugin (gpu-resume.c),
 * which is built apart, hence inline. */
#ifndef STASIS_PLUGIN_WIRE_H
#define STASIS_PLUGIN_WIRE_H

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#define WIRE_MAX_MESSAGE (256 * 1024)

static inline int wire_say(int fd, const char *msg)
{
	return send(fd, msg, strlen(msg), MSG_NOSIGNAL) < 0 ? -errno : 0;
}

/* The next message into buf, NUL-terminated; -ECONNRESET at the end. */
static inline int wire_hear(int fd, char *buf, size_t len)
{
	ssize_t n;

	do
		n = recv(fd, buf, len - 1, 0);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return n < 0 ? -errno : -ECONNRESET;
	buf[n] = '\0';
	return 0;
}

#endif
