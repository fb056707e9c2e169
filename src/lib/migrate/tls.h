/* SPDX-License-Identifier: MIT */
/* The migration's channel: TCP with TLS authenticated by a pre-shared key
 * (GnuTLS, PSK with ephemeral Diffie-Hellman, TLS 1.3 or 1.2). The only
 * file that knows about GnuTLS. A peer without the key fails the handshake
 * before either end reads a message. Internal to the library. */
#ifndef STASIS_TLS_H
#define STASIS_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "wire.h"

struct tls_key {
	unsigned char *data;
	size_t len;
};

struct tls_channel;

/* Connect to "HOST:PORT" and authenticate with key. */
int tls_connect(const char *addr, const struct tls_key *key, struct tls_channel **out,
		struct stasis_error **err);

/* A listening socket on "ADDR:PORT". */
int tls_listen(const char *addr, int *fd_out, struct stasis_error **err);

/* Accept one connection on lfd and authenticate it with key; an
 * unauthenticated peer is refused (the error says so). Waits at most
 * timeout_ms for a peer when not negative. */
int tls_accept(int lfd, const struct tls_key *key, int timeout_ms, struct tls_channel **out,
	       struct stasis_error **err);

/* The peer's address, for messages. */
const char *tls_peer(const struct tls_channel *ch);

/* Send a message; -EPIPE (and the like) once the peer is gone, -EINTR
 * when a signal arrived and the caller asked to stop (stop_on_signal). */
int tls_send(struct tls_channel *ch, uint8_t type, uint8_t flags, const void *payload, size_t len);
/* Two parts, one message: head then body. */
int tls_send2(struct tls_channel *ch, uint8_t type, uint8_t flags, const void *head, size_t headlen,
	      const void *body, size_t bodylen);

/* Wait up to ms for a message to begin: 1 when one does, 0 when none
 * came, <0 when the peer is gone or a signal came. */
int tls_wait(struct tls_channel *ch, int ms);

/* Receive a message into buf (cap bytes at least WIRE_MAX_PAYLOAD); -EPIPE
 * at the peer's end, -EPROTO for what is not our protocol. */
int tls_recv(struct tls_channel *ch, struct wire_header *h, unsigned char *buf, size_t cap);

/* Ends the session and closes; NULL is allowed. */
void tls_close(struct tls_channel *ch);

#endif
