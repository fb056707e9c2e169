/* SPDX-License-Identifier: MIT */
/* Notes: what the library did beside the operation asked of it (a staging
 * folder of a killed run removed, a container it left paused resumed).
 * The library never prints; the command line installs a handler that
 * writes each note on one line of stderr. Without one, notes are dropped. */
#ifndef STASIS_NOTE_H
#define STASIS_NOTE_H

typedef void (*stasis_note_fn)(const char *text);

void stasis_set_note_handler(stasis_note_fn fn);

void stasis_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
