/* SPDX-License-Identifier: MIT */
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "image-archive.h"
#include "progress.h"
#include "run-work.h"
#include "stasis.h"
#include "util.h"

enum {
	OPT_TCP_ESTABLISHED = 256,
	OPT_TIMEOUT,
	OPT_RUNTIME,
	OPT_NAMESPACE,
	OPT_ADDRESS,
	OPT_THP,
	OPT_NO_THP,
	OPT_COMPRESS,
	OPT_STAGE,
	OPT_NO_STAGE,
	OPT_STATS,
	OPT_PROGRESS,
	OPT_EXPORT,
};

/* Options that mean something only beside another: the first given
 * without it, and what it needs. */
static int check_combinations(const struct stasis_checkpoint_options *o, pid_t tree)
{
	const char *tree_only = tree			  ? "-t"
				: o->shell_job		  ? "--shell-job"
				: o->tcp_established	  ? "--tcp-established"
				: o->ext_unix_sk	  ? "--ext-unix-sk"
				: o->criu_log.file	  ? "-o"
				: o->criu_log.level_given ? "-v"
							  : NULL;

	if (o->stage && o->no_stage)
		return cli_usage_error("checkpoint",
				       "--stage and --no-stage contradict each other");
	if (o->thp_always && o->no_thp)
		return cli_usage_error("checkpoint", "--thp and --no-thp contradict each other");
	if ((o->stage || o->no_stage) && !o->leave_running)
		return cli_usage_error("checkpoint", "%s needs --leave-running",
				       o->stage ? "--stage" : "--no-stage");
	if ((o->namespace || o->address) && (!o->runtime || strcmp(o->runtime, "containerd")))
		return cli_usage_error("checkpoint", "%s needs --runtime containerd",
				       o->namespace ? "--namespace" : "--address");
	/* A container's CRIU is its runtime's, run with the runtime's
	 * options. */
	if (o->runtime && tree_only)
		return cli_usage_error("checkpoint",
				       "%s is for a process tree, not --runtime %s (whose CRIU "
				       "runc runs with its own options)",
				       tree_only, o->runtime);
	return EXIT_OK;
}

int cmd_checkpoint(int argc, char **argv)
{
	static const char shorts[] = ":D:Rjxt:v::o:";
	static const struct option options[] = {
	    {"images-dir", required_argument, NULL, 'D'},
	    {"leave-running", no_argument, NULL, 'R'},
	    {"shell-job", no_argument, NULL, 'j'},
	    {"tree", required_argument, NULL, 't'},
	    {"verbosity", optional_argument, NULL, 'v'},
	    {"log-file", required_argument, NULL, 'o'},
	    {"tcp-established", no_argument, NULL, OPT_TCP_ESTABLISHED},
	    {"ext-unix-sk", no_argument, NULL, 'x'},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"runtime", required_argument, NULL, OPT_RUNTIME},
	    {"namespace", required_argument, NULL, OPT_NAMESPACE},
	    {"address", required_argument, NULL, OPT_ADDRESS},
	    {"thp", no_argument, NULL, OPT_THP},
	    {"no-thp", no_argument, NULL, OPT_NO_THP},
	    {"compress", no_argument, NULL, OPT_COMPRESS},
	    {"no-stage", no_argument, NULL, OPT_NO_STAGE},
	    {"stage", no_argument, NULL, OPT_STAGE},
	    {"print-stats", no_argument, NULL, OPT_STATS},
	    {"json", no_argument, NULL, OPT_STATS},
	    {"progress", no_argument, NULL, OPT_PROGRESS},
	    {"export", required_argument, NULL, OPT_EXPORT},
	    {NULL, 0, NULL, 0},
	};
	struct stasis_checkpoint_options o = {0};
	const char *export = NULL;
	char work[PATH_MAX] = "";
	int export_fd = -1;
	bool checkpointed;
	_cleanup_error_ struct stasis_error *err = NULL;
	struct manifest m;
	bool stats = false, progress = false;
	pid_t tree = 0;
	int c, r;

	opterr = 0;
	while ((c = getopt_long(argc, argv, shorts, options, NULL)) != -1) {
		switch (c) {
		case 'D':
			o.dir = optarg;
			break;
		case 'R':
			o.leave_running = true;
			break;
		case 'j':
			o.shell_job = true;
			break;
		case 't':
			if (!cli_parse_pid(optarg, &tree))
				return cli_usage_error("checkpoint", "-t '%s' is not a PID",
						       optarg);
			break;
		case 'v':
		case 'o':
			r = cli_parse_criu_log("checkpoint", c, optarg, &o.criu_log);
			if (r != EXIT_OK)
				return r;
			break;
		case OPT_TCP_ESTABLISHED:
			o.tcp_established = true;
			break;
		case 'x':
			o.ext_unix_sk = true;
			break;
		case OPT_TIMEOUT:
			if (!cli_parse_timeout(optarg, &o.lock_timeout_ms))
				return cli_timeout_error("checkpoint", optarg);
			break;
		case OPT_RUNTIME:
			o.runtime = optarg;
			break;
		case OPT_NAMESPACE:
			o.namespace = optarg;
			break;
		case OPT_ADDRESS:
			o.address = optarg;
			break;
		case OPT_THP:
			o.thp_always = true;
			break;
		case OPT_NO_THP:
			o.no_thp = true;
			break;
		case OPT_COMPRESS:
			o.compress = true;
			break;
		case OPT_NO_STAGE:
			o.no_stage = true;
			break;
		case OPT_STAGE:
			o.stage = true;
			break;
		case OPT_STATS:
			stats = true;
			break;
		case OPT_PROGRESS:
			progress = true;
			break;
		case OPT_EXPORT:
			export = optarg;
			break;
		default:
			return cli_option_error("checkpoint", c, argv, shorts);
		}
	}
	r = check_combinations(&o, tree);
	if (r != EXIT_OK)
		return r;
	/* The tree's PID as CRIU takes it (-t PID) or as stasis does. */
	if (optind + (tree ? 0 : 1) < argc)
		return cli_usage_error("checkpoint", "unexpected argument '%s'",
				       argv[optind + (tree ? 0 : 1)]);
	if (optind == argc && !tree)
		return cli_usage_error("checkpoint", o.runtime ? "expected one container"
							       : "expected one PID (or -t PID)");
	if (tree)
		o.pid = tree;
	else if (o.runtime)
		o.container = argv[optind];
	else if (!cli_parse_pid(argv[optind], &o.pid))
		return cli_usage_error("checkpoint", "'%s' is not a PID", argv[optind]);
	if (!o.dir && !export)
		return cli_usage_error("checkpoint", "missing -D DIR (or --export FILE)");

	cli_progress(stats, progress);
	stasis_install_interrupt_handlers();
	manifest_init(&m);
	/* The archive's file is made before anything changes; with --export
	 * alone the image goes through a work folder of root's. */
	r = export ? (export_fd = image_archive_create(export, &err)) : 0;
	if (r >= 0 && !o.dir)
		r = run_work_make("export", work, sizeof(work), &err);
	if (r >= 0 && work[0])
		o.dir = work;
	if (r >= 0)
		r = stasis_checkpoint(&o, &m, &err);
	checkpointed = r >= 0;
	if (r >= 0 && export) {
		r = image_archive_write(o.dir, &m, export_fd, export, &err);
		/* The workload may be gone: its image stays where it is. */
		if (r < 0 && work[0])
			stasis_error_hint(&err, "the image is kept in %s", work);
	}
	if (export_fd >= 0) {
		close(export_fd);
		if (r < 0)
			unlink(export);
	}
	/* Kept only where it holds the one copy of an image whose archive
	 * failed. */
	if (work[0] && (r >= 0 || !checkpointed))
		remove_dir_tree(work);
	if (r < 0) {
		manifest_free(&m);
		return cli_fail("checkpoint", err);
	}
	if (stats) {
		_cleanup_free_ char *json = stasis_stats_json(&m);

		printf("%s\n", json);
	}
	manifest_free(&m);
	return EXIT_OK;
}
