/* SPDX-License-Identifier: MIT */
/* stasis check: is this machine ready for GPU checkpoints, and what to fix.
 * Without an NVIDIA driver CPU checkpoints still work: a warning. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "breakpoints.h"
#include "cli.h"
#include "criu-rpc.h"
#include "preflight-checks.h"
#include "cuda-api.h"
#include "mappings.h"
#include "nvml.h"
#include "proc.h"
#include "util.h"

enum level { OK, WARNING, ERROR };

struct report {
	bool json;
	bool gpu_driver;
	json_object *items;
	int errors, warnings;
};

static void item(struct report *rep, enum level level, const char *name, const char *remedy,
		 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void item(struct report *rep, enum level level, const char *name, const char *remedy,
		 const char *fmt, ...)
{
	static const char *const names[] = {"ok", "warning", "error"};
	char detail[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	rep->errors += level == ERROR;
	rep->warnings += level == WARNING;
	if (rep->json) {
		json_object *o = json_object_new_object();

		json_object_object_add(o, "item", json_object_new_string(name));
		json_object_object_add(o, "status", json_object_new_string(names[level]));
		json_object_object_add(o, "detail", json_object_new_string(detail));
		if (level != OK && remedy)
			json_object_object_add(o, "remedy", json_object_new_string(remedy));
		json_object_array_add(rep->items, o);
		return;
	}
	printf("%-8s %-18s %s", names[level], name, detail);
	if (level != OK && remedy)
		printf(" -> %s", remedy);
	printf("\n");
}

static void check_driver(struct report *rep)
{
	_cleanup_error_ struct stasis_error *err = NULL;
	char version[64] = "";
	int cuda;

	if (cuda_load(&err) < 0 && err->status == ENODEV) {
		item(rep, WARNING, "nvidia-driver",
		     "install the NVIDIA driver 570 or newer for GPU checkpoints",
		     "%s: process trees and containers checkpoint and restore without it, CUDA "
		     "processes do not",
		     err->message);
		return;
	}
	if (err) {
		item(rep, ERROR, "nvidia-driver", err->hint, "%s", err->message);
		return;
	}
	rep->gpu_driver = true;
	nvml_driver_version(version, sizeof(version), NULL);
	cuda = cuda_driver_version();
	if (cuda < 12080)
		item(rep, ERROR, "nvidia-driver", "upgrade to driver 570 or newer",
		     "%s (CUDA %d.%d) has no checkpoint API", version, cuda / 1000,
		     cuda % 1000 / 10);
	else if (cuda < CUDA_VERSION_GPU_REMAP)
		item(rep, WARNING, "nvidia-driver", "driver 580 or newer restores onto other GPUs",
		     "%s (CUDA %d.%d): checkpoints work, restore onto other GPUs does not", version,
		     cuda / 1000, cuda % 1000 / 10);
	else
		item(rep, OK, "nvidia-driver", NULL, "%s (CUDA %d.%d), GPU remapping supported",
		     version, cuda / 1000, cuda % 1000 / 10);
}

static bool mps_running(void)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	bool found = false;

	while (d && !found && (de = readdir(d))) {
		char comm[64];
		pid_t pid = (pid_t)atoi(de->d_name);

		if (pid <= 0)
			continue;
		proc_comm(pid, comm, sizeof(comm));
		found = strncmp(comm, "nvidia-cuda-mps", 15) == 0;
	}
	if (d)
		closedir(d);
	return found;
}

static void check_gpus(struct report *rep)
{
	_cleanup_free_ struct nvml_gpu *gpus = NULL;
	size_t n = 0;
	int persistence_off = 0, mig_on = 0;

	if (nvml_gpus(&gpus, &n, NULL) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		persistence_off += gpus[i].persistence == 0;
		mig_on += gpus[i].mig == 1;
	}
	if (persistence_off)
		item(rep, WARNING, "persistence-mode", "nvidia-smi -pm 1",
		     "off on %d of %zu GPUs: each restore pays the driver's start-up",
		     persistence_off, n);
	else
		item(rep, OK, "persistence-mode", NULL, "on for all %zu GPUs", n);
	if (mig_on)
		item(rep, ERROR, "mig", "disable MIG (nvidia-smi -mig 0)",
		     "MIG is on for %d GPUs; the driver cannot checkpoint MIG instances", mig_on);
	else
		item(rep, OK, "mig", NULL, "off");
	if (mps_running())
		item(rep, ERROR, "mps", "stop the MPS daemon (echo quit | nvidia-cuda-mps-control)",
		     "an MPS daemon runs; the driver cannot checkpoint MPS clients");
	else
		item(rep, OK, "mps", NULL, "not running");
}

/* The preflight's own check (its cause code "criu"): GPU work needs a
 * CRIU that takes stasis's settings. */
static void check_criu_settings(struct report *rep)
{
	_cleanup_error_ struct stasis_error *err = NULL;

	if (preflight_criu_for_gpus(&err) < 0)
		item(rep, WARNING, "criu-settings", err->hint,
		     "%s; processes without CUDA are saved", err->message);
	else
		item(rep, OK, "criu-settings", NULL,
		     "it takes stasis's settings (page writers, the plugin's socket, the "
		     "ghost-file rule)");
}

static void check_criu(struct report *rep)
{
	_cleanup_error_ struct stasis_error *err = NULL;
	_cleanup_error_ struct stasis_error *check_err = NULL;
	char version[32];
	int v = criu_version(&err);

	if (v < 0) {
		item(rep, ERROR, "criu", err->hint, "%s", err->message);
		return;
	}
	if (criu_run_check(&check_err) < 0)
		item(rep, ERROR, "criu", "run 'criu check' to see what is missing",
		     "CRIU %s at %s: %s", criu_version_string(v, version, sizeof(version)),
		     criu_binary(), check_err->message);
	else
		item(rep, OK, "criu", NULL, "CRIU %s at %s, 'criu check' looks good",
		     criu_version_string(v, version, sizeof(version)), criu_binary());
	check_criu_settings(rep);
}

/* CRIU's own plugin folder, where make install links stasis's plugin. */
#define CRIU_PLUGIN_DIR "/usr/lib/criu"

/* Whether two paths name one file once their links are followed. */
static bool same_file(const char *a, const char *b)
{
	char ra[PATH_MAX], rb[PATH_MAX];

	return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

/* What a runtime's own checkpoint runs: runc 1.2 and later, podman and
 * containerd's CRI run the criu first on their PATH (this looks in stasis's
 * own, root's: a runtime started elsewhere may have another), which loads
 * plugins from its plugin folder. Only with stasis's CRIU and plugin there
 * do they get the GPU steps; stasis's own commands run its CRIU anyway. */
static void check_runtimes_criu(struct report *rep)
{
	char found[PATH_MAX], self[PATH_MAX], plugin[PATH_MAX + 64];
	bool on_path = criu_find_in_path("criu", found, sizeof(found));
	bool criu_ok = on_path && same_file(found, criu_binary());
	bool plugin_ok =
	    self_dir(self, sizeof(self)) == 0 &&
	    snprintf(plugin, sizeof(plugin), "%s/../lib/stasis/criu/stasis_nvidia.so", self) > 0 &&
	    same_file(plugin, CRIU_PLUGIN_DIR "/stasis_nvidia.so");

	if (criu_ok && plugin_ok)
		item(rep, OK, "runtimes-criu", NULL,
		     "runtimes run stasis's CRIU (%s) with its plugin: their own checkpoints "
		     "(runc, containerd's CRI, podman) get the GPU steps",
		     found);
	else
		item(rep, WARNING, "runtimes-criu",
		     "make install puts stasis's CRIU first on root's PATH and links its plugin "
		     "into " CRIU_PLUGIN_DIR,
		     "runtimes' own checkpoints run %s (first on this PATH)%s: no GPU steps there "
		     "(stasis's commands are not affected)",
		     on_path ? found : "no criu", plugin_ok ? "" : ", without stasis's plugin");
}

static void check_breakpoints(struct report *rep)
{
	switch (hw_breakpoints_probe(false)) {
	case HW_BREAKPOINTS_WORK:
		item(rep, OK, "hw-breakpoints", NULL, "work");
		break;
	case HW_BREAKPOINTS_BROKEN:
		item(rep, WARNING, "hw-breakpoints", "nothing to do: stasis handles it",
		     "do not fire here (a VM); stasis runs CRIU in its no-breakpoint mode "
		     "(CRIU_FAULT=130)");
		break;
	case HW_BREAKPOINTS_UNKNOWN:
		item(rep, WARNING, "hw-breakpoints", "run stasis check as root",
		     "could not be probed");
		break;
	}
}

static void check_thp(struct report *rep)
{
	_cleanup_free_ char *thp =
	    read_file_str("/sys/kernel/mm/transparent_hugepage/enabled", NULL);

	if (!thp)
		item(rep, WARNING, "huge-pages", NULL, "transparent huge pages setting unreadable");
	else if (strstr(thp, "[always]"))
		item(rep, OK, "huge-pages", NULL, "transparent huge pages: always");
	else if (strstr(thp, "[madvise]"))
		item(rep, WARNING, "huge-pages", "restore with --thp",
		     "transparent huge pages: madvise; a checkpoint sets 'always' for the "
		     "driver's copy, a restore is slower without it");
	else
		item(rep, WARNING, "huge-pages", "checkpoint and restore with --thp",
		     "transparent huge pages: never; the driver's checkpoint into host memory is "
		     "slower without 'always'");
}

/* Deleted files in /dev/shm need neither (stasis's CRIU links and opens
 * them through descriptors); a unix socket bound directly in a sticky
 * folder shared by all does, as CRIU connects its clients to it by path. */
static void check_protected_links(struct report *rep)
{
	if (mappings_links_protected())
		item(rep, OK, "protected-links", NULL,
		     "fs.protected_symlinks and fs.protected_hardlinks on");
	else
		item(rep, WARNING, "protected-links", LINKS_PROTECTION_ON,
		     "a link protection is off: trees holding a unix socket bound directly in "
		     "a sticky folder shared by all (/tmp, /dev/shm) are refused; deleted "
		     "files there are restored all the same");
}

int cmd_check(int argc, char **argv)
{
	static const struct option options[] = {
	    {"json", no_argument, NULL, CLI_OPT_JSON},
	    {NULL, 0, NULL, 0},
	};
	struct report rep = {0};
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", options, NULL)) != -1) {
		if (c != CLI_OPT_JSON)
			return cli_option_error("check", c, argv, ":");
		rep.json = true;
	}
	if (optind != argc)
		return cli_usage_error("check", "unexpected argument '%s'", argv[optind]);
	rep.items = json_object_new_array();
	if (geteuid() == 0)
		item(&rep, OK, "root", NULL, "running as root");
	else
		item(&rep, ERROR, "root", "run stasis as root",
		     "CRIU and the driver's checkpoint API need root");
	check_driver(&rep);
	check_gpus(&rep);
	check_criu(&rep);
	check_runtimes_criu(&rep);
	check_breakpoints(&rep);
	check_thp(&rep);
	check_protected_links(&rep);
	if (rep.json) {
		json_object *root = json_object_new_object();

		json_object_object_add(root, "gpu_driver", json_object_new_boolean(rep.gpu_driver));
		json_object_object_add(root, "items", rep.items);
		json_object_object_add(root, "errors", json_object_new_int(rep.errors));
		json_object_object_add(root, "warnings", json_object_new_int(rep.warnings));
		printf("%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY));
		json_object_put(root);
	} else {
		json_object_put(rep.items);
		printf("%d error%s, %d warning%s%s\n", rep.errors, rep.errors == 1 ? "" : "s",
		       rep.warnings, rep.warnings == 1 ? "" : "s",
		       rep.gpu_driver || rep.errors ? ""
						    : "; CPU checkpoints only (no NVIDIA driver)");
	}
	return rep.errors ? EXIT_FAILED : EXIT_OK;
}
