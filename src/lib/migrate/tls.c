/* SPDX-License-Identifier: MIT */
#include "tls.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "stasis.h"
#include "util.h"

/* PSK with ECDHE: the key proves the peer, the exchange gives forward
 * secrecy; nothing else is offered. AES-GCM before ChaCha20: with the
 * AES instructions that every GPU server's CPU has it encrypts at several
 * GB/s, where the ChaCha20 that GnuTLS picks by default ran at 65 MB/s
 * and held a whole migration to that. Only the two cheap curves: in TLS
 * 1.2 the receiver makes its share before the peer has shown the key, and
 * a peer without it that asked for DHE-PSK with FFDHE8192 cost the
 * receiver's gate 336 ms of CPU per connection (X25519: well under 1 ms). */
#define TLS_PRIORITY                                                                               \
	"SECURE128:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-KX-ALL:+ECDHE-PSK:"                        \
	"-GROUP-ALL:+GROUP-X25519:+GROUP-SECP256R1:"                                               \
	"-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305"
#define TLS_IDENTITY "stasis-migrate"
#define CONNECT_MS 10000
/* Connections accepted by the kernel, not yet by the gate (the kernel caps
 * it at net.core.somaxconn). */
#define LISTEN_QUEUE 1024
/* Every wait on the socket is cut in steps of this (SO_RCVTIMEO and
 * SO_SNDTIMEO), so that a signal or a deadline is seen within it. */
#define IO_STEP_MS 250

struct tls_channel {
	int fd;
	gnutls_session_t session;
	gnutls_psk_client_credentials_t client;
	gnutls_psk_server_credentials_t server;
	const struct tls_key *key;
	int io_timeout_ms; /* a send or receive that moves nothing this long fails */
	char peer[128];
};

static void channel_free(struct tls_channel *ch)
{
	if (!ch)
		return;
	if (ch->session)
		gnutls_deinit(ch->session);
	if (ch->client)
		gnutls_psk_free_client_credentials(ch->client);
	if (ch->server)
		gnutls_psk_free_server_credentials(ch->server);
	if (ch->fd >= 0)
		close(ch->fd);
	free(ch);
}

void tls_drop(struct tls_channel *ch)
{
	channel_free(ch);
}

void tls_close(struct tls_channel *ch)
{
	/* The close notice is one try: a peer that reads nothing must not
	 * hold the close (the socket's send step bounds it). */
	if (ch && ch->session)
		gnutls_bye(ch->session, GNUTLS_SHUT_WR);
	channel_free(ch);
}

const char *tls_peer(const struct tls_channel *ch)
{
	return ch->peer;
}

/* A peer that vanishes without a word is noticed within about 25 s; a
 * blocked read or write returns every IO_STEP_MS (as GNUTLS_E_AGAIN). */
static void tune_socket(int fd)
{
	int on = 1, idle = 10, intvl = 5, cnt = 3;
	struct timeval step = {.tv_sec = 0, .tv_usec = IO_STEP_MS * 1000};

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &step, sizeof(step));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &step, sizeof(step));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

static int server_key(gnutls_session_t s, const char *username, gnutls_datum_t *out)
{
	const struct tls_key *key = gnutls_session_get_ptr(s);

	if (!key || strcmp(username, TLS_IDENTITY) != 0)
		return -1;
	out->data = gnutls_malloc(key->len);
	if (!out->data)
		return -1;
	memcpy(out->data, key->data, key->len);
	out->size = (unsigned int)key->len;
	return 0;
}

/* A handshake that failed: refused (EACCES), or, for a client, its
 * connection closed or reset before the handshake ended (ECONNRESET),
 * which tls_connect tries again; a receiver's refusal comes with an
 * alert. */
static int auth_failed(struct tls_channel *ch, int r, bool server, struct stasis_error **err)
{
	bool cut = !server && (r == GNUTLS_E_PREMATURE_TERMINATION || r == GNUTLS_E_PULL_ERROR ||
			       r == GNUTLS_E_PUSH_ERROR);
	const char *alert = r == GNUTLS_E_FATAL_ALERT_RECEIVED
				? gnutls_alert_get_name(gnutls_alert_get(ch->session))
				: NULL;
	int status = cut ? ECONNRESET : EACCES;

	stasis_error_set(err, status, STASIS_DOMAIN_SYSTEM, r,
			 "TLS handshake with %s failed: %s%s%s%s", ch->peer, gnutls_strerror(r),
			 alert ? " Alert: " : "", alert ? alert : "", alert ? "." : "");
	if (server)
		stasis_error_hint(err, "the peer was refused before it could send anything; both "
				       "ends need the same key file");
	else
		stasis_error_hint(err, "both ends need the same key file; is a stasis receive "
				       "listening there?");
	return -status;
}

/* Whether a wait that has moved nothing since last (now_usec) must end:
 * -EINTR for a request to stop, -ETIMEDOUT past limit_ms, else 0. */
static int wait_over(uint64_t last, int limit_ms)
{
	if (stasis_interrupted())
		return -EINTR;
	if (limit_ms >= 0 && now_usec() - last > (uint64_t)limit_ms * 1000u)
		return -ETIMEDOUT;
	return 0;
}

static int handshake_failed(struct tls_channel *ch, int r, int limit_ms, struct stasis_error **err)
{
	if (r == -EINTR)
		return stasis_error_set(err, EINTR, STASIS_DOMAIN_SYSTEM, EINTR,
					"interrupted by a signal during the TLS handshake with %s",
					ch->peer);
	stasis_error_set(err, ETIMEDOUT, STASIS_DOMAIN_SYSTEM, ETIMEDOUT,
			 "TLS handshake with %s: no answer in %d s", ch->peer, limit_ms / 1000);
	return stasis_error_hint(err, "is it a stasis at the other end?");
}

/* The session on ch->fd, with the PSK credentials; its handshake ends
 * within limit_ms, or, with 0, never waits (the socket is non-blocking and
 * the caller keeps the time). */
static int session_new(struct tls_channel *ch, bool server, int limit_ms, struct stasis_error **err)
{
	gnutls_datum_t k = {.data = ch->key->data, .size = (unsigned int)ch->key->len};
	unsigned int flags = (server ? GNUTLS_SERVER : GNUTLS_CLIENT) | GNUTLS_NO_SIGNAL;
	int r;

	r = gnutls_init(&ch->session, limit_ms ? flags : flags | GNUTLS_NONBLOCK);
	if (r == 0 && server) {
		r = gnutls_psk_allocate_server_credentials(&ch->server);
		if (r == 0)
			gnutls_psk_set_server_credentials_function(ch->server, server_key);
		if (r == 0)
			r = gnutls_credentials_set(ch->session, GNUTLS_CRD_PSK, ch->server);
		gnutls_session_set_ptr(ch->session, (void *)ch->key);
	} else if (r == 0) {
		r = gnutls_psk_allocate_client_credentials(&ch->client);
		if (r == 0)
			r = gnutls_psk_set_client_credentials(ch->client, TLS_IDENTITY, &k,
							      GNUTLS_PSK_KEY_RAW);
		if (r == 0)
			r = gnutls_credentials_set(ch->session, GNUTLS_CRD_PSK, ch->client);
	}
	if (r == 0)
		r = gnutls_priority_set_direct(ch->session, TLS_PRIORITY, NULL);
	if (r < 0)
		return stasis_error_set(err, EIO, STASIS_DOMAIN_SYSTEM, r, "TLS setup: %s",
					gnutls_strerror(r));
	gnutls_transport_set_int(ch->session, ch->fd);
	gnutls_handshake_set_timeout(ch->session, (unsigned int)limit_ms);
	return 0;
}

/* The session and its handshake, which must end within limit_ms. */
static int handshake(struct tls_channel *ch, bool server, int limit_ms, struct stasis_error **err)
{
	uint64_t start = now_usec();
	int r = session_new(ch, server, limit_ms, err);

	if (r < 0)
		return r;
	do {
		int over = wait_over(start, limit_ms);

		if (over < 0)
			return handshake_failed(ch, over, limit_ms, err);
		r = gnutls_handshake(ch->session);
	} while (r < 0 && !gnutls_error_is_fatal(r));
	if (r == GNUTLS_E_TIMEDOUT)
		return handshake_failed(ch, -ETIMEDOUT, limit_ms, err);
	return r < 0 ? auth_failed(ch, r, server, err) : 0;
}

/* Sends and receives wait, in steps (tune_socket). */
static void set_blocking(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0 && (fl & O_NONBLOCK))
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

/* The handshake on a connected ch, which goes to *out, or is freed. */
static int authenticate(struct tls_channel *ch, bool server, int limit_ms, struct tls_channel **out,
			struct stasis_error **err)
{
	int r;

	ch->io_timeout_ms = TLS_IO_TIMEOUT_MS;
	tune_socket(ch->fd);
	set_blocking(ch->fd);
	r = handshake(ch, server, limit_ms, err);
	if (r < 0) {
		channel_free(ch);
		return r;
	}
	*out = ch;
	return 0;
}

static int connect_timed(int fd, const struct addrinfo *ai)
{
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	socklen_t len = sizeof(int);
	int e = 0;

	if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
		return 0;
	if (errno != EINPROGRESS)
		return -errno;
	if (poll(&p, 1, CONNECT_MS) <= 0)
		return -ETIMEDOUT;
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len);
	return -e;
}

static int resolve(const char *addr, bool passive, struct addrinfo **res, struct stasis_error **err)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
	char host[256], port[16];
	int r;

	if (wire_split_addr(addr, host, sizeof(host), port, sizeof(port)) < 0) {
		stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
				 "'%s' is not an address: expected HOST:PORT", addr);
		return stasis_error_hint(err, "write it as 10.0.0.2:7070 or [fd00::2]:7070");
	}
	r = getaddrinfo(host, port, &hints, res);
	if (r != 0) {
		stasis_error_set(err, EHOSTUNREACH, STASIS_DOMAIN_USAGE, r, "cannot resolve %s: %s",
				 host, gai_strerror(r));
		return stasis_error_hint(err, "check the host name");
	}
	return 0;
}

static int connect_once(const char *addr, const struct tls_key *key, struct tls_channel **out,
			struct stasis_error **err)
{
	struct addrinfo *res = NULL;
	struct tls_channel *ch;
	int r = resolve(addr, false, &res, err);

	if (r < 0)
		return r;
	ch = calloc(1, sizeof(*ch));
	if (!ch) {
		freeaddrinfo(res);
		return stasis_error_errno(err, ENOMEM, "out of memory");
	}
	ch->key = key;
	snprintf(ch->peer, sizeof(ch->peer), "%s", addr);
	r = -EHOSTUNREACH;
	for (struct addrinfo *ai = res; ai && r < 0; ai = ai->ai_next) {
		ch->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		r = ch->fd < 0 ? -errno : connect_timed(ch->fd, ai);
		if (r < 0 && ch->fd >= 0)
			close(ch->fd);
	}
	freeaddrinfo(res);
	if (r < 0) {
		ch->fd = -1;
		channel_free(ch);
		stasis_error_errno(err, -r, "cannot connect to %s: %s", addr, strerror(-r));
		stasis_error_hint(err, "start 'stasis receive --listen' there first");
		return r;
	}
	return authenticate(ch, false, TLS_CLIENT_HANDSHAKE_MS, out, err);
}

/* A receiver flooded from this machine's own address may push out a
 * connection of ours that has not spoken yet (its gate keeps 8 per
 * address): a connection closed or reset before the handshake ended is
 * tried again, CONNECT_TRIES in all. Nothing has been said by then. */
#define CONNECT_TRIES 3
#define CONNECT_PAUSE_MS 100

int tls_connect(const char *addr, const struct tls_key *key, struct tls_channel **out,
		struct stasis_error **err)
{
	int r;

	for (int tries = 1;; tries++) {
		r = connect_once(addr, key, out, err);
		if (r != -ECONNRESET || tries == CONNECT_TRIES || stasis_interrupted())
			return r;
		if (err) {
			stasis_error_free(*err);
			*err = NULL;
		}
		usleep(CONNECT_PAUSE_MS * 1000);
	}
}

int tls_listen(const char *addr, int *fd_out, struct stasis_error **err)
{
	struct addrinfo *res = NULL;
	int r = resolve(addr, true, &res, err), fd = -1, on = 1;

	if (r < 0)
		return r;
	fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, 0);
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
	/* Connections wait in the kernel only until the gate takes them; the
	 * queue holds a flood's burst, as a full one drops the next SYN, a
	 * real peer's too, which its kernel sends again only after 1 s. */
	if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, LISTEN_QUEUE) < 0) {
		r = -errno;
		freeaddrinfo(res);
		if (fd >= 0)
			close(fd);
		stasis_error_errno(err, -r, "cannot listen on %s: %s", addr, strerror(-r));
		return stasis_error_hint(err, "use an address of this host and a free port");
	}
	freeaddrinfo(res);
	*fd_out = fd;
	return 0;
}

int tls_accept_fd(int lfd, int *fd, struct sockaddr_storage *sa, char *peer, size_t len)
{
	struct sockaddr_storage own;
	socklen_t salen = sizeof(own);
	char host[96] = "?", port[16] = "?";

	if (!sa)
		sa = &own;
	*fd = accept4(lfd, (struct sockaddr *)sa, &salen, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (*fd < 0)
		return -errno;
	getnameinfo((struct sockaddr *)sa, salen, host, sizeof(host), port, sizeof(port),
		    NI_NUMERICHOST | NI_NUMERICSERV);
	snprintf(peer, len, "%s:%s", host, port);
	return 0;
}

static struct tls_channel *server_channel(int fd, const char *peer, const struct tls_key *key)
{
	struct tls_channel *ch = calloc(1, sizeof(*ch));

	if (!ch) {
		close(fd);
		return NULL;
	}
	ch->key = key;
	ch->fd = fd;
	snprintf(ch->peer, sizeof(ch->peer), "%s", peer);
	return ch;
}

int tls_serve(int fd, const char *peer, const struct tls_key *key, int limit_ms,
	      struct tls_channel **out, struct stasis_error **err)
{
	struct tls_channel *ch = server_channel(fd, peer, key);

	if (!ch)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	return authenticate(ch, true, limit_ms, out, err);
}

int tls_serve_begin(int fd, const char *peer, const struct tls_key *key, struct tls_channel **out,
		    struct stasis_error **err)
{
	struct tls_channel *ch = server_channel(fd, peer, key);
	int r;

	if (!ch)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	ch->io_timeout_ms = TLS_IO_TIMEOUT_MS;
	tune_socket(ch->fd);
	r = session_new(ch, true, 0, err);
	if (r < 0) {
		channel_free(ch);
		return r;
	}
	*out = ch;
	return 0;
}

/* Retries for what GnuTLS calls a non-fatal error other than waiting (a
 * warning alert): a peer cannot keep a step going with them. */
#define STEP_RETRIES 4

int tls_serve_step(struct tls_channel *ch, short *events, struct stasis_error **err)
{
	int r, tries = 0;

	do
		r = gnutls_handshake(ch->session);
	while (r < 0 && r != GNUTLS_E_AGAIN && r != GNUTLS_E_INTERRUPTED &&
	       !gnutls_error_is_fatal(r) && ++tries < STEP_RETRIES);
	if (r == 0) {
		set_blocking(ch->fd);
		return 1;
	}
	if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED || !gnutls_error_is_fatal(r)) {
		*events = gnutls_record_get_direction(ch->session) ? POLLOUT : POLLIN;
		return 0;
	}
	/* The peer learns it was refused (a wrong key: decrypt_error) and
	 * does not take it for a connection cut, which it would try again.
	 * One try: the socket does not wait. */
	gnutls_alert_send_appropriate(ch->session, r);
	return auth_failed(ch, r, true, err);
}

static int io_error(ssize_t r)
{
	if (r == GNUTLS_E_INTERRUPTED)
		return -EINTR;
	if (r == GNUTLS_E_PREMATURE_TERMINATION || r == GNUTLS_E_PUSH_ERROR ||
	    r == GNUTLS_E_PULL_ERROR || r == 0)
		return -EPIPE;
	return -EPROTO;
}

/* A send or receive that was cut by its step (or by a signal that is
 * not a request to stop) goes on, unless it has moved nothing for the
 * channel's timeout or a request to stop came. */
static bool go_on(const struct tls_channel *ch, ssize_t n, uint64_t last, int *r)
{
	if (n != GNUTLS_E_AGAIN && n != GNUTLS_E_INTERRUPTED)
		return false;
	*r = wait_over(last, ch->io_timeout_ms);
	return *r == 0;
}

static int send_all(struct tls_channel *ch, const unsigned char *p, size_t len)
{
	uint64_t last = now_usec();
	int r = 0;

	while (len) {
		ssize_t n = gnutls_record_send(ch->session, p, len);

		if (go_on(ch, n, last, &r))
			continue;
		if (r < 0)
			return r;
		if (n <= 0)
			return io_error(n);
		p += n;
		len -= (size_t)n;
		last = now_usec();
	}
	return 0;
}

int tls_send2(struct tls_channel *ch, uint8_t type, uint8_t flags, const void *head, size_t headlen,
	      const void *body, size_t bodylen)
{
	unsigned char hdr[WIRE_HEADER_LEN];
	struct wire_header h = {.type = type, .flags = flags, .len = (uint32_t)(headlen + bodylen)};
	int r;

	if (headlen + bodylen > WIRE_MAX_PAYLOAD)
		return -EMSGSIZE;
	wire_header_encode(&h, hdr);
	gnutls_record_cork(ch->session);
	r = send_all(ch, hdr, sizeof(hdr));
	if (r == 0 && headlen)
		r = send_all(ch, head, headlen);
	if (r == 0 && bodylen)
		r = send_all(ch, body, bodylen);
	if (r == 0) {
		uint64_t last = now_usec();
		int over = 0;
		ssize_t n;

		do
			n = gnutls_record_uncork(ch->session, GNUTLS_RECORD_WAIT);
		while (go_on(ch, n, last, &over));
		r = over < 0 ? over : n < 0 ? io_error(n) : 0;
	}
	return r;
}

int tls_send_raw(struct tls_channel *ch, const void *bytes, size_t len)
{
	return send_all(ch, bytes, len);
}

int tls_send(struct tls_channel *ch, uint8_t type, uint8_t flags, const void *payload, size_t len)
{
	return tls_send2(ch, type, flags, payload, len, NULL, 0);
}

int tls_wait(struct tls_channel *ch, int ms)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	int r;

	if (gnutls_record_check_pending(ch->session))
		return 1;
	r = poll(&p, 1, ms);
	if (r < 0)
		return -errno;
	return r > 0;
}

/* A message once begun must keep coming: a peer that stops mid-frame is
 * dropped after the channel's timeout, and a request to stop ends the
 * wait whatever the peer does. */
static int recv_all(struct tls_channel *ch, unsigned char *p, size_t len)
{
	uint64_t last = now_usec();
	int r = 0;

	while (len) {
		ssize_t n = gnutls_record_recv(ch->session, p, len);

		if (go_on(ch, n, last, &r))
			continue;
		if (r < 0)
			return r;
		if (n <= 0)
			return io_error(n);
		p += n;
		len -= (size_t)n;
		last = now_usec();
	}
	return 0;
}

int tls_recv(struct tls_channel *ch, struct wire_header *h, unsigned char *buf, size_t cap)
{
	unsigned char hdr[WIRE_HEADER_LEN];
	int r = recv_all(ch, hdr, sizeof(hdr));

	if (r == 0)
		r = wire_header_decode(hdr, h);
	if (r == 0 && h->len > cap)
		r = -EPROTO;
	if (r == 0)
		r = recv_all(ch, buf, h->len);
	return r;
}
