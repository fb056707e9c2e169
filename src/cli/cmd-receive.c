/* SPDX-License-Identifier: MIT */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
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

int cmd_receive(int argc, char **argv)
{
	static const struct option options[] = {
	    {"listen", required_argument, NULL, 'l'},
	    {"key-file", required_argument, NULL, 'k'},
	    {"gpu-map", required_argument, NULL, 'g'},
	    {"once", no_argument, NULL, '1'},
	    {"json", no_argument, NULL, 'P'},
	    {"name", required_argument, NULL, 'n'},
	    {NULL, 0, NULL, 0},
	};
	struct stasis_receive_options o = {0};
	_cleanup_error_ struct stasis_error *err = NULL;
	bool json = false;
	int c, r;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (c) {
		case 'l':
			o.listen = optarg;
			break;
		case 'k':
			o.key_file = optarg;
			break;
		case 'g':
			o.gpu_map = optarg;
			break;
		case '1':
			o.once = true;
			break;
		case 'n':
			o.name = optarg;
			break;
		case 'P':
			json = true;
			break;
		default:
			return cli_usage_error("receive", "unknown option '%s'", argv[optind - 1]);
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
