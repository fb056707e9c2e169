/* SPDX-License-Identifier: MIT */
/* The protocol's small messages (JSON payloads) and waiting for them.
 * Internal to the library. */
#ifndef STASIS_MESSAGE_H
#define STASIS_MESSAGE_H

#include <json-c/json.h>

#include "error.h"
#include "tls.h"
#include "wire.h"

/* Send o (consumed) as a message of type. */
int msg_send_json(struct tls_channel *ch, uint8_t type, json_object *o);

/* Tell the peer why this end stops (e's message and hint). */
void msg_send_refuse(struct tls_channel *ch, const struct stasis_error *e);

/* The next message into buf (WIRE_MAX_PAYLOAD bytes), waiting at most
 * timeout_ms (every wait has one), and stopping early on
 * SIGINT/SIGTERM. A REFUSE becomes the error it carries ("who refused:
 * ..."); so do the peer's end, a timeout and a signal. */
int msg_recv(struct tls_channel *ch, const char *who, int timeout_ms, struct wire_header *h,
	     unsigned char *buf, struct stasis_error **err);

/* A JSON object from a payload, NULL when it is none. */
json_object *msg_json(const unsigned char *buf, uint32_t len);

/* An unexpected message type, as an error. */
int msg_unexpected(const char *who, const struct wire_header *h, struct stasis_error **err);

#endif
