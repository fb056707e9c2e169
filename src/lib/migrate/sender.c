/* SPDX-License-Identifier: MIT */
#include "sender.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "stasis.h"
#include "util.h"

struct queued_frame {
	uint32_t id;
	unsigned char *buf;
	size_t len;
};

struct frame_sender {
	struct stream_out *stream;
	frame_sender_done_fn done;
	void *ctx;
	struct queued_frame *q; /* a ring of depth */
	size_t depth, head, n;
	bool finishing, dropping, running, sent_any;
	uint64_t idle_usec;
	pthread_mutex_t lock;
	pthread_cond_t changed;
	pthread_t thread;
};

static void send_one(struct frame_sender *fs, const struct queued_frame *f)
{
	char name[32];

	snprintf(name, sizeof(name), "pages-%u.img", f->id);
	/* After a failure stream_out_data sends nothing more; after a signal
	 * the frames are only given back. */
	if (!fs->dropping && !stasis_interrupted())
		stream_out_data(fs->stream, f->id, name, f->buf, f->len);
	fs->done(fs->ctx, f->buf);
}

static void *send_frames(void *arg)
{
	struct frame_sender *fs = arg;

	pthread_mutex_lock(&fs->lock);
	for (;;) {
		struct queued_frame f;
		uint64_t start = now_usec();

		while (!fs->n && !fs->finishing)
			pthread_cond_wait(&fs->changed, &fs->lock);
		/* From the first frame on: before it, CRIU had not begun. */
		if (fs->sent_any)
			fs->idle_usec += now_usec() - start;
		fs->sent_any = true;
		if (!fs->n)
			break;
		f = fs->q[fs->head];
		fs->head = (fs->head + 1) % fs->depth;
		fs->n--;
		pthread_cond_broadcast(&fs->changed);
		pthread_mutex_unlock(&fs->lock);
		send_one(fs, &f);
		pthread_mutex_lock(&fs->lock);
	}
	pthread_mutex_unlock(&fs->lock);
	return NULL;
}

int frame_sender_start(struct stream_out *s, size_t depth, frame_sender_done_fn done, void *ctx,
		       struct frame_sender **out)
{
	struct frame_sender *fs = calloc(1, sizeof(*fs));

	if (!fs || !(fs->q = calloc(depth, sizeof(*fs->q)))) {
		free(fs);
		return -ENOMEM;
	}
	fs->stream = s;
	fs->done = done;
	fs->ctx = ctx;
	fs->depth = depth;
	pthread_mutex_init(&fs->lock, NULL);
	pthread_cond_init(&fs->changed, NULL);
	if (pthread_create(&fs->thread, NULL, send_frames, fs) != 0) {
		frame_sender_free(fs);
		return -EAGAIN;
	}
	fs->running = true;
	*out = fs;
	return 0;
}

void frame_sender_push(struct frame_sender *fs, uint32_t id, unsigned char *buf, size_t len)
{
	pthread_mutex_lock(&fs->lock);
	while (fs->n == fs->depth)
		pthread_cond_wait(&fs->changed, &fs->lock);
	fs->q[(fs->head + fs->n) % fs->depth] = (struct queued_frame){id, buf, len};
	fs->n++;
	pthread_cond_broadcast(&fs->changed);
	pthread_mutex_unlock(&fs->lock);
}

void frame_sender_finish(struct frame_sender *fs, bool send_queued)
{
	if (!fs || !fs->running)
		return;
	pthread_mutex_lock(&fs->lock);
	fs->finishing = true;
	fs->dropping = !send_queued;
	pthread_cond_broadcast(&fs->changed);
	pthread_mutex_unlock(&fs->lock);
	pthread_join(fs->thread, NULL);
	fs->running = false;
}

uint64_t frame_sender_idle_usec(const struct frame_sender *fs)
{
	return fs ? fs->idle_usec : 0;
}

void frame_sender_free(struct frame_sender *fs)
{
	if (!fs)
		return;
	frame_sender_finish(fs, false);
	pthread_cond_destroy(&fs->changed);
	pthread_mutex_destroy(&fs->lock);
	free(fs->q);
	free(fs);
}
