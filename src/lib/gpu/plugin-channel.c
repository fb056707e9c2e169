/* SPDX-License-Identifier: MIT */
#include "plugin-channel.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "lock.h"
#include "plugin-wire.h"
#include "util.h"

struct plugin_channel {
	const struct plugin_channel_ops *ops;
	void *ctx;
	int listen_fd;
	int stop_pipe[2];
	pthread_t thread;
	char path[108];
	int worked;		    /* requests that did GPU work */
	struct stasis_error *error; /* the first failure */
	int result;
};

/* "pause ROOT", "checkpoint ROOT", "finish RESULT" (a dump) or "resume
 * restore PID..." (a restore), the numbers into *pids. */
static int parse_request(char *msg, struct plugin_request *req, pid_t **pids)
{
	static const struct {
		const char *word;
		enum plugin_step step;
	} steps[] = {{"resume restore", PLUGIN_STEP_RESTORE},
		     {"pause", PLUGIN_STEP_PAUSE},
		     {"checkpoint", PLUGIN_STEP_CHECKPOINT},
		     {"finish", PLUGIN_STEP_FINISH}};
	size_t n = 0, cap = 0, skip = 0;
	char *save = NULL, *word;

	memset(req, 0, sizeof(*req));
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]) && !skip; i++) {
		size_t len = strlen(steps[i].word);

		if (strncmp(msg, steps[i].word, len) == 0 && (msg[len] == ' ' || !msg[len])) {
			req->step = steps[i].step;
			skip = len;
		}
	}
	if (!skip)
		return -EPROTO;
	for (word = strtok_r(msg + skip, " ", &save); word; word = strtok_r(NULL, " ", &save)) {
		pid_t *bigger = grow_array(*pids, n, &cap, sizeof(*bigger), 64);

		if (!bigger)
			return -ENOMEM;
		*pids = bigger;
		(*pids)[n++] = (pid_t)atoi(word);
	}
	req->pids = *pids;
	req->npids = n;
	return 0;
}

const char *plugin_step_name(enum plugin_step step)
{
	switch (step) {
	case PLUGIN_STEP_PAUSE:
		return "lock";
	case PLUGIN_STEP_CHECKPOINT:
		return "checkpoint";
	case PLUGIN_STEP_FINISH:
		return "resume";
	case PLUGIN_STEP_RESTORE:
		break;
	}
	return "restore";
}

static void keep_error(struct plugin_channel *ch, int r, struct stasis_error *e)
{
	if (ch->result == 0) {
		ch->result = r;
		ch->error = e;
	} else
		stasis_error_free(e);
}

static char *wake_message(const pid_t *tids, size_t n)
{
	size_t cap = 8 + n * 12, len;
	char *msg = malloc(cap);

	if (!msg)
		return NULL;
	len = (size_t)snprintf(msg, cap, "wake");
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(msg + len, cap - len, " %d", (int)tids[i]);
	return msg;
}

static void fail_message(int fd, const struct stasis_error *e)
{
	_cleanup_free_ char *text = e ? stasis_error_format(e) : NULL;
	char msg[2048];

	snprintf(msg, sizeof(msg), "fail %s", text ? text : "unknown");
	wire_say(fd, msg);
}

/* One conversation: which threads, the go-ahead, the GPU work, the answer.
 * false when the plugin said nothing (it closed its end). */
static bool serve(struct plugin_channel *ch, int fd)
{
	_cleanup_free_ char *buf = malloc(WIRE_MAX_MESSAGE), *wake = NULL;
	_cleanup_free_ pid_t *pids = NULL, *tids = NULL;
	struct stasis_error *e = NULL;
	struct plugin_request req;
	size_t ntids = 0;
	int r;

	if (!buf || wire_hear(fd, buf, WIRE_MAX_MESSAGE) < 0)
		return false;
	r = parse_request(buf, &req, &pids);
	if (r < 0)
		r = stasis_error_set(&e, -r, STASIS_DOMAIN_CRIU, 0,
				     "stasis's CRIU plugin sent a message stasis does not know");
	if (r == 0)
		r = ch->ops->threads(ch->ctx, &req, &tids, &ntids, &e);
	if (r < 0) {
		fail_message(fd, e);
		keep_error(ch, r, e);
		return true;
	}
	wake = wake_message(tids, ntids);
	/* No thread to wake: nothing more to do (the lock is done). */
	if (!wake || wire_say(fd, wake) < 0 || ntids == 0)
		return true;
	if (wire_hear(fd, buf, WIRE_MAX_MESSAGE) < 0) {
		r = stasis_error_set(&e, EPIPE, STASIS_DOMAIN_CRIU, 0,
				     "CRIU went away before the GPU %s",
				     plugin_step_name(req.step));
		keep_error(ch, r, e);
		return false;
	}
	/* An abort waits for no answer: the next conversation may follow on
	 * the same socket (the plugin's helper). */
	if (strncmp(buf, "go", 2) != 0) {
		r = stasis_error_set(&e, EIO, STASIS_DOMAIN_CRIU, 0,
				     "CRIU could not wake the CUDA restore threads (%s)", buf);
		keep_error(ch, r, e);
		return true;
	}
	r = ch->ops->resume(ch->ctx, &req, &e);
	if (r < 0) {
		fail_message(fd, e);
		keep_error(ch, r, e);
		return true;
	}
	ch->worked++;
	wire_say(fd, "ok");
	return true;
}

static void *serve_thread(void *opaque)
{
	struct plugin_channel *ch = opaque;
	struct pollfd fds[2] = {{.fd = ch->listen_fd, .events = POLLIN},
				{.fd = ch->stop_pipe[0], .events = POLLIN}};

	for (;;) {
		int fd;

		if (poll(fds, 2, -1) < 0 && errno != EINTR)
			break;
		if (fds[1].revents)
			break;
		if (!(fds[0].revents & POLLIN))
			continue;
		fd = accept4(ch->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		serve(ch, fd);
		close(fd);
	}
	return NULL;
}

int plugin_channel_serve_fd(const struct plugin_channel_ops *ops, void *ctx, int fd,
			    struct stasis_error **err)
{
	struct plugin_channel ch = {.ops = ops, .ctx = ctx, .listen_fd = -1};

	while (serve(&ch, fd))
		;
	if (ch.error) {
		if (err) {
			stasis_error_free(*err);
			*err = ch.error;
		} else
			stasis_error_free(ch.error);
	}
	return ch.result < 0 ? ch.result : ch.worked;
}

const char *plugin_channel_socket(const struct plugin_channel *ch)
{
	return ch->path;
}

/* A name no other channel of any process has while it lives. */
static void channel_path(char *path, size_t len)
{
	static atomic_uint made;

	snprintf(path, len, "%s/plugin-%d-%u.sock", stasis_run_dir(), (int)getpid(),
		 atomic_fetch_add(&made, 1));
}

static int listen_at(struct plugin_channel *ch, struct stasis_error **err)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};

	channel_path(ch->path, sizeof(ch->path));
	if (strlen(ch->path) >= sizeof(addr.sun_path) - 1)
		return stasis_error_errno(err, ENAMETOOLONG, "socket path %s is too long",
					  ch->path);
	strcpy(addr.sun_path, ch->path);
	unlink(ch->path);
	ch->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (ch->listen_fd < 0 || bind(ch->listen_fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
	    listen(ch->listen_fd, 4) < 0)
		return stasis_error_errno(err, errno, "listening on %s: %s", ch->path,
					  strerror(errno));
	return 0;
}

int plugin_channel_open(const struct plugin_channel_ops *ops, void *ctx,
			struct plugin_channel **out, struct stasis_error **err)
{
	struct plugin_channel *ch = calloc(1, sizeof(*ch));
	int r;

	if (!ch)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	ch->ops = ops;
	ch->ctx = ctx;
	ch->listen_fd = ch->stop_pipe[0] = ch->stop_pipe[1] = -1;
	r = listen_at(ch, err);
	if (r == 0 && pipe2(ch->stop_pipe, O_CLOEXEC) < 0)
		r = stasis_error_errno(err, errno, "pipe: %s", strerror(errno));
	if (r == 0 && pthread_create(&ch->thread, NULL, serve_thread, ch) != 0)
		r = stasis_error_errno(err, EAGAIN, "cannot start a thread");
	if (r < 0) {
		closep(&ch->listen_fd);
		closep(&ch->stop_pipe[0]);
		closep(&ch->stop_pipe[1]);
		unlink(ch->path);
		free(ch);
		return r;
	}
	*out = ch;
	return 0;
}

int plugin_channel_close(struct plugin_channel *ch, struct stasis_error **err)
{
	int r;

	if (!ch)
		return 0;
	if (write(ch->stop_pipe[1], "x", 1) < 0) {
		/* the pipe is ours and empty: this cannot fail */
	}
	pthread_join(ch->thread, NULL);
	close(ch->listen_fd);
	close(ch->stop_pipe[0]);
	close(ch->stop_pipe[1]);
	unlink(ch->path);
	r = ch->result < 0 ? ch->result : ch->worked;
	if (ch->error) {
		if (err) {
			stasis_error_free(*err);
			*err = ch->error;
		} else
			stasis_error_free(ch->error);
	}
	free(ch);
	return r;
}
