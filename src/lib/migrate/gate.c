/* SPDX-License-Identifier: MIT */
#include "gate.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "stasis.h"
#include "util.h"

/* The longest the gate's poll waits: a stop is seen within it. */
#define GATE_STEP_MS 200
/* Connections taken from the listening socket in one turn, before the
 * bytes of those already in are read again. */
#define GATE_ACCEPT_BURST 32
/* Accepting pauses this long when no descriptor is to be had. */
#define GATE_ACCEPT_PAUSE_MS 50
/* Failed handshakes are reported one by one up to this many in a period;
 * the rest, and the connections dropped without a word, are counted and
 * reported in one line at the period's end. */
#define GATE_REPORT_PERIOD_MS 30000
#define GATE_REPORTS_PER_PERIOD 8
/* Reports waiting for the receiver; more are dropped. */
#define GATE_MAX_FAILURES 16

/* A connection that has not shown the key yet: its socket, and its TLS
 * session from its first bytes on. */
struct pending {
	int fd;
	struct tls_channel *ch;
	short events;		  /* what its handshake waits for */
	uint64_t since;		  /* accepted, now_usec() */
	unsigned char source[16]; /* what the per-address bound counts */
	char peer[64];
};

/* Connections turned away in this period without a report of their own. */
struct turned_away {
	uint64_t since;
	unsigned int silent;   /* nothing within GATE_FIRST_BYTES_MS, or closed first */
	unsigned int crowded;  /* made room for a newer one */
	unsigned int failed;   /* failed handshakes beyond the period's reports */
	unsigned int reported; /* failed handshakes reported one by one */
};

struct gate {
	int lfd;
	const struct tls_key *key;
	pthread_t thread;
	bool started;
	/* The gate thread's own. */
	struct pending pending[GATE_MAX_PENDING];
	struct pollfd pfd[1 + GATE_MAX_PENDING];
	size_t npending;
	uint64_t accept_after; /* accepting paused until then */
	struct turned_away away;
	/* Shared with the receiver, under lock. */
	pthread_mutex_t lock;
	pthread_cond_t changed;
	bool stop;
	struct tls_channel *ready[GATE_MAX_READY];
	size_t nready;
	struct stasis_error *failures[GATE_MAX_FAILURES];
	size_t nfailures;
};

/* The address a connection counts against: an IPv4 address (as
 * ::ffff:a.b.c.d), or an IPv6 address's /64, which a host is commonly given
 * whole. */
static void source_of(const struct sockaddr_storage *sa, unsigned char out[16])
{
	memset(out, 0, 16);
	if (sa->ss_family == AF_INET) {
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		memcpy(out, a, IN6_IS_ADDR_V4MAPPED(a) ? 16 : 8);
	}
}

static void report(struct gate *g, struct stasis_error *e)
{
	pthread_mutex_lock(&g->lock);
	if (g->nfailures < GATE_MAX_FAILURES) {
		g->failures[g->nfailures++] = TAKE_PTR(e);
		pthread_cond_broadcast(&g->changed);
	}
	pthread_mutex_unlock(&g->lock);
	stasis_error_free(e);
}

/* A failed handshake: reported, or counted once the period has had its
 * share (a flood of them must not flood the receiver's log). */
static void handshake_failed(struct gate *g, struct stasis_error *e)
{
	if (g->away.reported < GATE_REPORTS_PER_PERIOD) {
		g->away.reported++;
		report(g, e);
	} else {
		g->away.failed++;
		stasis_error_free(e);
	}
}

/* The period's count, in one line, where anything was turned away
 * unreported; then a new period. */
static void end_period(struct gate *g, uint64_t now)
{
	struct turned_away *a = &g->away;
	struct stasis_error *e = NULL;

	if (now - a->since < (uint64_t)GATE_REPORT_PERIOD_MS * 1000u)
		return;
	if (a->silent || a->crowded || a->failed) {
		stasis_error_set(
		    &e, ECONNREFUSED, STASIS_DOMAIN_SYSTEM, 0,
		    "%u connections without the key turned away in the last %d s: "
		    "%u closed or sent nothing within %d s, %u made room for newer ones "
		    "(%d per address, %d in all), %u more failed the handshake",
		    a->silent + a->crowded + a->failed, GATE_REPORT_PERIOD_MS / 1000, a->silent,
		    GATE_FIRST_BYTES_MS / 1000, a->crowded, GATE_PER_SOURCE, GATE_MAX_PENDING,
		    a->failed);
		report(g, e);
	}
	*a = (struct turned_away){.since = now};
}

/* Connection i leaves the table (the last one takes its place); closed
 * unless it was handed on. One that never spoke is reset: a flood of them
 * leaves no TIME_WAIT behind here. */
static void forget(struct gate *g, size_t i, bool close_it)
{
	struct pending *p = &g->pending[i];
	struct linger reset = {.l_onoff = 1, .l_linger = 0};

	if (close_it && p->ch) {
		tls_drop(p->ch);
	} else if (close_it && p->fd >= 0) {
		setsockopt(p->fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
		close(p->fd);
	}
	*p = g->pending[--g->npending];
}

/* Among the connections from source (NULL: all), the one to make room
 * with: the oldest that has sent nothing, or else the oldest. */
static size_t make_room_with(const struct gate *g, const unsigned char *source)
{
	size_t best = g->npending;

	for (size_t i = 0; i < g->npending; i++) {
		const struct pending *p = &g->pending[i], *b = &g->pending[best];

		if (source && memcmp(p->source, source, sizeof(p->source)) != 0)
			continue;
		if (best == g->npending || (!p->ch && b->ch) ||
		    ((p->ch == NULL) == (b->ch == NULL) && p->since < b->since))
			best = i;
	}
	return best;
}

/* A handshake done: the peer has the key and waits for the receiver,
 * unless too many wait already. */
static void hand_on(struct gate *g, size_t i)
{
	struct tls_channel *ch = g->pending[i].ch;
	struct stasis_error *e = NULL;

	forget(g, i, false);
	pthread_mutex_lock(&g->lock);
	if (!g->stop && g->nready < GATE_MAX_READY) {
		g->ready[g->nready++] = TAKE_PTR(ch);
		pthread_cond_broadcast(&g->changed);
	}
	pthread_mutex_unlock(&g->lock);
	if (!ch)
		return;
	stasis_error_set(&e, EBUSY, STASIS_DOMAIN_SYSTEM, 0,
			 "%s was turned away: %d migrations wait already", tls_peer(ch),
			 GATE_MAX_READY);
	report(g, e);
	tls_close(ch);
}

/* Connection i's handshake as far as its bytes go: its session is made
 * when its first bytes are there; one that closes first is dropped.
 * False when it is left as it was: silent, nothing there yet. */
static bool advance(struct gate *g, size_t i)
{
	struct pending *p = &g->pending[i];
	struct stasis_error *e = NULL;
	int r;

	if (!p->ch) {
		char byte;
		ssize_t n = recv(p->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return false;
		if (n <= 0) {
			g->away.silent++;
			forget(g, i, true);
			return true;
		}
		r = tls_serve_begin(p->fd, p->peer, g->key, &p->ch, &e);
		if (r < 0) {
			p->fd = -1; /* closed */
			handshake_failed(g, e);
			forget(g, i, true);
			return true;
		}
	}
	r = tls_serve_step(p->ch, &p->events, &e);
	if (r > 0) {
		hand_on(g, i);
	} else if (r < 0) {
		handshake_failed(g, e);
		forget(g, i, true);
	}
	return true;
}

static size_t count_from(const struct gate *g, const unsigned char *source)
{
	size_t n = 0;

	for (size_t i = 0; i < g->npending; i++)
		n += memcmp(g->pending[i].source, source, sizeof(g->pending[i].source)) == 0;
	return n;
}

/* A new connection, within its address's bound and the gate's: beyond
 * either, it takes the place of an older one. Its handshake begins at once
 * where it has spoken already. */
static void admit(struct gate *g, int fd, const struct sockaddr_storage *sa, const char *peer)
{
	struct pending *p;
	unsigned char source[16];

	source_of(sa, source);
	for (;;) {
		bool crowded = count_from(g, source) >= GATE_PER_SOURCE;
		size_t i;

		if (!crowded && g->npending < GATE_MAX_PENDING)
			break;
		i = make_room_with(g, crowded ? source : NULL);
		/* One that has spoken since the last look goes on instead:
		 * each turn ends, or leaves one fewer silent. */
		if (!g->pending[i].ch && advance(g, i))
			continue;
		g->away.crowded++;
		forget(g, i, true);
		break;
	}
	p = &g->pending[g->npending++];
	*p = (struct pending){.fd = fd, .events = POLLIN, .since = now_usec()};
	memcpy(p->source, source, sizeof(source));
	snprintf(p->peer, sizeof(p->peer), "%s", peer);
	advance(g, g->npending - 1);
}

static void accept_burst(struct gate *g)
{
	for (int n = 0; n < GATE_ACCEPT_BURST; n++) {
		struct sockaddr_storage sa;
		char peer[64];
		int fd, r = tls_accept_fd(g->lfd, &fd, &sa, peer, sizeof(peer));

		if (r == -EAGAIN || r == -EWOULDBLOCK)
			return;
		if (r == -EMFILE || r == -ENFILE || r == -ENOBUFS || r == -ENOMEM) {
			g->accept_after = now_usec() + GATE_ACCEPT_PAUSE_MS * 1000u;
			return;
		}
		if (r == 0)
			admit(g, fd, &sa, peer);
	}
}

/* Drops the connections past their deadline: the first bytes within
 * GATE_FIRST_BYTES_MS, the whole handshake within TLS_SERVER_HANDSHAKE_MS.
 * Returns how long the next may wait, in ms. */
static int expire(struct gate *g, uint64_t now)
{
	int wait = GATE_STEP_MS;

	for (size_t i = g->npending; i-- > 0;) {
		struct pending *p = &g->pending[i];
		uint64_t limit = (uint64_t)(p->ch ? TLS_SERVER_HANDSHAKE_MS : GATE_FIRST_BYTES_MS) *
				 1000u,
			 age = now - p->since;
		struct stasis_error *e = NULL;

		if (age < limit) {
			if ((limit - age + 999) / 1000 < (uint64_t)wait)
				wait = (int)((limit - age + 999) / 1000);
			continue;
		}
		if (p->ch) {
			stasis_error_set(&e, ETIMEDOUT, STASIS_DOMAIN_SYSTEM, ETIMEDOUT,
					 "TLS handshake with %s: not done in %d s", p->peer,
					 TLS_SERVER_HANDSHAKE_MS / 1000);
			stasis_error_hint(&e, "is it a stasis at the other end?");
			handshake_failed(g, e);
		} else {
			g->away.silent++;
		}
		forget(g, i, true);
	}
	if (now < g->accept_after && (g->accept_after - now + 999) / 1000 < (uint64_t)wait)
		wait = (int)((g->accept_after - now + 999) / 1000);
	return wait;
}

static bool stopping(struct gate *g)
{
	bool stop;

	pthread_mutex_lock(&g->lock);
	stop = g->stop;
	pthread_mutex_unlock(&g->lock);
	return stop;
}

static void *gate_thread(void *arg)
{
	struct gate *g = arg;

	while (!stopping(g)) {
		uint64_t now = now_usec();
		int wait = expire(g, now);
		size_t n = g->npending;

		end_period(g, now);
		g->pfd[0] =
		    (struct pollfd){.fd = now >= g->accept_after ? g->lfd : -1, .events = POLLIN};
		for (size_t i = 0; i < n; i++)
			g->pfd[1 + i] =
			    (struct pollfd){.fd = g->pending[i].fd, .events = g->pending[i].events};
		if (poll(g->pfd, n + 1, wait) <= 0)
			continue;
		/* The connections in first, from the last: one that leaves
		 * takes the last one's place, already seen. A peer that has
		 * spoken goes on before new connections can crowd it out. */
		for (size_t i = n; i-- > 0;)
			if (g->pfd[1 + i].revents)
				advance(g, i);
		if (g->pfd[0].revents & POLLIN)
			accept_burst(g);
	}
	return NULL;
}

int gate_start(int lfd, const struct tls_key *key, struct gate **out, struct stasis_error **err)
{
	struct gate *g = calloc(1, sizeof(*g));
	int fl = fcntl(lfd, F_GETFL);

	if (!g)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	g->lfd = lfd;
	g->key = key;
	g->away.since = now_usec();
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->changed, NULL);
	if (fl < 0 || fcntl(lfd, F_SETFL, fl | O_NONBLOCK) < 0) {
		int e = errno;

		gate_stop(g);
		return stasis_error_errno(err, e, "the receiver's listening socket: %s",
					  strerror(e));
	}
	if (pthread_create(&g->thread, NULL, gate_thread, g) != 0) {
		gate_stop(g);
		return stasis_error_errno(err, EAGAIN, "starting the receiver's gate thread");
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
		pthread_join(g->thread, NULL);
	while (g->npending)
		forget(g, g->npending - 1, true);
	for (size_t i = 0; i < g->nready; i++)
		tls_close(g->ready[i]);
	for (size_t i = 0; i < g->nfailures; i++)
		stasis_error_free(g->failures[i]);
	pthread_mutex_destroy(&g->lock);
	pthread_cond_destroy(&g->changed);
	free(g);
}
