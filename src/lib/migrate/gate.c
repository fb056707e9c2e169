/* SPDX-License-Identifier: MIT */
#include "gate.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stasis.h"
#include "util.h"

#define ACCEPT_STEP_MS 200
/* Failed handshakes kept for the receiver to report; more are counted. */
#define GATE_MAX_FAILURES 16

struct gate {
	int lfd;
	const struct tls_key *key;
	pthread_t acceptor;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t changed;
	bool stop;
	unsigned int handshakes; /* under way */
	struct tls_channel *ready[GATE_MAX_READY];
	size_t nready;
	struct stasis_error *failures[GATE_MAX_FAILURES];
	size_t nfailures;
};

struct handshake {
	struct gate *g;
	int fd;
	char peer[128];
};

static void add_failure(struct gate *g, struct stasis_error *e)
{
	if (g->nfailures < GATE_MAX_FAILURES)
		g->failures[g->nfailures++] = e;
	else
		stasis_error_free(e);
}

static void *handshake_thread(void *arg)
{
	struct handshake *h = arg;
	struct gate *g = h->g;
	struct tls_channel *ch = NULL;
	struct stasis_error *e = NULL;
	int r = tls_serve(h->fd, h->peer, g->key, TLS_SERVER_HANDSHAKE_MS, &ch, &e);

	pthread_mutex_lock(&g->lock);
	if (r == 0 && !g->stop && g->nready < GATE_MAX_READY) {
		g->ready[g->nready++] = TAKE_PTR(ch);
	} else if (r == 0) {
		stasis_error_set(&e, EBUSY, STASIS_DOMAIN_SYSTEM, 0,
				 "%s was turned away: %d migrations wait already", h->peer,
				 GATE_MAX_READY);
		add_failure(g, TAKE_PTR(e));
	} else if (e && !g->stop) {
		add_failure(g, TAKE_PTR(e));
	}
	g->handshakes--;
	pthread_cond_broadcast(&g->changed);
	pthread_mutex_unlock(&g->lock);
	tls_close(ch);
	stasis_error_free(e);
	free(h);
	return NULL;
}

/* A handshake of its own for the connection on fd, or none: then the
 * connection is closed (too many at once, or no thread to be had). */
static void start_handshake(struct gate *g, int fd, const char *peer)
{
	struct handshake *h = calloc(1, sizeof(*h));
	pthread_attr_t attr;
	pthread_t t;
	bool started = false;

	pthread_mutex_lock(&g->lock);
	if (h && g->handshakes < GATE_MAX_HANDSHAKES) {
		*h = (struct handshake){.g = g, .fd = fd};
		snprintf(h->peer, sizeof(h->peer), "%s", peer);
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		started = pthread_create(&t, &attr, handshake_thread, h) == 0;
		pthread_attr_destroy(&attr);
		g->handshakes += started;
	}
	pthread_mutex_unlock(&g->lock);
	if (!started) {
		close(fd);
		free(h);
	}
}

static bool stopping(struct gate *g)
{
	bool stop;

	pthread_mutex_lock(&g->lock);
	stop = g->stop;
	pthread_mutex_unlock(&g->lock);
	return stop;
}

static void *accept_thread(void *arg)
{
	struct gate *g = arg;

	while (!stopping(g)) {
		struct pollfd p = {.fd = g->lfd, .events = POLLIN};
		char peer[128];
		int fd;

		if (poll(&p, 1, ACCEPT_STEP_MS) <= 0)
			continue;
		if (tls_accept_fd(g->lfd, &fd, NULL, peer, sizeof(peer)) == 0)
			start_handshake(g, fd, peer);
	}
	return NULL;
}

int gate_start(int lfd, const struct tls_key *key, struct gate **out, struct stasis_error **err)
{
	struct gate *g = calloc(1, sizeof(*g));

	if (!g)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	g->lfd = lfd;
	g->key = key;
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->changed, NULL);
	if (pthread_create(&g->acceptor, NULL, accept_thread, g) != 0) {
		gate_stop(g);
		return stasis_error_errno(err, EAGAIN, "starting the receiver's accept thread");
	}
	g->started = true;
	*out = g;
	return 0;
}

int gate_next(struct gate *g, int ms, struct tls_channel **ch, struct stasis_error **failure)
{
	struct timespec until;
	int r = 0;

	*ch = NULL;
	*failure = NULL;
	deadline_in_usec(&until, (uint64_t)ms * 1000u);
	pthread_mutex_lock(&g->lock);
	while (!g->nready && !g->nfailures && !stasis_interrupted() &&
	       pthread_cond_timedwait(&g->changed, &g->lock, &until) == 0)
		;
	if (g->nready) {
		*ch = g->ready[0];
		memmove(g->ready, g->ready + 1, --g->nready * sizeof(g->ready[0]));
		r = 1;
	} else if (g->nfailures) {
		*failure = g->failures[0];
		memmove(g->failures, g->failures + 1, --g->nfailures * sizeof(g->failures[0]));
		r = 1;
	} else if (stasis_interrupted()) {
		r = -EINTR;
	}
	pthread_mutex_unlock(&g->lock);
	return r;
}

void gate_stop(struct gate *g)
{
	if (!g)
		return;
	pthread_mutex_lock(&g->lock);
	g->stop = true;
	pthread_mutex_unlock(&g->lock);
	if (g->started)
		pthread_join(g->acceptor, NULL);
	/* Each handshake ends within its deadline; none waits on the gate. */
	pthread_mutex_lock(&g->lock);
	while (g->handshakes)
		pthread_cond_wait(&g->changed, &g->lock);
	pthread_mutex_unlock(&g->lock);
	for (size_t i = 0; i < g->nready; i++)
		tls_close(g->ready[i]);
	for (size_t i = 0; i < g->nfailures; i++)
		stasis_error_free(g->failures[i]);
	pthread_mutex_destroy(&g->lock);
	pthread_cond_destroy(&g->changed);
	free(g);
}
