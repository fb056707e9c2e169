/* SPDX-License-Identifier: MIT */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "migrate.h"
#include "progress.h"
#include "stasis.h"
#include "util.h"

enum {
	OPT_JSON = CLI_OPT_JSON,
	OPT_TO,
	OPT_KEY_FILE,
	OPT_COMPRESS,
	OPT_TIMEOUT,
	OPT_RUNTIME,
};

int cmd_migrate(int argc, char **argv)
{
	static const char shorts[] = ":t:";
	static const struct option options[] = {
	    {"tree", required_argument, NULL, 't'},
	    {"to", required_argument, NULL, OPT_TO},
	    {"key-file", required_argument, NULL, OPT_KEY_FILE},
	    {"compress", required_argument, NULL, OPT_COMPRESS},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"runtime", required_argument, NULL, OPT_RUNTIME},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"print-stats", no_argument, NULL, OPT_JSON},
	    {NULL, 0, NULL, 0},
	};
	struct stasis_migrate_options o = {0};
	_cleanup_error_ struct stasis_error *err = NULL;
	struct stasis_migrate_stats st;
	struct manifest m;
	bool json = false;
	pid_t tree = 0;
	int c, r;

	opterr = 0;
	while ((c = getopt_long(argc, argv, shorts, options, NULL)) != -1) {
		switch (c) {
		case 't':
			if (!cli_parse_pid(optarg, &tree))
				return cli_usage_error("migrate", "-t '%s' is not a PID", optarg);
			break;
		case OPT_TO:
			o.to = optarg;
			break;
		case OPT_KEY_FILE:
			o.key_file = optarg;
			break;
		case OPT_COMPRESS:
			if (stasis_compress_parse(optarg, &o.compress) < 0)
				return cli_usage_error("migrate",
						       "--compress wants auto, on or off, not '%s'",
						       optarg);
			break;
		case OPT_TIMEOUT:
			if (!cli_parse_timeout(optarg, &o.lock_timeout_ms))
				return cli_timeout_error("migrate", optarg);
			break;
		case OPT_RUNTIME:
			o.runtime = optarg;
			break;
		case OPT_JSON:
			json = true;
			break;
		default:
			return cli_option_error("migrate", c, argv, shorts);
		}
	}
	if (tree && o.runtime)
		return cli_usage_error("migrate",
				       "-t is for a process tree, not --runtime %s (give the "
				       "container's id)",
				       o.runtime);
	/* The tree's PID as CRIU takes it (-t PID) or as stasis does. */
	if (optind + (tree ? 0 : 1) < argc)
		return cli_usage_error("migrate", "unexpected argument '%s'",
				       argv[optind + (tree ? 0 : 1)]);
	if (optind == argc && !tree)
		return cli_usage_error("migrate", o.runtime ? "expected one container"
							    : "expected one PID (or -t PID)");
	if (tree)
		o.pid = tree;
	else if (o.runtime)
		o.container = argv[optind];
	else if (!cli_parse_pid(argv[optind], &o.pid))
		return cli_usage_error("migrate", "'%s' is not a PID", argv[optind]);
	if (!o.to || !o.key_file)
		return cli_usage_error("migrate", "missing --to HOST:PORT or --key-file FILE");

	progress_enable(cli_decorate(json));
	stasis_install_interrupt_handlers();
	manifest_init(&m);
	r = stasis_migrate(&o, &m, &st, &err);
	if (r == 0 && json) {
		_cleanup_free_ char *text = stasis_migrate_json(&m, &st);

		printf("%s\n", text ? text : "{}");
	} else if (r == 0 && st.container[0]) {
		char bytes[32];

		printf("migrated container '%s' to %s: '%s' there, init PID %d, %s, paused %.2f s; "
		       "GPUs: %s\n",
		       o.container, st.peer, st.container, (int)st.restored_pid,
		       format_bytes(st.raw_bytes, bytes, sizeof(bytes)), (double)st.pause_us / 1e6,
		       st.gpus[0] ? st.gpus : "none");
	} else if (r == 0) {
		char bytes[32];

		printf("migrated to %s: PID %d there, %s, paused %.2f s; GPUs: %s\n", st.peer,
		       (int)st.restored_pid, format_bytes(st.raw_bytes, bytes, sizeof(bytes)),
		       (double)st.pause_us / 1e6, st.gpus[0] ? st.gpus : "none");
	}
	manifest_free(&m);
	return r < 0 ? cli_fail("migrate", err) : EXIT_OK;
}
