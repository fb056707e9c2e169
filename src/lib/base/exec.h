/* SPDX-License-Identifier: MIT */
/* Running another program (criu check, runc) and keeping what it said. */
#ifndef STASIS_EXEC_H
#define STASIS_EXEC_H

#include <stdbool.h>

/* Run argv (argv[0] a path, or a name looked up on PATH) with stdin from
 * /dev/null. With out, its stdout and stderr are captured into *out (the
 * caller frees); without, they go to /dev/null, as for programs that leave
 * children behind holding them. Returns its exit status (0-255, 128+N for a
 * signal), or -errno when it could not be run. */
int exec_run(const char *const argv[], char **out);

/* As exec_run, with env ("NAME=VALUE" strings, NULL-terminated; NULL for
 * none) added to its environment. */
int exec_run_env(const char *const argv[], char *const env[], char **out);

/* As exec_run, with its stdout into out_fd (a file: a tar, say) and its
 * stderr captured into *err_text (the caller frees). */
int exec_run_to(const char *const argv[], int out_fd, char **err_text);

/* The last non-empty line of text, in place; "" when there is none. */
const char *last_line(char *text);

#endif
