/* SPDX-License-Identifier: MIT */
#include "message.h"

#include <errno.h>
#include <string.h>

#include "migrate.h"
#include "stasis.h"
#include "util.h"

#define WAIT_STEP_MS 100

int msg_send_json(struct tls_channel *ch, uint8_t type, json_object *o)
{
	const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
	int r = tls_send(ch, type, 0, text, strlen(text));

	json_object_put(o);
	return r;
}

void msg_send_refuse(struct tls_channel *ch, const struct stasis_error *e)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "message", json_object_new_string(e ? e->message : "failed"));
	if (e && e->hint)
		json_object_object_add(o, "hint", json_object_new_string(e->hint));
	msg_send_json(ch, WIRE_REFUSE, o);
}

json_object *msg_json(const unsigned char *buf, uint32_t len)
{
	json_tokener *tok = json_tokener_new();
	json_object *o = tok ? json_tokener_parse_ex(tok, (const char *)buf, (int)len) : NULL;

	json_tokener_free(tok);
	if (o && !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		o = NULL;
	}
	return o;
}

static int refused(const char *who, const unsigned char *buf, uint32_t len,
		   struct stasis_error **err)
{
	json_object *o = msg_json(buf, len), *msg = NULL, *hint = NULL;

	json_object_object_get_ex(o, "message", &msg);
	json_object_object_get_ex(o, "hint", &hint);
	stasis_error_set(err, ECANCELED, STASIS_DOMAIN_SYSTEM, 0, "%s: %s", who,
			 msg ? json_object_get_string(msg) : "refused without a reason");
	if (hint)
		stasis_error_hint(err, "%s", json_object_get_string(hint));
	json_object_put(o);
	return -ECANCELED;
}

int msg_unexpected(const char *who, const struct wire_header *h, struct stasis_error **err)
{
	stasis_error_set(err, EPROTO, STASIS_DOMAIN_SYSTEM, 0, "%s sent message %u out of turn",
			 who, (unsigned int)h->type);
	return stasis_error_hint(err, "run the same stasis version on both ends");
}

int msg_recv(struct tls_channel *ch, const char *who, int timeout_ms, struct wire_header *h,
	     unsigned char *buf, struct stasis_error **err)
{
	uint64_t deadline = now_usec() + (uint64_t)timeout_ms * 1000u;
	int r = 0;

	while (r == 0) {
		if (stasis_interrupted())
			return stasis_error_set(err, EINTR, STASIS_DOMAIN_SYSTEM, EINTR,
						"interrupted by a signal while waiting for %s",
						who);
		if (now_usec() > deadline)
			return stasis_error_set(err, ETIMEDOUT, STASIS_DOMAIN_SYSTEM, ETIMEDOUT,
						"%s did not answer in %d s", who,
						timeout_ms / 1000);
		r = tls_wait(ch, WAIT_STEP_MS);
		if (r == -EINTR)
			r = 0;
	}
	if (r > 0)
		r = tls_recv(ch, h, buf, WIRE_MAX_PAYLOAD);
	if (r == -EINTR)
		return stasis_error_set(err, EINTR, STASIS_DOMAIN_SYSTEM, EINTR,
					"interrupted by a signal while %s was sending", who);
	if (r == -ETIMEDOUT)
		return stasis_error_set(err, ETIMEDOUT, STASIS_DOMAIN_SYSTEM, ETIMEDOUT,
					"%s stopped sending in the middle of a message", who);
	if (r == -EPROTO)
		return stasis_error_set(err, EPROTO, STASIS_DOMAIN_SYSTEM, 0,
					"%s sent what is not stasis's protocol", who);
	if (r < 0)
		return stasis_error_set(err, EPIPE, STASIS_DOMAIN_SYSTEM, -r,
					"%s closed the connection", who);
	if (h->type == WIRE_REFUSE)
		return refused(who, buf, h->len, err);
	return 0;
}

char *stasis_migrate_json(const struct manifest *m, const struct stasis_migrate_stats *st)
{
	_cleanup_free_ char *base = stasis_stats_json(m);
	json_object *root = base ? json_tokener_parse(base) : NULL;
	char *text;

	if (!root)
		return NULL;
	json_object_object_add(root, "raw_bytes", json_object_new_uint64(st->raw_bytes));
	json_object_object_add(root, "wire_bytes", json_object_new_uint64(st->wire_bytes));
	if (st->pause_us)
		json_object_object_add(root, "pause_us", json_object_new_uint64(st->pause_us));
	if (st->restored_pid)
		json_object_object_add(root, "restored_pid", json_object_new_int(st->restored_pid));
	json_object_object_add(root, "peer", json_object_new_string(st->peer));
	if (st->container[0])
		json_object_object_add(root, "container", json_object_new_string(st->container));
	if (st->gpus[0])
		json_object_object_add(root, "gpus", json_object_new_string(st->gpus));
	if (st->pages[0])
		json_object_object_add(root, "pages", json_object_new_string(st->pages));
	text = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN));
	json_object_put(root);
	return text;
}
