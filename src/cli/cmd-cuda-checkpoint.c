/* SPDX-License-Identifier: MIT */
/* A drop-in for NVIDIA's cuda-checkpoint utility: the same options, output
 * and exit status, so that CRIU's cuda plugin, gVisor and scripts written
 * for it work unchanged; the calls go straight to the driver API. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cuda-api.h"
#include "util.h"

static const char help_text[] =
    "CUDA checkpoint and restore utility.\n"
    "Toggles the state of CUDA within a process between suspended and running.\n"
    "(stasis implementation, calling the driver's checkpoint API directly)\n"
    "\n"
    "    --toggle --pid <value>\n"
    "        Toggle the state of CUDA in the specified process: a running process is\n"
    "        locked and checkpointed, a checkpointed one restored and unlocked.\n"
    "\n"
    "    --get-state --pid <value>\n"
    "        Print the CUDA state of the process: running, locked, checkpointed or failed.\n"
    "\n"
    "    --get-restore-tid --pid <value>\n"
    "        Print the thread ID of the process's CUDA restore thread.\n"
    "\n"
    "    --action <value> --pid <value> [--timeout <value>] [--device-map <value>]\n"
    "        Perform one step: lock, checkpoint, restore or unlock.\n"
    "        --timeout <ms>   lock timeout in milliseconds (0: none)\n"
    "        --device-map old_uuid=new_uuid,...   GPUs to restore onto\n"
    "\n"
    "    --help, -h\n"
    "        Print this help.\n";

struct cc_options {
	bool toggle, get_state, get_tid;
	const char *action;
	const char *device_map;
	pid_t pid;
	unsigned int timeout_ms;
};

static int parse_device_map(const char *map, struct cuda_gpu_pair *pairs, unsigned int *n)
{
	_cleanup_free_ char *copy = strdup(map);
	char *save = NULL;

	*n = 0;
	for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(item, '=');

		if (!eq || *n == 64)
			return -1;
		*eq = '\0';
		if (cuda_uuid_parse(item, &pairs[*n].old_uuid) < 0 ||
		    cuda_uuid_parse(eq + 1, &pairs[*n].new_uuid) < 0)
			return -1;
		(*n)++;
	}
	return 0;
}

static int report(cuda_result r, const char *what, pid_t pid)
{
	if (r == CUDA_RES_SUCCESS)
		return EXIT_SUCCESS;
	fprintf(stderr, "Could not %s process %d: %s\n", what, (int)pid, cuda_result_name(r));
	return EXIT_FAILURE;
}

static int do_action(const struct cc_options *o)
{
	struct cuda_gpu_pair pairs[64];
	unsigned int npairs = 0;

	if (strcmp(o->action, "lock") == 0)
		return report(cuda_lock(o->pid, o->timeout_ms), "lock", o->pid);
	if (strcmp(o->action, "checkpoint") == 0)
		return report(cuda_checkpoint(o->pid), "checkpoint", o->pid);
	if (strcmp(o->action, "unlock") == 0)
		return report(cuda_unlock(o->pid), "unlock", o->pid);
	if (strcmp(o->action, "restore") == 0) {
		if (o->device_map && parse_device_map(o->device_map, pairs, &npairs) < 0) {
			fprintf(stderr, "Invalid --device-map value: %s\n", o->device_map);
			return EXIT_FAILURE;
		}
		return report(cuda_restore(o->pid, pairs, npairs), "restore", o->pid);
	}
	fprintf(stderr, "Unknown action: %s\n", o->action);
	return EXIT_FAILURE;
}

static int do_toggle(const struct cc_options *o)
{
	enum cuda_process_state state;
	cuda_result r = cuda_get_state(o->pid, &state);

	if (r != CUDA_RES_SUCCESS)
		return report(r, "get state of", o->pid);
	if (state == CUDA_PROCESS_RUNNING) {
		r = cuda_lock(o->pid, o->timeout_ms);
		if (r == CUDA_RES_SUCCESS && (r = cuda_checkpoint(o->pid)) != CUDA_RES_SUCCESS)
			cuda_unlock(o->pid); /* never leave it locked */
		return report(r, "suspend", o->pid);
	}
	if (state == CUDA_PROCESS_CHECKPOINTED) {
		r = cuda_restore(o->pid, NULL, 0);
		if (r == CUDA_RES_SUCCESS)
			r = cuda_unlock(o->pid);
		return report(r, "resume", o->pid);
	}
	if (state == CUDA_PROCESS_LOCKED)
		return report(cuda_unlock(o->pid), "unlock", o->pid);
	fprintf(stderr, "Process %d is in state %s and cannot be toggled\n", (int)o->pid,
		cuda_state_name(state));
	return EXIT_FAILURE;
}

static int parse(int argc, char **argv, struct cc_options *o)
{
	static const struct option options[] = {
	    {"toggle", no_argument, NULL, 'T'},
	    {"get-state", no_argument, NULL, 'g'},
	    {"get-restore-tid", no_argument, NULL, 'r'},
	    {"action", required_argument, NULL, 'a'},
	    {"pid", required_argument, NULL, 'p'},
	    {"timeout", required_argument, NULL, 't'},
	    {"device-map", required_argument, NULL, 'm'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	uint64_t timeout;
	int c;

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "hp:t:", options, NULL)) != -1) {
		switch (c) {
		case 'T':
			o->toggle = true;
			break;
		case 'g':
			o->get_state = true;
			break;
		case 'r':
			o->get_tid = true;
			break;
		case 'a':
			o->action = optarg;
			break;
		case 'p':
			if (!cli_parse_pid(optarg, &o->pid))
				return -1;
			break;
		case 't':
			if (parse_uint_in(optarg, 0, UINT_MAX, &timeout) < 0)
				return -1;
			o->timeout_ms = (unsigned int)timeout;
			break;
		case 'm':
			o->device_map = optarg;
			break;
		case 'h':
			fputs(help_text, stdout);
			exit(EXIT_SUCCESS);
		default:
			return -1;
		}
	}
	if (optind != argc || !o->pid || o->toggle + o->get_state + o->get_tid + !!o->action != 1)
		return -1;
	return 0;
}

int cmd_cuda_checkpoint(int argc, char **argv)
{
	_cleanup_error_ struct stasis_error *err = NULL;
	struct cc_options o = {0};

	if (argc < 2) {
		fputs(help_text, stdout);
		return EXIT_FAILURE;
	}
	if (parse(argc, argv, &o) < 0) {
		fputs(help_text, stderr);
		return EXIT_FAILURE;
	}
	if (cuda_load(&err) < 0) {
		fprintf(stderr, "%s\n", err->message);
		return EXIT_FAILURE;
	}
	if (o.get_state) {
		enum cuda_process_state state;
		cuda_result r = cuda_get_state(o.pid, &state);

		if (r != CUDA_RES_SUCCESS)
			return report(r, "get state of", o.pid);
		printf("%s\n", cuda_state_name(state));
		return EXIT_SUCCESS;
	}
	if (o.get_tid) {
		int tid = 0;
		cuda_result r = cuda_get_restore_tid(o.pid, &tid);

		if (r != CUDA_RES_SUCCESS)
			return report(r, "get restore thread of", o.pid);
		printf("%d\n", tid);
		return EXIT_SUCCESS;
	}
	if (o.toggle)
		return do_toggle(&o);
	return do_action(&o);
}
