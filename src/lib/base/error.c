/* SPDX-License-Identifier: MIT */
#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *vformat(const char *fmt, va_list ap)
{
	char *s = NULL;

	if (vasprintf(&s, fmt, ap) < 0)
		return NULL;
	return s;
}

int stasis_error_set(struct stasis_error **err, int status, enum stasis_domain domain, int code,
		     const char *fmt, ...)
{
	struct stasis_error *e;
	va_list ap;

	if (status <= 0)
		status = EIO;
	if (!err)
		return -status;
	/* The first error is the cause: never clobber it with a later one. */
	if (*err)
		return -(*err)->status;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->status = status;
	e->domain = domain;
	e->code = code;
	va_start(ap, fmt);
	e->message = vformat(fmt, ap);
	va_end(ap);
	*err = e;
	return -status;
}

int stasis_error_wrap(struct stasis_error **err, const char *fmt, ...)
{
	char *prefix, *joined = NULL;
	va_list ap;

	if (!err || !*err)
		return -EIO;
	va_start(ap, fmt);
	prefix = vformat(fmt, ap);
	va_end(ap);
	if (prefix &&
	    asprintf(&joined, "%s: %s", prefix, (*err)->message ? (*err)->message : "") >= 0) {
		free((*err)->message);
		(*err)->message = joined;
	}
	free(prefix);
	return -(*err)->status;
}

int stasis_error_hint(struct stasis_error **err, const char *fmt, ...)
{
	va_list ap;

	if (!err || !*err)
		return -EIO;
	free((*err)->hint);
	va_start(ap, fmt);
	(*err)->hint = vformat(fmt, ap);
	va_end(ap);
	return -(*err)->status;
}

int stasis_error_cause(struct stasis_error **err, const char *cause)
{
	if (!err || !*err)
		return -EIO;
	(*err)->cause = cause;
	return -(*err)->status;
}

const char *stasis_domain_name(enum stasis_domain domain)
{
	switch (domain) {
	case STASIS_DOMAIN_SYSTEM:
		return "system";
	case STASIS_DOMAIN_USAGE:
		return "usage";
	case STASIS_DOMAIN_IMAGE:
		return "image";
	case STASIS_DOMAIN_CRIU:
		return "criu";
	case STASIS_DOMAIN_CUDA:
		return "cuda";
	case STASIS_DOMAIN_NVML:
		return "nvml";
	}
	return "unknown";
}

char *stasis_error_format(const struct stasis_error *err)
{
	char *s = NULL;
	const char *msg, *hint;

	if (!err)
		return strdup("unknown error");
	msg = err->message ? err->message : strerror(err->status);
	hint = err->hint && *err->hint ? err->hint : NULL;
	if (asprintf(&s, "%s%s%s%s%s%s%s", msg, hint ? " (" : "", hint ? hint : "", hint ? ")" : "",
		     err->cause ? " [preflight: " : "", err->cause ? err->cause : "",
		     err->cause ? "]" : "") < 0)
		return NULL;
	/* One line, whatever the pieces held. */
	for (char *p = s; p && *p; p++)
		if (*p == '\n')
			*p = ' ';
	return s;
}

void stasis_error_free(struct stasis_error *err)
{
	if (!err)
		return;
	free(err->message);
	free(err->hint);
	free(err);
}
