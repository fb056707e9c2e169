/* SPDX-License-Identifier: MIT */
/* The socket through which stasis's CRIU plugin, running inside CRIU while
 * CRIU holds the tree, asks stasis to do the GPU work (criu-plugin/
 * plugin-talk.c has the other end and the messages): the lock before CRIU
 * freezes a tree and the checkpoint once it is frozen, at a dump; the
 * restore before CRIU lets a restored tree run. It is served by a thread of
 * its own for as long as CRIU runs; its path reaches the plugin in
 * $STASIS_PLUGIN_SOCKET, through runc as well. */
#ifndef STASIS_PLUGIN_CHANNEL_H
#define STASIS_PLUGIN_CHANNEL_H

#include <stddef.h>
#include <sys/types.h>

#include "error.h"

enum plugin_step {
	PLUGIN_STEP_PAUSE,	/* lock, before CRIU seizes the tree: "pause ROOT" */
	PLUGIN_STEP_CHECKPOINT, /* once it is frozen: "checkpoint ROOT" */
	PLUGIN_STEP_FINISH,	/* before CRIU lets it go: "finish RESULT" */
	PLUGIN_STEP_RESTORE,	/* "resume restore PID...", the restored tree */
};

struct plugin_request {
	enum plugin_step step;
	/* the root, CRIU's result (finish), or the restored tree, root first */
	const pid_t *pids;
	size_t npids;
};

/* "lock", "checkpoint", "restore": for messages. */
const char *plugin_step_name(enum plugin_step step);

struct plugin_channel_ops {
	/* The restore threads to wake; none when there is nothing more to
	 * do (the lock is done here). */
	int (*threads)(void *ctx, const struct plugin_request *req, pid_t **tids, size_t *ntids,
		       struct stasis_error **err);
	/* The GPU work, with those threads awake. */
	int (*resume)(void *ctx, const struct plugin_request *req, struct stasis_error **err);
};

struct plugin_channel;

/* Where ch listens: a socket of its own, so that each operation of a
 * process has one; its CRIU gets it as STASIS_PLUGIN_SOCKET. */
const char *plugin_channel_socket(const struct plugin_channel *ch);

int plugin_channel_open(const struct plugin_channel_ops *ops, void *ctx,
			struct plugin_channel **out, struct stasis_error **err);

/* Serve the conversations of one plugin on fd, one after another, until
 * it closes its end (the plugin's own helper, where no stasis started
 * CRIU). Returns as plugin_channel_close. */
int plugin_channel_serve_fd(const struct plugin_channel_ops *ops, void *ctx, int fd,
			    struct stasis_error **err);

/* Stop serving. Returns how many requests did GPU work, or the -status of
 * the first that failed, whose error moves to *err. */
int plugin_channel_close(struct plugin_channel *ch, struct stasis_error **err);

#endif
