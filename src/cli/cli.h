/* SPDX-License-Identifier: MIT */
/* The command line: one small file per command, each parsing its options
 * and calling the library. Errors are printed here, once, on one line. */
#ifndef STASIS_CLI_H
#define STASIS_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <sys/types.h>

#include "error.h"

enum {
	EXIT_OK = 0,
	EXIT_FAILED = 1, /* the operation failed */
	EXIT_USAGE = 2,	 /* the command line was wrong */
};

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
	const char *usage; /* full help text */
};

extern const struct command commands[];

/* The umask stasis was started with (it works under 077): what a job
 * that stasis run starts gets back. */
extern mode_t cli_caller_umask;

/* Print "stasis: error: ..." and return the exit code for it. */
int cli_fail(const char *command, struct stasis_error *err);

/* Print "stasis CMD: what (see 'stasis help CMD')" and return EXIT_USAGE. */
int cli_usage_error(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The usage error for what getopt_long returned c for (':' a value
 * missing, '?' an unknown option or a value where none is taken), naming
 * the argument as written; shorts is its optstring, which must begin
 * with ':'. Long-only options have values from 256 on. */
int cli_option_error(const char *command, int c, char *const *argv, const char *shorts);

/* getopt's value for a long-only option: from 256 on, never a short
 * option's letter. --json is this one in every command that has it. */
#define CLI_OPT_JSON 256

/* The GPU lock timeout, --timeout MS: 1 ms to an hour. */
#define CLI_TIMEOUT_MAX_MS 3600000u
bool cli_parse_timeout(const char *text, unsigned int *ms);
int cli_timeout_error(const char *command, const char *text);

struct stasis_criu_log;

/* CRIU's -v[N] (c 'v', text NULL or the level) and -o FILE (c 'o') into
 * log; EXIT_OK, or the usage error naming the value. */
int cli_parse_criu_log(const char *command, int c, const char *text, struct stasis_criu_log *log);

/* Parse a PID argument; false when it is not a positive number. */
bool cli_parse_pid(const char *text, pid_t *pid);

/* Stand in as root's parent: forward SIGINT, SIGTERM, SIGHUP and SIGQUIT
 * to it (unblocking them), wait for it, and return its exit status
 * (128 + N for signal N). */
int cli_wait_forwarding(pid_t root);

/* The signals cli_wait_forwarding forwards, into set. */
void cli_forwarded_signals(sigset_t *set);

/* Whether progress decoration may go to stderr (a terminal, no --json). */
bool cli_decorate(bool json);

/* The progress of a checkpoint or a restore: on a terminal without --json,
 * or wherever --progress asks for it (then a plain line every few seconds
 * off a terminal). */
void cli_progress(bool json, bool asked);

int cmd_checkpoint(int argc, char **argv);
int cmd_restore(int argc, char **argv);
int cmd_migrate(int argc, char **argv);
int cmd_receive(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_ps(int argc, char **argv);
int cmd_gpu(int argc, char **argv);
int cmd_cuda_checkpoint(int argc, char **argv);
int cmd_oci(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_help(int argc, char **argv);

/* The built-in demo workload, run as "stasis __demo-workload DIR". */
int demo_workload_main(int argc, char **argv);
/* The GPU helper that stasis's CRIU plugin starts (cmd-criu-helper.c). */
int criu_helper_main(int argc, char **argv);

#endif
