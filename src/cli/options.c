/* SPDX-License-Identifier: MIT */
/* What every command's option parsing shares: the argument getopt could
 * not take, named as the user wrote it, and the numbers and names that
 * more than one command reads. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "stasis.h"
#include "util.h"

/* The option as written, without a value given with '=' ("--json=1"). */
static const char *option_name(const char *arg, char *buf, size_t len)
{
	snprintf(buf, len, "%.*s", (int)strcspn(arg, "="), arg);
	return buf;
}

int cli_option_error(const char *command, int c, char *const *argv, const char *shorts)
{
	/* For a long option getopt has moved past it; the arguments it
	 * reorders are reordered only at its next call. A short option in a
	 * cluster ("-v4") may still be where getopt reads: optopt names it. */
	const char *arg = optind > 0 ? argv[optind - 1] : "";
	bool long_form = strncmp(arg, "--", 2) == 0;
	char name[64];

	if (c == ':' && (long_form || optopt >= 256))
		return cli_usage_error(command, "option '%s' wants a value",
				       option_name(arg, name, sizeof(name)));
	if (c == ':')
		return cli_usage_error(command, "option '-%c' wants a value", optopt);
	if (optopt == 0)
		return cli_usage_error(command, "unknown option '%s'",
				       option_name(arg, name, sizeof(name)));
	/* A long option that takes no value was given one: its short twin,
	 * if it has one, is never unknown. */
	if (optopt >= 256 || strchr(shorts, optopt))
		return cli_usage_error(command, "option '%s' takes no value",
				       option_name(arg, name, sizeof(name)));
	return cli_usage_error(command, "unknown option '-%c'", optopt);
}

bool cli_parse_timeout(const char *text, unsigned int *ms)
{
	uint64_t v;

	if (parse_uint_in(text, 1, CLI_TIMEOUT_MAX_MS, &v) < 0)
		return false;
	*ms = (unsigned int)v;
	return true;
}

int cli_timeout_error(const char *command, const char *text)
{
	return cli_usage_error(command, "--timeout wants milliseconds from 1 to %u, not '%s'",
			       CLI_TIMEOUT_MAX_MS, text);
}

int cli_parse_criu_log(const char *command, int c, const char *text, struct stasis_criu_log *log)
{
	uint64_t level;

	if (c == 'o') {
		size_t len = strlen(text);

		/* CRIU takes its log's name in its work folder, no path. */
		if (strchr(text, '/') || len <= 4 || len > NAME_MAX ||
		    strcmp(text + len - 4, ".log") != 0)
			return cli_usage_error(
			    command,
			    "-o wants a file name ending in .log, not '%s' (CRIU "
			    "writes its log in its work folder)",
			    text);
		log->file = text;
		return EXIT_OK;
	}
	/* -v, -vv...: CRIU's default (2) raised by one a 'v'; stasis logs at
	 * 4, the most there is, unless told a number. */
	if (!text || strspn(text, "v") == strlen(text))
		return EXIT_OK;
	if (parse_uint_in(text, 0, 4, &level) < 0)
		return cli_usage_error(command, "-v wants a log level from 0 to 4, not '%s'", text);
	log->level = (int)level;
	log->level_given = true;
	return EXIT_OK;
}
