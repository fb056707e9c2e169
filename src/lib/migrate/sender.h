/* SPDX-License-Identifier: MIT */
/* The frames of CRIU's pages images sent by a thread of their own, in the
 * order they were queued, so that reading CRIU's pipes (and CRIU's
 * writing into them) goes on while a frame is compressed, encrypted and
 * sent, where one thread did each in turn. Internal to the library. */
#ifndef STASIS_SENDER_H
#define STASIS_SENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stream.h"

struct frame_sender;

/* Each frame goes back through done(ctx, buf) once it is sent, or dropped
 * once the stream has failed or a signal came. */
typedef void (*frame_sender_done_fn)(void *ctx, unsigned char *buf);

/* depth: the most frames queued at once (the frames there are). */
int frame_sender_start(struct stream_out *s, size_t depth, frame_sender_done_fn done, void *ctx,
		       struct frame_sender **out);
/* Queues len bytes of pages-ID.img; waits while depth frames are queued. */
void frame_sender_push(struct frame_sender *fs, uint32_t id, unsigned char *buf, size_t len);
/* Sends what is queued (or, without send_queued, gives it back unsent)
 * and stops the thread; the stream is the caller's again. */
void frame_sender_finish(struct frame_sender *fs, bool send_queued);
/* How long the thread waited for frames after the first: the wire was
 * ahead of CRIU. */
uint64_t frame_sender_idle_usec(const struct frame_sender *fs);
void frame_sender_free(struct frame_sender *fs);

#endif
