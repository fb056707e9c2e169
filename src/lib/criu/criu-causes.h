/* SPDX-License-Identifier: MIT */
/* Why CRIU failed, read from its log: the one line that names the cause
 * (the file, the socket, the mount), and for the common causes what to do
 * about it. A table of patterns, no CRIU run: the unit tests feed it logs. */
#ifndef STASIS_CRIU_CAUSES_H
#define STASIS_CRIU_CAUSES_H

struct criu_cause {
	/* The line that names the cause, without its timestamp, with what an
	 * earlier line says about it where the table asks for that; NULL
	 * when the log holds no error line. The caller frees it. */
	char *line;
	/* What the user can do about it; NULL when the table knows none. */
	const char *remedy;
};

/* The cause in the text of a CRIU log: the first error line that a rule
 * of the table matches, else the first that is not an echo of an earlier
 * failure ("Unable to open fd=", "Restoring FAILED"), else the last. -ENOMEM
 * or 0. */
int criu_cause_find(const char *log, struct criu_cause *out);

void criu_cause_free(struct criu_cause *c);

/* A line of CRIU's log without its "(00.123456) " timestamp. */
const char *criu_log_without_timestamp(const char *line);

#endif
