/* SPDX-License-Identifier: MIT */
/* Progress for the long phases (GPU copies, CRIU's dump and restore): once a
 * phase has run for a second, a line on stderr counts its seconds and, where
 * the phase counts them, the bytes it moved of how many and their rate, and
 * ends with its duration. Off unless the command line turns it on: on a
 * terminal without JSON one line redrawn in place, or, asked off a
 * terminal, a plain line every few seconds. */
#ifndef STASIS_PROGRESS_H
#define STASIS_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROGRESS_DELAY_MS 1000

enum progress_mode {
	PROGRESS_OFF,
	PROGRESS_TERMINAL, /* one line, redrawn */
	PROGRESS_LINES,	   /* a line every PROGRESS_LINES_MS, for a log */
};
#define PROGRESS_LINES_MS 5000

void progress_enable(bool on);
void progress_set_mode(enum progress_mode mode);

/* what: "checkpointing GPU memory of 4 processes"; one phase at a time. */
void progress_begin(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void progress_end(void);
/* n more bytes moved in this phase: the line shows them and their rate. */
void progress_add_bytes(uint64_t n);
/* After progress_begin: how many bytes the phase moves in all (0: not
 * known), and a function the line asks at each tick for how many it moved
 * so far (with arg), where the phase does not add them itself. The
 * function runs in the progress thread, until progress_end returns. */
void progress_set_total(uint64_t total);
void progress_poll_bytes(uint64_t (*done)(void *arg), void *arg);

/* The line: "what" then sep, the bytes done of total and their rate where
 * there are any, and the seconds; into buf. */
void progress_format(char *buf, size_t size, const char *what, const char *sep, double secs,
		     uint64_t done, uint64_t total);

#endif
