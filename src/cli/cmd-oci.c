/* SPDX-License-Identifier: MIT */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ocispec.h"
#include "util.h"

static int gpu_spec(int argc, char **argv)
{
	static const struct option options[] = {
	    {"gpus", required_argument, NULL, CLI_OPT_JSON + 1},
	    {"cdi", required_argument, NULL, CLI_OPT_JSON + 2},
	    {NULL, 0, NULL, 0},
	};
	_cleanup_error_ struct stasis_error *err = NULL;
	struct oci_edit_summary sum;
	const char *gpus = "all", *cdi = NULL;
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", options, NULL)) != -1) {
		if (c == CLI_OPT_JSON + 1)
			gpus = optarg;
		else if (c == CLI_OPT_JSON + 2)
			cdi = optarg;
		else
			return cli_option_error("oci", c, argv, ":");
	}
	if (optind < argc - 1)
		return cli_usage_error("oci", "unexpected argument '%s'", argv[optind + 1]);
	if (optind != argc - 1)
		return cli_usage_error("oci", "expected one CONFIG.json");
	if (oci_gpu_spec(argv[optind], gpus, cdi, &sum, &err) < 0)
		return cli_fail("oci", err);
	printf("%s: added %u device nodes, %u bind mounts, %u environment variables\n",
	       argv[optind], sum.devices, sum.mounts, sum.env);
	if (sum.hooks_skipped)
		printf("%s: %u CDI hooks not applied (stasis applies device nodes, mounts and "
		       "environment)\n",
		       argv[optind], sum.hooks_skipped);
	return EXIT_OK;
}

int cmd_oci(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "gpu-spec") != 0)
		return cli_usage_error("oci", "expected 'gpu-spec CONFIG.json'");
	return gpu_spec(argc - 1, argv + 1);
}
