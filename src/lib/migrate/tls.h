/* SPDX-License-Identifier: MIT */
/* The migration's channel: TCP with TLS authenticated by a pre-shared key
 * (GnuTLS, PSK with ephemeral Diffie-Hellman, TLS 1.3 or 1.2). The only
 * file that knows about GnuTLS's TLS (image-seal.c uses its HMAC). A peer
 * without the key fails the handshake before either end reads a message.
 * Internal to the library. */
#ifndef STASIS_TLS_H
#define STASIS_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

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

/* How long each wait may last (docs/SECURITY.md lists them): a client's
 * handshake; a server's, short, since a peer without the key (or a port
 * scan) holds nothing but its own connection; a send or receive that moves
 * nothing (a peer that stops mid-frame). */
#define TLS_CLIENT_HANDSHAKE_MS 15000
#define TLS_SERVER_HANDSHAKE_MS 5000
#define TLS_IO_TIMEOUT_MS 30000

/* Accept one connection on lfd into *fd (non-blocking until its handshake),
 * its address into *sa (where not NULL) and, as text, into peer; -errno
 * when none was taken. */
int tls_accept_fd(int lfd, int *fd, struct sockaddr_storage *sa, char *peer, size_t len);
/* The server's handshake on an accepted fd (taken: closed on failure),
 * within limit_ms; a peer without the key is refused (the error says so). */
int tls_serve(int fd, const char *peer, const struct tls_key *key, int limit_ms,
	      struct tls_channel **out, struct stasis_error **err);
/* The same handshake in steps that never wait, for a caller that watches
 * many connections at once (the receiver's gate) and bounds each with its
 * own deadline. tls_serve_begin makes the session on an accepted fd (taken:
 * closed on failure). tls_serve_step goes as far as the bytes at hand allow:
 * 1 when the handshake is done (the channel is then as tls_serve gives it),
 * 0 when it waits for the socket (*events: what to poll for), <0 with *err
 * when it failed. A channel that failed or ran out of time goes with
 * tls_drop. */
int tls_serve_begin(int fd, const char *peer, const struct tls_key *key, struct tls_channel **out,
		    struct stasis_error **err);
int tls_serve_step(struct tls_channel *ch, short *events, struct stasis_error **err);
/* The peer's address, for messages. */
const char *tls_peer(const struct tls_channel *ch);

/* Send a message; -EPIPE (and the like) once the peer is gone, -EINTR
 * when a request to stop came (stasis_interrupted), -ETIMEDOUT when the
 * peer took nothing for the channel's timeout. */
int tls_send(struct tls_channel *ch, uint8_t type, uint8_t flags, const void *payload, size_t len);
/* Two parts, one message: head then body. */
int tls_send2(struct tls_channel *ch, uint8_t type, uint8_t flags, const void *head, size_t headlen,
	      const void *body, size_t bodylen);

/* Bytes as they are, outside any message: for tests that play a peer that
 * breaks the protocol (tests/e2e/hostile-peer.c). */
int tls_send_raw(struct tls_channel *ch, const void *bytes, size_t len);
/* Wait up to ms for a message to begin: 1 when one does, 0 when none
 * came, <0 when the peer is gone or a signal came. */
int tls_wait(struct tls_channel *ch, int ms);

/* Receive a message into buf (cap bytes at least WIRE_MAX_PAYLOAD); -EPIPE
 * at the peer's end, -EPROTO for what is not our protocol, -ETIMEDOUT when
 * a begun message stops coming, -EINTR on a request to stop. */
int tls_recv(struct tls_channel *ch, struct wire_header *h, unsigned char *buf, size_t cap);

/* Ends the session and closes; NULL is allowed. */
void tls_close(struct tls_channel *ch);
/* Closes without a word (a handshake that failed or ran out of time);
 * NULL is allowed. */
void tls_drop(struct tls_channel *ch);

#endif
