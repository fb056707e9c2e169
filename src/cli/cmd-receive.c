/* SPDX-License-Identifier: MIT */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gpumap.h"
#include "migrate.h"
#include "progress.h"
#include "stasis.h"
#include "util.h"

/* One line per migration: JSON with --json, words otherwise; a failed
 * one on stderr, as every error. */
static void report(void *ctx, const struct manifest *m, const struct stasis_migrate_stats *st,
		   const struct stasis_error *err)
{
	bool json = *(bool *)ctx;
	char bytes[32];

	if (err) {
		_cleanup_free_ char *line = stasis_error_format(err);

		fprintf(stderr, "stasis receive: error: %s\n", line ? line : "unknown error");
		return;
	}
	if (json) {
		_cleanup_free_ char *text = stasis_migrate_json(m, st);

		printf("%s\n", text ? text : "{}");
	} else if (st->container[0]) {
		printf("restored %s container '%s' (%zu process%s) from %s, init PID %d (%s); "
		       "GPUs: %s\n",
		       m->container.runtime, st->container, m->nprocs, m->nprocs == 1 ? "" : "es",
		       st->peer, (int)st->restored_pid,
		       format_bytes(st->raw_bytes, bytes, sizeof(bytes)), st->gpus);
	} else {
		printf("restored %zu process%s from %s as PID %d (%s); GPUs: %s\n", m->nprocs,
		       m->nprocs == 1 ? "" : "es", st->peer, (int)st->restored_pid,
		       format_bytes(st->raw_bytes, bytes, sizeof(bytes)), st->gpus);
	}
	fflush(stdout);
}

enum {
	OPT_JSON = CLI_OPT_JSON,
	OPT_LISTEN,
	OPT_KEY_FILE,
	OPT_GPU_MAP,
	OPT_ONCE,
	OPT_NAME,
};

int cmd_receive(int argc, char **argv)
{
	static const struct option options[] = {
	    {"listen", required_argument, NULL, OPT_LISTEN},
	    {"key-file", required_argument, NULL, OPT_KEY_FILE},
	    {"gpu-map", required_argument, NULL, OPT_GPU_MAP},
	    {"once", no_argument, NULL, OPT_ONCE},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"name", required_argument, NULL, OPT_NAME},
	    {NULL, 0, NULL, 0},
	};
	struct stasis_receive_options o = {0};
	struct gpu_map map;
	_cleanup_error_ struct stasis_error *err = NULL;
	bool json = false;
	int c, r;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", options, NULL)) != -1) {
		switch (c) {
		case OPT_LISTEN:
			o.listen = optarg;
			break;
		case OPT_KEY_FILE:
			o.key_file = optarg;
			break;
		case OPT_GPU_MAP:
			if (strcmp(optarg, "auto") && gpu_map_parse(optarg, &map, &err) < 0)
				return cli_usage_error("receive", "%s", err->message);
			o.gpu_map = optarg;
			break;
		case OPT_ONCE:
			o.once = true;
			break;
		case OPT_NAME:
			o.name = optarg;
			break;
		case OPT_JSON:
			json = true;
			break;
		default:
			return cli_option_error("receive", c, argv, ":");
		}
	}
	if (optind != argc)
		return cli_usage_error("receive", "unexpected argument '%s'", argv[optind]);
	if (!o.listen || !o.key_file)
		return cli_usage_error("receive", "missing --listen ADDR:PORT or --key-file FILE");

	progress_enable(cli_decorate(json));
	stasis_install_interrupt_handlers();
	r = stasis_receive(&o, report, &json, &err);
	/* A failed migration was reported already, without err; setup
	 * errors were not. */
	if (r < 0 && err)
		return cli_fail("receive", err);
	return r < 0 ? EXIT_FAILED : EXIT_OK;
}
