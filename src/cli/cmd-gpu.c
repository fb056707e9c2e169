/* SPDX-License-Identifier: MIT */
/* stasis gpu suspend|resume PID...: GPU state into host memory and back, in
 * place, all processes in parallel, rolled back on any failure. */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gpu.h"
#include "nccl-hold.h"
#include "nccl.h"
#include "peer-limit.h"
#include "preflight-checks.h"
#include "proc.h"
#include "stasis.h"
#include "util.h"

static int preflight(struct gpu_batch *batch, bool suspend, struct stasis_error **err)
{
	char comm[32];

	for (size_t i = 0; i < batch->n; i++) {
		struct gpu_process *p = &batch->procs[i];
		enum cuda_process_state state;
		cuda_result r = cuda_get_state(p->pid, &state);

		if (r != CUDA_RES_SUCCESS) {
			cuda_error(err, r, "getting the CUDA state", p->pid);
			return stasis_error_hint(err, "is PID %d a CUDA process? (stasis ps)",
						 (int)p->pid);
		}
		p->state = state;
		if (suspend && state != CUDA_PROCESS_RUNNING) {
			stasis_error_set(err, EBUSY, STASIS_DOMAIN_CUDA, 0,
					 "PID %d is %s, not running", (int)p->pid,
					 cuda_state_name(state));
			return stasis_error_hint(err, "only running processes can be suspended");
		}
		if (suspend &&
		    preflight_process_refuse(
			&(struct preflight_process){.pid = p->pid,
						    .comm = proc_comm(p->pid, comm, sizeof(comm)),
						    .cuda = true},
			err) < 0)
			return -1;
		if (!suspend && state != CUDA_PROCESS_CHECKPOINTED &&
		    !(state == CUDA_PROCESS_RUNNING && nccl_rank_held(p->pid))) {
			stasis_error_set(err, EBUSY, STASIS_DOMAIN_CUDA, 0,
					 "PID %d is %s, not checkpointed", (int)p->pid,
					 cuda_state_name(state));
			return stasis_error_hint(err, "only suspended processes can be resumed");
		}
	}
	batch->lock_rounds = nccl_lock_rounds(batch);
	if (suspend && peer_limit_check(batch, err) < 0)
		return stasis_error_cause(err, "peer-access");
	return 0;
}

static void print_result(const struct gpu_batch *batch, bool suspend, bool json, uint64_t total)
{
	json_object *root, *procs;

	if (!json) {
		for (size_t i = 0; i < batch->n; i++) {
			const struct gpu_process *p = &batch->procs[i];

			if (suspend)
				printf("PID %d: checkpointed (lock %.1f ms, checkpoint %.1f ms)\n",
				       (int)p->pid, p->lock_us / 1000.0, p->checkpoint_us / 1000.0);
			else
				printf("PID %d: running (restore %.1f ms, unlock %.1f ms)\n",
				       (int)p->pid, p->restore_us / 1000.0, p->unlock_us / 1000.0);
		}
		printf("%zu process%s %s in %.1f ms\n", batch->n, batch->n == 1 ? "" : "es",
		       suspend ? "suspended" : "resumed", total / 1000.0);
		return;
	}
	root = json_object_new_object();
	procs = json_object_new_array();
	for (size_t i = 0; i < batch->n; i++) {
		const struct gpu_process *p = &batch->procs[i];
		json_object *o = json_object_new_object();

		json_object_object_add(o, "pid", json_object_new_int(p->pid));
		json_object_object_add(o, "state",
				       json_object_new_string(cuda_state_name(p->state)));
		json_object_object_add(
		    o, suspend ? "lock_us" : "restore_us",
		    json_object_new_uint64(suspend ? p->lock_us : p->restore_us));
		json_object_object_add(
		    o, suspend ? "checkpoint_us" : "unlock_us",
		    json_object_new_uint64(suspend ? p->checkpoint_us : p->unlock_us));
		json_object_array_add(procs, o);
	}
	json_object_object_add(root, "processes", procs);
	json_object_object_add(root, "total_us", json_object_new_uint64(total));
	printf("%s\n", json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN));
	json_object_put(root);
}

int cmd_gpu(int argc, char **argv)
{
	static const struct option options[] = {
	    {"timeout", required_argument, NULL, CLI_OPT_JSON + 1},
	    {"json", no_argument, NULL, CLI_OPT_JSON},
	    {NULL, 0, NULL, 0},
	};
	_cleanup_error_ struct stasis_error *err = NULL;
	struct gpu_batch batch = {.lock_timeout_ms = GPU_DEFAULT_LOCK_TIMEOUT_MS};
	bool json = false, suspend;
	uint64_t start;
	int c, r;

	if (argc < 2 || (strcmp(argv[1], "suspend") && strcmp(argv[1], "resume")))
		return cli_usage_error("gpu", "expected 'suspend' or 'resume'");
	suspend = strcmp(argv[1], "suspend") == 0;
	opterr = 0;
	optind = 2;
	while ((c = getopt_long(argc, argv, ":", options, NULL)) != -1) {
		if (c == CLI_OPT_JSON + 1 && !suspend)
			return cli_usage_error("gpu", "--timeout is the lock's, for gpu suspend");
		if (c == CLI_OPT_JSON + 1 && !cli_parse_timeout(optarg, &batch.lock_timeout_ms))
			return cli_timeout_error("gpu", optarg);
		else if (c == CLI_OPT_JSON)
			json = true;
		else if (c != CLI_OPT_JSON + 1)
			return cli_option_error("gpu", c, argv, ":");
	}
	if (optind == argc)
		return cli_usage_error("gpu", "expected at least one PID");
	for (int i = optind; i < argc; i++) {
		pid_t pid;

		if (!cli_parse_pid(argv[i], &pid))
			return cli_usage_error("gpu", "'%s' is not a PID", argv[i]);
		if (gpu_batch_add(&batch, pid) < 0)
			return EXIT_FAILED;
	}
	r = stasis_require_root(&err);
	if (r == 0)
		r = cuda_load(&err);
	if (r == 0)
		r = preflight(&batch, suspend, &err);
	start = now_usec();
	/* Running but held by the interposer: let go, nothing to restore. */
	if (r == 0 && !suspend && gpu_let_go_held(&batch) && !json)
		printf("NCCL ranks held by a gpu suspend that did not finish: let go\n");
	if (r == 0 && batch.n)
		r = suspend ? gpu_suspend(&batch, &err) : gpu_resume(&batch, &err);
	if (r < 0) {
		gpu_batch_free(&batch);
		return cli_fail("gpu", err);
	}
	print_result(&batch, suspend, json, now_usec() - start);
	gpu_batch_free(&batch);
	return EXIT_OK;
}
