/* SPDX-License-Identifier: MIT */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "migrate.h"
#include "progress.h"
#include "stasis.h"
#include "util.h"

int cmd_migrate(int argc, char **argv)
{
	static const struct option options[] = {
	    {"to", required_argument, NULL, 'o'},	{"key-file", required_argument, NULL, 'k'},
	    {"compress", required_argument, NULL, 'z'}, {"timeout", required_argument, NULL, 't'},
	    {"runtime", required_argument, NULL, 'r'},	{"json", no_argument, NULL, 'P'},
	    {"print-stats", no_argument, NULL, 'P'},	{NULL, 0, NULL, 0},
	};
	struct stasis_migrate_options o = {0};
	_cleanup_error_ struct stasis_error *err = NULL;
	struct stasis_migrate_stats st;
	struct manifest m;
	bool json = false;
	int c, r;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "t:", options, NULL)) != -1) {
		switch (c) {
		case 'o':
			o.to = optarg;
			break;
		case 'k':
			o.key_file = optarg;
			break;
		case 'z':
			if (stasis_compress_parse(optarg, &o.compress) < 0)
				return cli_usage_error("migrate",
						       "--compress wants auto, on or off");
			break;
		case 't':
			o.lock_timeout_ms = (unsigned int)strtoul(optarg, NULL, 10);
			if (!o.lock_timeout_ms)
				return cli_usage_error("migrate",
						       "--timeout wants milliseconds > 0");
			break;
		case 'r':
			o.runtime = optarg;
			break;
		case 'P':
			json = true;
			break;
		default:
			return cli_usage_error("migrate", "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return cli_usage_error("migrate",
				       o.runtime ? "expected one container" : "expected one PID");
	if (o.runtime)
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
