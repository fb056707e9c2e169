/* SPDX-License-Identifier: MIT */
#include "image-pipe.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* How long the reader sleeps in poll before it looks whether to stop. */
#define POLL_MS 50

struct page_pipe {
	int fd;
	bool ended; /* CRIU closed it and all of it was read */
};

struct page_pipes {
	struct page_pipe *pipes;
	unsigned int count;
	size_t frame_len;
	unsigned char **all, **free_bufs; /* every frame; the free ones, a stack */
	size_t nbuffers, nfree;
	pthread_mutex_t lock;
	pthread_cond_t freed;
	pthread_t thread;
	bool running;
	atomic_bool stopping;
	uint64_t stall_usec;
	page_pipes_deliver_fn deliver;
	void *ctx;
};

/* A pipe with the name pages-ID.img in the folder: a FIFO opened and
 * unlinked, reached through our /proc/PID/fd link. */
static int open_pipe(struct page_pipes *pp, int stagefd, unsigned int id)
{
	/* As large as the kernel lets: the reader takes this much per read. */
	static const int sizes[] = {4 << 20, 1 << 20};
	char fifo[32], name[32], target[64];
	int fd;

	snprintf(fifo, sizeof(fifo), ".pipe-%u", id);
	snprintf(name, sizeof(name), "pages-%u.img", id);
	if (mkfifoat(stagefd, fifo, 0600) < 0)
		return -errno;
	/* Opened before any writer: poll says POLLHUP only once CRIU has
	 * opened and closed it, never for a pipe CRIU did not use. */
	fd = openat(stagefd, fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	unlinkat(stagefd, fifo, 0);
	if (fd < 0)
		return -errno;
	pp->pipes[id - 1].fd = fd;
	for (size_t k = 0; k < ARRAY_SIZE(sizes); k++)
		if (fcntl(fd, F_SETPIPE_SZ, sizes[k]) >= 0)
			break;
	snprintf(target, sizeof(target), "/proc/%d/fd/%d", (int)getpid(), fd);
	return symlinkat(target, stagefd, name) < 0 ? -errno : 0;
}

static unsigned char *take_buffer(struct page_pipes *pp)
{
	unsigned char *buf;
	uint64_t start = 0;

	pthread_mutex_lock(&pp->lock);
	if (!pp->nfree)
		start = now_usec();
	while (!pp->nfree)
		pthread_cond_wait(&pp->freed, &pp->lock);
	buf = pp->free_bufs[--pp->nfree];
	if (start)
		pp->stall_usec += now_usec() - start;
	pthread_mutex_unlock(&pp->lock);
	return buf;
}

void page_pipes_give_back(struct page_pipes *pp, unsigned char *buf)
{
	pthread_mutex_lock(&pp->lock);
	pp->free_bufs[pp->nfree++] = buf;
	pthread_cond_signal(&pp->freed);
	pthread_mutex_unlock(&pp->lock);
}

/* A pipe that has something to read or its end, within ms: prefer when it
 * is one of them, else the first; -1 for none. */
static int ready_pipe(struct page_pipes *pp, struct pollfd *fds, unsigned int *index, int prefer,
		      int ms)
{
	unsigned int n = 0;
	int first = -1;

	for (unsigned int i = 0; i < pp->count; i++) {
		if (pp->pipes[i].ended)
			continue;
		fds[n] = (struct pollfd){.fd = pp->pipes[i].fd, .events = POLLIN};
		index[n++] = i;
	}
	if (poll(fds, n, ms) <= 0)
		return -1;
	for (unsigned int k = 0; k < n; k++) {
		if (!fds[k].revents)
			continue;
		if ((int)index[k] == prefer)
			return prefer;
		if (first < 0)
			first = (int)index[k];
	}
	return first;
}

/* Fills frames from the pipe CRIU writes, and hands on each one when it is
 * full, when the file ends, or when CRIU goes on to another file. */
static void *read_pipes(void *arg)
{
	struct page_pipes *pp = arg;
	_cleanup_free_ struct pollfd *fds = calloc(pp->count, sizeof(*fds));
	_cleanup_free_ unsigned int *index = calloc(pp->count, sizeof(*index));
	unsigned char *buf = NULL;
	size_t got = 0;
	int cur = -1;

	if (!fds || !index)
		abort();
	for (;;) {
		bool stopping = atomic_load(&pp->stopping);
		int i = ready_pipe(pp, fds, index, cur, stopping ? 0 : POLL_MS);
		ssize_t n;

		if (i < 0) {
			/* Stopping: CRIU is done, and every pipe it used has
			 * its end to read until it is read. */
			if (stopping)
				break;
			continue;
		}
		if (i != cur && got) {
			pp->deliver(pp->ctx, (unsigned int)cur + 1, TAKE_PTR(buf), got, false);
			got = 0;
		}
		cur = i;
		if (!buf)
			buf = take_buffer(pp);
		n = read(pp->pipes[i].fd, buf + got, pp->frame_len - got);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n > 0) {
			got += (size_t)n;
			if (got == pp->frame_len) {
				pp->deliver(pp->ctx, (unsigned int)i + 1, TAKE_PTR(buf), got,
					    false);
				got = 0;
			}
			continue;
		}
		/* A pipe has no read errors: 0 is its end. */
		pp->pipes[i].ended = true;
		pp->deliver(pp->ctx, (unsigned int)i + 1, got ? TAKE_PTR(buf) : NULL, got, true);
		got = 0;
		cur = -1;
	}
	if (buf)
		page_pipes_give_back(pp, buf);
	return NULL;
}

int page_pipes_start(int stagefd, unsigned int count, size_t nbuffers, size_t frame_len,
		     page_pipes_deliver_fn deliver, void *ctx, struct page_pipes **out)
{
	struct page_pipes *pp = calloc(1, sizeof(*pp));
	int r = 0;

	if (!pp)
		return -ENOMEM;
	pthread_mutex_init(&pp->lock, NULL);
	pthread_cond_init(&pp->freed, NULL);
	pp->frame_len = frame_len;
	pp->deliver = deliver;
	pp->ctx = ctx;
	pp->pipes = calloc(count, sizeof(*pp->pipes));
	pp->all = calloc(nbuffers, sizeof(*pp->all));
	pp->free_bufs = calloc(nbuffers, sizeof(*pp->free_bufs));
	if (!pp->pipes || !pp->all || !pp->free_bufs)
		r = -ENOMEM;
	for (; r == 0 && pp->nbuffers < nbuffers; pp->nbuffers++) {
		pp->all[pp->nbuffers] = malloc(frame_len);
		if (!pp->all[pp->nbuffers])
			r = -ENOMEM;
		pp->free_bufs[pp->nfree++] = pp->all[pp->nbuffers];
	}
	for (; r == 0 && pp->count < count; pp->count++) {
		pp->pipes[pp->count].fd = -1;
		r = open_pipe(pp, stagefd, pp->count + 1);
	}
	if (r == 0 && pthread_create(&pp->thread, NULL, read_pipes, pp) != 0)
		r = -EAGAIN;
	if (r < 0) {
		page_pipes_free(pp);
		return r;
	}
	pp->running = true;
	*out = pp;
	return 0;
}

void page_pipes_stop(struct page_pipes *pp)
{
	if (!pp || !pp->running)
		return;
	atomic_store(&pp->stopping, true);
	pthread_join(pp->thread, NULL);
	pp->running = false;
}

uint64_t page_pipes_stall_usec(const struct page_pipes *pp)
{
	return pp ? pp->stall_usec : 0;
}

void page_pipes_free(struct page_pipes *pp)
{
	if (!pp)
		return;
	page_pipes_stop(pp);
	for (unsigned int i = 0; i < pp->count; i++)
		if (pp->pipes[i].fd >= 0)
			close(pp->pipes[i].fd);
	for (size_t i = 0; i < pp->nbuffers; i++)
		free(pp->all[i]);
	free(pp->pipes);
	free(pp->all);
	free(pp->free_bufs);
	pthread_cond_destroy(&pp->freed);
	pthread_mutex_destroy(&pp->lock);
	free(pp);
}
