/* SPDX-License-Identifier: MIT */
#include "criu-causes.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* The remedies go inside the brackets of a one-line error: no brackets
 * of their own. */
#define REMEDY_SHELL_JOB                                                                           \
	"the tree is attached to a terminal of a session outside it: checkpoint and restore "      \
	"with --shell-job or -j, or start it with 'stasis run' without a terminal"
#define REMEDY_DELETED_FILE                                                                        \
	"a file the process had open is gone or changed since the checkpoint: put it back at "     \
	"that path as it was, then restore again"

/* A cause CRIU names in an error line: the line holds match (and also,
 * where set), and the remedy says what to do. CRIU says what a socket is
 * on an earlier line: before, where set, is what that line holds, and
 * the last such line before the error is added to it. Looked up in this
 * order: a device before a file, as CRIU opens both the same way. */
static const struct cause_rule {
	const char *match;
	const char *also;
	const char *before;
	const char *remedy;
} rules[] = {
    {"Consider using --shell-job", NULL, NULL, REMEDY_SHELL_JOB},
    {"Found dangling tty", NULL, NULL, REMEDY_SHELL_JOB},
    {"without correspond master peer", NULL, NULL, REMEDY_SHELL_JOB},
    {"External socket is used", NULL, "Runaway socket:",
     "it is connected to a unix socket of a process outside the tree: checkpoint and restore "
     "with --ext-unix-sk, that socket there again at restore, or checkpoint its peer in the "
     "same tree"},
    {"External socket found in image", NULL, NULL,
     "the image holds a connection to a unix socket outside the tree: restore with "
     "--ext-unix-sk, with that socket there again"},
    {"Can't dump half of stream unix connection", NULL, NULL,
     "a stream unix connection to a process outside the tree cannot be saved: checkpoint both "
     "ends in one tree, or close it before the checkpoint"},
    {"Can't lookup mount=", NULL, NULL,
     "a file it holds is on a mount outside the tree's mount namespace, opened in another "
     "namespace through /proc/PID/root or unmounted since: close it before the checkpoint, "
     "or checkpoint the container that owns that mount with --runtime"},
    {"consider using --tcp-established", NULL, NULL,
     "it has an established TCP connection: checkpoint and restore with --tcp-established, "
     "its peer still there at restore, or close the connection first"},
    {"io_uring", NULL, NULL,
     "CRIU cannot save an io_uring: stop what uses one; PyTorch's TCPStore does unless "
     "USE_LIBUV=0, which 'stasis run' sets"},
    {"Can't open file dev/", "on restore", NULL,
     "a device the process had open is missing here: restore on a machine that has it, or "
     "load its driver so that /dev has it again"},
    {"Can't dump file", "(chr ", NULL,
     "the process holds a device that CRIU cannot save: close it before the checkpoint"},
    {"Can't dump ghost file", NULL, NULL,
     "a deleted file the process holds is bigger than a checkpoint saves, 256 MiB: close it, "
     "or keep it linked, before the checkpoint"},
    {"Can't open file", "on restore", NULL, REMEDY_DELETED_FILE},
    {"has bad size", NULL, NULL, REMEDY_DELETED_FILE},
    {"has bad mode", NULL, NULL, REMEDY_DELETED_FILE},
};

const char *criu_log_without_timestamp(const char *line)
{
	if (line[0] == '(' && strchr(line, ')'))
		line = strchr(line, ')') + 1;
	while (*line == ' ')
		line++;
	return line;
}

static bool is_error(const char *line)
{
	return strstr(line, "Error") || strstr(line, "error");
}

/* Errors CRIU logs and goes on after: raising its own RLIMIT_NOFILE
 * fails without CAP_SYS_RESOURCE (every dump and restore on machines
 * whose root lacks it), and CRIU carries on with the limit it has. */
static bool goes_on_after(const char *line)
{
	return strstr(line, "rlimit: Can't setup RLIMIT_NOFILE for self") != NULL;
}

/* Errors CRIU logs because another failed before, which name no cause:
 * the descriptor it could not open, the task killed, the whole run. */
static bool echoes_failure(const char *line)
{
	static const char *const echoes[] = {"Unable to open fd=", "killed by signal",
					     "Restoring FAILED", "Dumping FAILED"};

	for (size_t i = 0; i < ARRAY_SIZE(echoes); i++)
		if (strstr(line, echoes[i]))
			return true;
	return false;
}

static const struct cause_rule *rule_for(const char *line)
{
	for (size_t i = 0; i < ARRAY_SIZE(rules); i++)
		if (strstr(line, rules[i].match) && (!rules[i].also || strstr(line, rules[i].also)))
			return &rules[i];
	return NULL;
}

/* Runs of blanks (CRIU aligns its columns with them) as one space. */
static void squeeze(char *s)
{
	char *to = s;

	for (const char *from = s; *from; from++)
		if (!((*from == ' ' || *from == '\t') && to > s && to[-1] == ' '))
			*to++ = *from == '\t' ? ' ' : *from;
	*to = '\0';
}

/* The last line among lines[0..n) that holds what. */
static const char *last_holding(char *const *lines, size_t n, const char *what)
{
	while (n-- > 0)
		if (strstr(lines[n], what))
			return lines[n];
	return NULL;
}

static int describe(char *const *lines, size_t at, const struct cause_rule *rule,
		    struct criu_cause *out)
{
	const char *before = rule && rule->before ? last_holding(lines, at, rule->before) : NULL;
	int n;

	if (before) {
		before = strstr(before, rule->before);
		n = asprintf(&out->line, "%s (%s)", criu_log_without_timestamp(lines[at]), before);
	} else {
		n = asprintf(&out->line, "%s", criu_log_without_timestamp(lines[at]));
	}
	if (n < 0) {
		out->line = NULL;
		return -ENOMEM;
	}
	squeeze(out->line);
	out->remedy = rule ? rule->remedy : NULL;
	return 0;
}

int criu_cause_find(const char *log, struct criu_cause *out)
{
	_cleanup_free_ char *text = strdup(log ? log : "");
	_cleanup_free_ char **lines = NULL;
	size_t n = 0, cap = 0, first = SIZE_MAX, last = SIZE_MAX;
	char *save = NULL;

	out->line = NULL;
	out->remedy = NULL;
	if (!text)
		return -ENOMEM;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char **bigger = grow_array(lines, n, &cap, sizeof(*lines), 64);

		if (!bigger)
			return -ENOMEM;
		lines = bigger;
		lines[n++] = line;
	}
	for (size_t i = 0; i < n; i++) {
		const struct cause_rule *rule;

		if (!is_error(lines[i]) || goes_on_after(lines[i]))
			continue;
		rule = rule_for(lines[i]);
		if (rule)
			return describe(lines, i, rule, out);
		if (first == SIZE_MAX && !echoes_failure(lines[i]))
			first = i;
		last = i;
	}
	if (first != SIZE_MAX)
		return describe(lines, first, NULL, out);
	return last != SIZE_MAX ? describe(lines, last, NULL, out) : 0;
}

void criu_cause_free(struct criu_cause *c)
{
	free(c->line);
	c->line = NULL;
	c->remedy = NULL;
}
