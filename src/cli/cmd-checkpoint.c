/* SPDX-License-Identifier: MIT */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "progress.h"
#include "stasis.h"
#include "util.h"

int cmd_checkpoint(int argc, char **argv)
{
	static const struct option options[] = {
	    {"images-dir", required_argument, NULL, 'D'},
	    {"leave-running", no_argument, NULL, 'R'},
	    {"shell-job", no_argument, NULL, 's'},
	    {"tcp-established", no_argument, NULL, 'T'},
	    {"timeout", required_argument, NULL, 't'},
	    {"runtime", required_argument, NULL, 'r'},
	    {"namespace", required_argument, NULL, 'N'},
	    {"address", required_argument, NULL, 'A'},
	    {"thp", no_argument, NULL, 'H'},
	    {"no-thp", no_argument, NULL, 'x'},
	    {"compress", no_argument, NULL, 'z'},
	    {"no-stage", no_argument, NULL, 'S'},
	    {"stage", no_argument, NULL, 'G'},
	    {"print-stats", no_argument, NULL, 'P'},
	    {"json", no_argument, NULL, 'P'},
	    {"progress", no_argument, NULL, 'q'},
	    {NULL, 0, NULL, 0},
	};
	struct stasis_checkpoint_options o = {0};
	_cleanup_error_ struct stasis_error *err = NULL;
	struct manifest m;
	bool stats = false, progress = false;
	int c, r;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "D:Rt:", options, NULL)) != -1) {
		switch (c) {
		case 'D':
			o.dir = optarg;
			break;
		case 'R':
			o.leave_running = true;
			break;
		case 's':
			o.shell_job = true;
			break;
		case 'T':
			o.tcp_established = true;
			break;
		case 't':
			o.lock_timeout_ms = (unsigned int)strtoul(optarg, NULL, 10);
			if (!o.lock_timeout_ms)
				return cli_usage_error("checkpoint",
						       "--timeout wants milliseconds > 0");
			break;
		case 'r':
			o.runtime = optarg;
			break;
		case 'N':
			o.namespace = optarg;
			break;
		case 'A':
			o.address = optarg;
			break;
		case 'H':
			o.thp_always = true;
			break;
		case 'x':
			o.no_thp = true;
			break;
		case 'z':
			o.compress = true;
			break;
		case 'S':
			o.no_stage = true;
			break;
		case 'G':
			o.stage = true;
			break;
		case 'P':
			stats = true;
			break;
		case 'q':
			progress = true;
			break;
		default:
			return cli_usage_error("checkpoint", "unknown option '%s'",
					       argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return cli_usage_error("checkpoint",
				       o.runtime ? "expected one container" : "expected one PID");
	if (o.runtime)
		o.container = argv[optind];
	else if (!cli_parse_pid(argv[optind], &o.pid))
		return cli_usage_error("checkpoint", "'%s' is not a PID", argv[optind]);
	if (!o.dir)
		return cli_usage_error("checkpoint", "missing -D DIR");
	if (o.stage && o.no_stage)
		return cli_usage_error("checkpoint",
				       "--stage and --no-stage contradict each other");
	if (o.thp_always && o.no_thp)
		return cli_usage_error("checkpoint", "--thp and --no-thp contradict each other");

	cli_progress(stats, progress);
	stasis_install_interrupt_handlers();
	manifest_init(&m);
	r = stasis_checkpoint(&o, &m, &err);
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
