/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "cli.h"
#include "progress.h"
#include "stasis.h"
#include "util.h"

int cmd_restore(int argc, char **argv)
{
	static const struct option options[] = {
	    {"images-dir", required_argument, NULL, 'D'},
	    {"detach", no_argument, NULL, 'd'},
	    {"restore-detached", no_argument, NULL, 'd'},
	    {"gpu-map", required_argument, NULL, 'g'},
	    {"runtime", required_argument, NULL, 'r'},
	    {"namespace", required_argument, NULL, 'N'},
	    {"address", required_argument, NULL, 'A'},
	    {"bundle", required_argument, NULL, 'b'},
	    {"name", required_argument, NULL, 'n'},
	    {"thp", no_argument, NULL, 'H'},
	    {"print-stats", no_argument, NULL, 'P'},
	    {"json", no_argument, NULL, 'P'},
	    {"progress", no_argument, NULL, 'q'},
	    {"trust-key", required_argument, NULL, 'T'},
	    {NULL, 0, NULL, 0},
	};
	struct stasis_restore_options o = {0};
	const char *trust_keys[SEAL_MAX_TRUSTED];
	_cleanup_error_ struct stasis_error *err = NULL;
	struct manifest m;
	bool stats = false, progress = false;
	pid_t root = 0;
	int c, r;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "D:d", options, NULL)) != -1) {
		switch (c) {
		case 'D':
			o.dir = optarg;
			break;
		case 'd':
			o.detach = true;
			break;
		case 'g':
			o.gpu_map = optarg;
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
		case 'b':
			o.bundle = optarg;
			break;
		case 'n':
			o.name = optarg;
			break;
		case 'H':
			o.thp_always = true;
			break;
		case 'P':
			stats = true;
			break;
		case 'q':
			progress = true;
			break;
		case 'T':
			if (o.trust.nkey_files == SEAL_MAX_TRUSTED)
				return cli_usage_error("restore", "at most %d --trust-key files",
						       SEAL_MAX_TRUSTED);
			trust_keys[o.trust.nkey_files++] = optarg;
			o.trust.key_files = trust_keys;
			break;
		default:
			return cli_usage_error("restore", "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind != argc)
		return cli_usage_error("restore", "unexpected argument '%s'", argv[optind]);
	if (!o.dir)
		return cli_usage_error("restore", "missing -D DIR");

	cli_progress(stats, progress);
	manifest_init(&m);
	r = stasis_restore(&o, &m, &root, &err);
	if (r < 0) {
		manifest_free(&m);
		return cli_fail("restore", err);
	}
	if (stats) {
		_cleanup_free_ char *json = stasis_stats_json(&m);

		printf("%s\n", json);
	}
	manifest_free(&m);
	/* A container's init belongs to the runtime, never to stasis. */
	if (o.detach || o.runtime) {
		printf("%d\n", (int)root);
		return EXIT_OK;
	}
	fflush(stdout);
	return cli_wait_forwarding(root);
}
