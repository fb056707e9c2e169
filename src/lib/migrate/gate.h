/* SPDX-License-Identifier: MIT */
/* The receiver's gate: one thread watches the listening socket and every
 * connection that has not yet shown the key, and runs their handshakes in
 * steps that never wait, so that a connection without the key (idle, a
 * port scan, garbage, a flood of them) costs a descriptor and a few bytes
 * until it speaks, and never a thread or a place that a peer with the key
 * would need. Each connection has its deadlines; each address, and the
 * gate, a bound, beyond which a new connection takes the place of an old
 * one that has sent nothing. Peers that pass wait in a short queue for
 * the receiver, which serves them one at a time. Internal to the
 * library. */
#ifndef STASIS_GATE_H
#define STASIS_GATE_H

#include "error.h"
#include "tls.h"

/* Connections without the key yet, from one address (an IPv6 address's
 * /64), and in all. */
#define GATE_PER_SOURCE 8
#define GATE_MAX_PENDING 256
/* A connection that sends nothing this long after it is accepted is
 * dropped; its whole handshake has TLS_SERVER_HANDSHAKE_MS. */
#define GATE_FIRST_BYTES_MS 1000
/* Authenticated peers waiting for the receiver; more are closed. */
#define GATE_MAX_READY 4

struct gate;

/* Start accepting on lfd (the gate does not own it; it makes it
 * non-blocking). */
int gate_start(int lfd, const struct tls_key *key, struct gate **out, struct stasis_error **err);

/* The next authenticated peer, waiting at most ms: 1 with *ch, or 1 with
 * *ch NULL and *failure set for a report of connections turned away (to
 * report; the caller frees it), 0 when nothing came, -EINTR on a request
 * to stop. */
int gate_next(struct gate *g, int ms, struct tls_channel **ch, struct stasis_error **failure);

/* Stops accepting, closes the connections under way and the peers still
 * waiting. */
void gate_stop(struct gate *g);

#endif
