/* SPDX-License-Identifier: MIT */
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

void wire_put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

uint32_t wire_get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void wire_header_encode(const struct wire_header *h, unsigned char out[WIRE_HEADER_LEN])
{
	wire_put32(out, WIRE_MAGIC);
	out[4] = h->type;
	out[5] = h->flags;
	out[6] = out[7] = 0;
	wire_put32(out + 8, h->len);
}

int wire_header_decode(const unsigned char in[WIRE_HEADER_LEN], struct wire_header *h)
{
	if (wire_get32(in) != WIRE_MAGIC || in[6] || in[7])
		return -EPROTO;
	h->type = in[4];
	h->flags = in[5];
	h->len = wire_get32(in + 8);
	if (h->type < WIRE_HELLO || h->type >= WIRE_TYPE_END || h->len > WIRE_MAX_PAYLOAD)
		return -EPROTO;
	return 0;
}

static int copy_part(char *out, size_t cap, const char *from, size_t len)
{
	if (!len || len >= cap)
		return -EINVAL;
	memcpy(out, from, len);
	out[len] = '\0';
	return 0;
}

int wire_split_addr(const char *text, char *host, size_t hostlen, char *port, size_t portlen)
{
	const char *colon, *end;
	char *num_end;
	long num;

	if (!text)
		return -EINVAL;
	if (text[0] == '[') {
		end = strchr(text, ']');
		if (!end || end[1] != ':' ||
		    copy_part(host, hostlen, text + 1, (size_t)(end - text - 1)))
			return -EINVAL;
		colon = end + 1;
	} else {
		colon = strrchr(text, ':');
		if (!colon || memchr(text, ':', (size_t)(colon - text)) ||
		    copy_part(host, hostlen, text, (size_t)(colon - text)))
			return -EINVAL;
	}
	num = strtol(colon + 1, &num_end, 10);
	if (!colon[1] || *num_end || num < 1 || num > 65535)
		return -EINVAL;
	return copy_part(port, portlen, colon + 1, strlen(colon + 1));
}

/* The hint goes with the error; the status is returned even without one. */
static int key_refused(struct stasis_error **err, int status, const char *hint, const char *fmt,
		       ...) __attribute__((format(printf, 4, 5)));

static int key_refused(struct stasis_error **err, int status, const char *hint, const char *fmt,
		       ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	stasis_error_set(err, status, STASIS_DOMAIN_USAGE, 0, "%s", msg);
	stasis_error_hint(err, "%s", hint);
	return -status;
}

int wire_key_check(const char *path, mode_t mode, size_t len, struct stasis_error **err)
{
	static const char make[] = "make one with: head -c 32 /dev/urandom > KEY; chmod 600 KEY";
	char chmod_hint[PATH_MAX + 16];

	if (!S_ISREG(mode))
		return key_refused(err, EINVAL, make, "key file %s is not a regular file", path);
	snprintf(chmod_hint, sizeof(chmod_hint), "chmod 600 %s", path);
	if (mode & 077)
		return key_refused(err, EPERM, chmod_hint,
				   "key file %s is readable by others (mode %04o)", path,
				   (unsigned int)(mode & 07777));
	if (len < WIRE_KEY_MIN)
		return key_refused(err, EINVAL, make,
				   "key file %s holds %zu bytes of secret, fewer than %u", path,
				   len, WIRE_KEY_MIN);
	if (len > WIRE_KEY_MAX)
		return key_refused(err, EINVAL, make,
				   "key file %s holds more than %u bytes of secret", path,
				   WIRE_KEY_MAX);
	return 0;
}

int wire_key_load(const char *path, unsigned char **key, size_t *len, struct stasis_error **err)
{
	/* Not blocked by a FIFO: anything but a regular file is refused. */
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	_cleanup_free_ unsigned char *buf = malloc(WIRE_KEY_MAX + 1);
	size_t got = 0;
	struct stat st;
	ssize_t n;
	int r;

	if (fd < 0 || fstat(fd, &st) < 0)
		return key_refused(err, errno, "give the same key file to both ends",
				   "key file %s: %s", path, strerror(errno));
	if (!buf)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	while (S_ISREG(st.st_mode) && got <= WIRE_KEY_MAX &&
	       (n = read(fd, buf + got, WIRE_KEY_MAX + 1 - got)) > 0)
		got += (size_t)n;
	/* A key file is bytes, all of them secret: a random key may end in
	 * what looks like a line end (1 in 128 of 32 random bytes do). */
	r = wire_key_check(path, st.st_mode, got, err);
	if (r < 0)
		return r;
	*key = TAKE_PTR(buf);
	*len = got;
	return 0;
}

bool wire_name_ok(const char *name)
{
	size_t len = strlen(name);

	if (!len || len > 200 || name[0] == '.' || strchr(name, '/'))
		return false;
	for (size_t i = 0; i < len; i++)
		if (name[i] < 0x21 || name[i] > 0x7e)
			return false;
	return true;
}
