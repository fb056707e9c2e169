/* SPDX-License-Identifier: MIT */
/* stasis criu-helper FD: not a command for people. stasis's CRIU plugin
 * runs it where no stasis started CRIU (a runtime's criu swrk, criu by
 * hand) and talks to it on FD, a socket, to have the GPU steps done
 * (gpu-handoff.h). Its errors go to CRIU's log through the plugin; this
 * prints them too, on stderr, which CRIU passes on. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "cli.h"
#include "gpu-handoff.h"
#include "preflight-checks.h"

/* The checks gpu suspend makes of a running CUDA process (an NCCL rank
 * whose communicators cannot be taken apart, what it maps): a CRIU that
 * stasis did not start refuses the same ones, before any lock. */
static int refuse_process(pid_t pid, const char *comm, struct stasis_error **err)
{
	return preflight_process_refuse(
	    &(struct preflight_process){.pid = pid, .comm = comm, .cuda = true}, err);
}

int criu_helper_main(int argc, char **argv)
{
	_cleanup_error_ struct stasis_error *err = NULL;
	struct stat st;
	char *end;
	long fd;

	if (argc != 2)
		return cli_usage_error("criu-helper", "expected the plugin's socket descriptor");
	errno = 0;
	fd = strtol(argv[1], &end, 10);
	if (errno || *end || fd < 0 || fd > 1024 || fstat((int)fd, &st) < 0 ||
	    !S_ISSOCK(st.st_mode))
		return cli_usage_error("criu-helper", "'%s' is not a socket descriptor", argv[1]);
	/* Only the end of CRIU's socket ends it: a signal in the middle of a
	 * GPU step would leave the tree's processes locked. */
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	if (gpu_handoff_serve_helper((int)fd, refuse_process, &err) < 0)
		return cli_fail("criu-helper", err);
	return EXIT_OK;
}
