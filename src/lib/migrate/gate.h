/* SPDX-License-Identifier: MIT */
/* The receiver's gate: connections are accepted and handshaken side by
 * side, each within its own deadline, so that no peer without the key (an
 * idle connection, a port scan, garbage) delays or blocks one that has it.
 * Peers that pass wait in a short queue for the receiver, which serves
 * them one at a time. Internal to the library. */
#ifndef STASIS_GATE_H
#define STASIS_GATE_H

#include "error.h"
#include "tls.h"

/* Handshakes under way at once; a connection beyond them is closed at once. */
#define GATE_MAX_HANDSHAKES 32
/* Authenticated peers waiting for the receiver; more are closed. */
#define GATE_MAX_READY 4

struct gate;

/* Start accepting on lfd (the gate does not own it). */
int gate_start(int lfd, const struct tls_key *key, struct gate **out, struct stasis_error **err);

/* The next authenticated peer, waiting at most ms: 1 with *ch, or 1 with
 * *ch NULL and *failure set for a connection that failed its handshake
 * (to report; the caller frees it), 0 when nothing came, -EINTR on a
 * request to stop. */
int gate_next(struct gate *g, int ms, struct tls_channel **ch, struct stasis_error **failure);

/* Stops accepting, waits for the handshakes under way (each ends within
 * its deadline) and closes the peers still waiting. */
void gate_stop(struct gate *g);

#endif
