/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cli.h"
#include "gpumap.h"
#include "image-archive.h"
#include "progress.h"
#include "run-work.h"
#include "stasis.h"
#include "util.h"

enum {
	OPT_GPU_MAP = 256,
	OPT_RUNTIME,
	OPT_NAMESPACE,
	OPT_ADDRESS,
	OPT_BUNDLE,
	OPT_NAME,
	OPT_THP,
	OPT_STATS,
	OPT_TRUST_KEY,
	OPT_PROGRESS,
	OPT_TCP_ESTABLISHED,
	OPT_IMPORT,
};

/* Options that mean something only beside another: the first given
 * without it, and what it needs. */
static int check_combinations(const struct stasis_restore_options *o)
{
	const char *runtime_only = o->name ? "--name" : o->bundle ? "--bundle" : NULL;
	const char *containerd_only = o->namespace ? "--namespace"
				      : o->address ? "--address"
						   : NULL;

	if (runtime_only && !o->runtime)
		return cli_usage_error("restore", "%s needs --runtime runc or containerd",
				       runtime_only);
	if (containerd_only && (!o->runtime || strcmp(o->runtime, "containerd")))
		return cli_usage_error("restore", "%s needs --runtime containerd", containerd_only);
	if (o->runtime && (o->criu_log.file || o->criu_log.level_given))
		return cli_usage_error("restore",
				       "%s is for a process tree, not --runtime %s (whose CRIU "
				       "runc runs with its own options)",
				       o->criu_log.file ? "-o" : "-v", o->runtime);
	return EXIT_OK;
}

int cmd_restore(int argc, char **argv)
{
	static const char shorts[] = ":D:djxv::o:";
	static const struct option options[] = {
	    {"images-dir", required_argument, NULL, 'D'},
	    {"import", required_argument, NULL, OPT_IMPORT},
	    {"detach", no_argument, NULL, 'd'},
	    {"restore-detached", no_argument, NULL, 'd'},
	    {"shell-job", no_argument, NULL, 'j'},
	    {"verbosity", optional_argument, NULL, 'v'},
	    {"log-file", required_argument, NULL, 'o'},
	    {"tcp-established", no_argument, NULL, OPT_TCP_ESTABLISHED},
	    {"ext-unix-sk", no_argument, NULL, 'x'},
	    {"gpu-map", required_argument, NULL, OPT_GPU_MAP},
	    {"runtime", required_argument, NULL, OPT_RUNTIME},
	    {"namespace", required_argument, NULL, OPT_NAMESPACE},
	    {"address", required_argument, NULL, OPT_ADDRESS},
	    {"bundle", required_argument, NULL, OPT_BUNDLE},
	    {"name", required_argument, NULL, OPT_NAME},
	    {"thp", no_argument, NULL, OPT_THP},
	    {"print-stats", no_argument, NULL, OPT_STATS},
	    {"json", no_argument, NULL, OPT_STATS},
	    {"progress", no_argument, NULL, OPT_PROGRESS},
	    {"trust-key", required_argument, NULL, OPT_TRUST_KEY},
	    {NULL, 0, NULL, 0},
	};
	struct stasis_restore_options o = {0};
	const char *import = NULL;
	char work[PATH_MAX] = "";
	const char *trust_keys[SEAL_MAX_TRUSTED];
	_cleanup_error_ struct stasis_error *err = NULL;
	struct gpu_map map;
	struct manifest m;
	bool stats = false, progress = false;
	pid_t root = 0;
	int c, r;

	opterr = 0;
	while ((c = getopt_long(argc, argv, shorts, options, NULL)) != -1) {
		switch (c) {
		case 'D':
			o.dir = optarg;
			break;
		case 'd':
			o.detach = true;
			break;
		case 'j':
			o.shell_job = true;
			break;
		case 'v':
		case 'o':
			r = cli_parse_criu_log("restore", c, optarg, &o.criu_log);
			if (r != EXIT_OK)
				return r;
			break;
		case OPT_TCP_ESTABLISHED:
			o.tcp_established = true;
			break;
		case 'x':
			o.ext_unix_sk = true;
			break;
		case OPT_GPU_MAP:
			/* Its form now; its GPUs against the image's before
			 * anything runs. */
			if (gpu_map_parse(optarg, &map, &err) < 0)
				return cli_usage_error("restore", "%s", err->message);
			o.gpu_map = optarg;
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
		case OPT_BUNDLE:
			o.bundle = optarg;
			break;
		case OPT_NAME:
			o.name = optarg;
			break;
		case OPT_THP:
			o.thp_always = true;
			break;
		case OPT_STATS:
			stats = true;
			break;
		case OPT_PROGRESS:
			progress = true;
			break;
		case OPT_TRUST_KEY:
			if (o.trust.nkey_files == SEAL_MAX_TRUSTED)
				return cli_usage_error("restore", "at most %d --trust-key files",
						       SEAL_MAX_TRUSTED);
			trust_keys[o.trust.nkey_files++] = optarg;
			o.trust.key_files = trust_keys;
			break;
		case OPT_IMPORT:
			import = optarg;
			break;
		default:
			return cli_option_error("restore", c, argv, shorts);
		}
	}
	if (optind != argc)
		return cli_usage_error("restore", "unexpected argument '%s'", argv[optind]);
	if (o.dir && import)
		return cli_usage_error("restore", "-D and --import name two images: give one");
	if (!o.dir && !import)
		return cli_usage_error("restore", "missing -D DIR (or --import FILE)");
	r = check_combinations(&o);
	if (r != EXIT_OK)
		return r;

	cli_progress(stats, progress);
	/* Ctrl-C stops the restore: the tree it brought back is killed. */
	stasis_install_interrupt_handlers();
	manifest_init(&m);
	/* An archive is read into a work folder of root's, for this restore. */
	r = import ? run_work_make("import", work, sizeof(work), &err) : 0;
	if (r == 0 && import)
		r = image_archive_read(import, work, &err);
	if (r == 0 && import)
		o.dir = work;
	if (r == 0)
		r = stasis_restore(&o, &m, &root, &err);
	if (work[0])
		remove_dir_tree(work);
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
