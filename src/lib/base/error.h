/* SPDX-License-Identifier: MIT */
/* One error type for the whole library. A failing function fills *err and
 * returns a negative errno-style value; callers add context on the way up
 * with stasis_error_wrap(); only the command line prints it, once. */
#ifndef STASIS_ERROR_H
#define STASIS_ERROR_H

#include <stdarg.h>
#include <stddef.h>

enum stasis_domain {
	STASIS_DOMAIN_SYSTEM, /* code is an errno */
	STASIS_DOMAIN_USAGE,  /* bad input from the user */
	STASIS_DOMAIN_IMAGE,  /* the image directory or its manifest */
	STASIS_DOMAIN_CRIU,   /* code is CRIU's return value */
	STASIS_DOMAIN_CUDA,   /* code is a CUresult */
	STASIS_DOMAIN_NVML,   /* code is an nvmlReturn_t */
};

struct stasis_error {
	int status; /* positive errno-style value */
	enum stasis_domain domain;
	int code; /* the domain's native code */
	char *message;
	char *hint; /* what the user can do about it, or NULL */
	/* The preflight check that refused, by its code ("nccl"), or NULL:
	 * the one line ends with it, for scripts (preflight-checks.h). */
	const char *cause;
};

/* Set *err (when err is not NULL) and return -status. */
int stasis_error_set(struct stasis_error **err, int status, enum stasis_domain domain, int code,
		     const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Shorthand for a system error: errno value and message. */
#define stasis_error_errno(err, errnum, ...)                                                       \
	stasis_error_set(err, (errnum), STASIS_DOMAIN_SYSTEM, (errnum), __VA_ARGS__)

/* Prefix context to an existing error ("restoring PID 42: <old message>")
 * and return its -status. */
int stasis_error_wrap(struct stasis_error **err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Attach a remedy to an existing error; returns its -status. */
int stasis_error_hint(struct stasis_error **err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Name the preflight check that refused (a static string); returns the
 * error's -status. */
int stasis_error_cause(struct stasis_error **err, const char *cause);
const char *stasis_domain_name(enum stasis_domain domain);

/* One line: "message (hint)". The caller frees it. */
char *stasis_error_format(const struct stasis_error *err);

void stasis_error_free(struct stasis_error *err);

static inline void stasis_error_freep(struct stasis_error **err)
{
	stasis_error_free(*err);
	*err = NULL;
}
#define _cleanup_error_ __attribute__((cleanup(stasis_error_freep)))

#endif
