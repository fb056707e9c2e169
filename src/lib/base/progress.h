/* SPDX-License-Identifier: MIT */
/* Progress for the long phases (GPU copies, CRIU's dump and restore): once a
 * phase has run for a second, a line on stderr counts its seconds, and ends
 * with its duration. Off unless the command line turns it on (a terminal,
 * no JSON). */
#ifndef STASIS_PROGRESS_H
#define STASIS_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

#define PROGRESS_DELAY_MS 1000

void progress_enable(bool on);

/* what: "checkpointing GPU memory of 4 processes"; one phase at a time. */
void progress_begin(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void progress_end(void);
/* n more bytes moved in this phase: the line shows them and their rate. */
void progress_add_bytes(uint64_t n);

#endif
