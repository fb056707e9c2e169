/* SPDX-License-Identifier: MIT */
/* stasis ps: every CUDA process of the machine, what it holds, and what
 * would block its checkpoint; without an NVIDIA driver, the roots of the
 * trees stasis can checkpoint (session leaders), the GPU columns empty. */
#include <dirent.h>
#include <getopt.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cuda-api.h"
#include "container.h"
#include "devfiles.h"
#include "nvml.h"
#include "preflight-checks.h"
#include "proc.h"
#include "target.h"
#include "util.h"

struct ps_entry {
	pid_t pid;
	char comm[32];
	char state[16]; /* CUDA state, or "none" */
	char gpus[256];
	uint64_t gpu_bytes;
	char container[96];
	char blockers[256];
	const char *cause; /* the preflight check that blocks it, or NULL */
};

/* Container runtimes leave their mark in the cgroup path. */
static void container_of(pid_t pid, char *out, size_t len)
{
	static const char *const marks[] = {"docker-",	"docker/", "cri-containerd-", "containerd",
					    "kubepods", "crio-",   "libpod-",	      "runc"};
	char path[64];
	_cleanup_free_ char *cg = NULL;

	snprintf(out, len, "-");
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	cg = read_file_str(path, NULL);
	if (!cg)
		return;
	for (size_t i = 0; i < ARRAY_SIZE(marks); i++) {
		char *hit = strstr(cg, marks[i]);
		char *end;

		if (!hit)
			continue;
		end = strpbrk(hit, "\n");
		if (end)
			*end = '\0';
		snprintf(out, len, "%s", hit);
		return;
	}
}

static bool describe(pid_t pid, const struct nvml_gpu *gpus, const struct nvml_process *np,
		     size_t nnp, struct ps_entry *e)
{
	enum cuda_process_state state;
	bool cuda = cuda_available() && cuda_get_state(pid, &state) == CUDA_RES_SUCCESS;
	unsigned int fds;
	bool on_gpu = false;

	memset(e, 0, sizeof(*e));
	for (size_t i = 0; i < nnp; i++)
		if (np[i].pid == pid)
			on_gpu = true;
	/* Managed (UVM) memory cannot be told from /proc: every CUDA process on
	 * driver 580 has shared device mappings (measured). The driver answers
	 * only at checkpoint time, and stasis rolls back then. */
	fds = nvidia_fds_of(pid);
	if (!cuda && !on_gpu && fds == 0)
		return false;
	e->pid = pid;
	proc_comm(pid, e->comm, sizeof(e->comm));
	snprintf(e->state, sizeof(e->state), "%s", cuda ? cuda_state_name(state) : "none");
	for (size_t i = 0; i < nnp; i++) {
		size_t len = strlen(e->gpus);

		if (np[i].pid != pid)
			continue;
		snprintf(e->gpus + len, sizeof(e->gpus) - len, "%s%d:%s", len ? "," : "",
			 gpus[np[i].gpu].index, gpus[np[i].gpu].uuid);
		e->gpu_bytes += np[i].used_bytes;
	}
	container_of(pid, e->container, sizeof(e->container));
	e->cause = preflight_process_blocker(
	    &(struct preflight_process){.pid = pid,
					.comm = e->comm,
					.cuda = cuda,
					.device_fds = fds,
					.in_container = strcmp(e->container, "-") != 0},
	    e->blockers, sizeof(e->blockers));
	return true;
}

/* Without a driver: a session leader that is a tree stasis could
 * checkpoint (not a kernel thread, init, stasis's own session, or a
 * container's init, which the containers' table lists). */
static bool describe_cpu(pid_t pid, const struct target_container *c, size_t nc, struct ps_entry *e)
{
	_cleanup_free_ char *cmdline = NULL;

	memset(e, 0, sizeof(*e));
	if (pid == 1 || getsid(pid) != pid || getsid(pid) == getsid(0) ||
	    proc_is_self_or_ancestor(pid))
		return false;
	for (size_t i = 0; i < nc; i++)
		if (c[i].pid == pid)
			return false;
	/* A kernel thread has no command line. */
	cmdline = proc_cmdline(pid);
	if (!cmdline || !*cmdline)
		return false;
	e->pid = pid;
	proc_comm(pid, e->comm, sizeof(e->comm));
	container_of(pid, e->container, sizeof(e->container));
	e->cause = preflight_process_blocker(
	    &(struct preflight_process){
		.pid = pid, .comm = e->comm, .in_container = strcmp(e->container, "-") != 0},
	    e->blockers, sizeof(e->blockers));
	return true;
}

static json_object *entries_json(const struct ps_entry *e, size_t n)
{
	json_object *arr = json_object_new_array();

	for (size_t i = 0; i < n; i++) {
		json_object *o = json_object_new_object();

		json_object_object_add(o, "pid", json_object_new_int(e[i].pid));
		json_object_object_add(o, "command", json_object_new_string(e[i].comm));
		/* Without a driver the GPU fields are null. */
		json_object_object_add(o, "state",
				       e[i].state[0] ? json_object_new_string(e[i].state) : NULL);
		json_object_object_add(o, "gpus",
				       e[i].state[0] ? json_object_new_string(e[i].gpus) : NULL);
		json_object_object_add(
		    o, "gpu_bytes", e[i].state[0] ? json_object_new_uint64(e[i].gpu_bytes) : NULL);
		json_object_object_add(o, "container", json_object_new_string(e[i].container));
		json_object_object_add(o, "blockers", json_object_new_string(e[i].blockers));
		json_object_object_add(o, "cause",
				       e[i].cause ? json_object_new_string(e[i].cause) : NULL);
		json_object_array_add(arr, o);
	}
	return arr;
}

static void print_entries(const struct ps_entry *e, size_t n)
{
	char size[32];

	printf("%-8s %-16s %-13s %-10s %-12s %s\n", "PID", "COMMAND", "STATE", "GPU MEM",
	       "CONTAINER", "GPUS / BLOCKERS");
	for (size_t i = 0; i < n; i++)
		printf("%-8d %-16s %-13s %-10s %-12.12s %s%s%s%s%s\n", (int)e[i].pid, e[i].comm,
		       e[i].state[0] ? e[i].state : "",
		       e[i].state[0] ? format_bytes(e[i].gpu_bytes, size, sizeof(size)) : "",
		       e[i].container,
		       e[i].gpus[0]    ? e[i].gpus
		       : e[i].state[0] ? "-"
				       : "",
		       e[i].cause ? "  BLOCKED (" : "", e[i].cause ? e[i].cause : "",
		       e[i].cause ? "): " : "", e[i].blockers);
}

/* Its processes, and how many of them the driver knows as CUDA ones. */
static void count_processes(const struct target_container *c, size_t *n, size_t *cuda)
{
	_cleanup_free_ pid_t *pids = NULL;
	enum cuda_process_state state;

	*n = *cuda = 0;
	if (c->pid <= 0 || container_processes(c->pid, &pids, n, NULL) < 0)
		return;
	for (size_t i = 0; i < *n; i++)
		*cuda += cuda_available() && cuda_get_state(pids[i], &state) == CUDA_RES_SUCCESS;
}

static json_object *containers_json(const struct target_container *c, size_t n, bool gpu)
{
	json_object *arr = json_object_new_array();

	for (size_t i = 0; i < n; i++) {
		json_object *o = json_object_new_object();
		size_t procs, cuda;

		count_processes(&c[i], &procs, &cuda);
		json_object_object_add(o, "runtime", json_object_new_string(c[i].runtime));
		if (c[i].namespace[0])
			json_object_object_add(o, "namespace",
					       json_object_new_string(c[i].namespace));
		json_object_object_add(o, "id", json_object_new_string(c[i].id));
		if (c[i].image[0])
			json_object_object_add(o, "image", json_object_new_string(c[i].image));
		json_object_object_add(o, "status", json_object_new_string(c[i].status));
		json_object_object_add(o, "init_pid", json_object_new_int(c[i].pid));
		json_object_object_add(o, "processes", json_object_new_int((int)procs));
		json_object_object_add(o, "cuda_processes",
				       gpu ? json_object_new_int((int)cuda) : NULL);
		json_object_object_add(o, "bundle", json_object_new_string(c[i].bundle));
		json_object_array_add(arr, o);
	}
	return arr;
}

/* A containerd container is named NAMESPACE/ID, its image shown where a
 * runc container shows its bundle. */
static void print_containers(const struct target_container *c, size_t n, bool gpu)
{
	printf("\n%-24s %-10s %-9s %-9s %-10s %-5s %s\n", "CONTAINER", "RUNTIME", "STATUS",
	       "INIT PID", "PROCESSES", "CUDA", "BUNDLE OR IMAGE");
	for (size_t i = 0; i < n; i++) {
		char name[400], cudas[24] = "";
		size_t procs, cuda;

		snprintf(name, sizeof(name), "%s%s%s", c[i].namespace, c[i].namespace[0] ? "/" : "",
			 c[i].id);
		count_processes(&c[i], &procs, &cuda);
		if (gpu)
			snprintf(cudas, sizeof(cudas), "%zu", cuda);
		printf("%-24.24s %-10s %-9s %-9d %-10zu %-5s %s\n", name, c[i].runtime, c[i].status,
		       (int)c[i].pid, procs, cudas, c[i].image[0] ? c[i].image : c[i].bundle);
	}
}

/* With a driver (gpu), its CUDA processes; without, the session leaders
 * but the containers' (c, nc). */
static size_t gather(bool gpu, const struct nvml_gpu *gpus, const struct nvml_process *np,
		     size_t nnp, const struct target_container *c, size_t nc,
		     struct ps_entry **entries)
{
	size_t n = 0, cap = 0;
	struct ps_entry *bigger;
	struct dirent *de;
	DIR *d = opendir("/proc");

	while (d && (de = readdir(d))) {
		pid_t pid = (pid_t)atoi(de->d_name);

		if (pid <= 0 || pid == getpid())
			continue;
		bigger = grow_array(*entries, n, &cap, sizeof(*bigger), 16);
		if (!bigger)
			break;
		*entries = bigger;
		if (gpu ? describe(pid, gpus, np, nnp, &(*entries)[n])
			: describe_cpu(pid, c, nc, &(*entries)[n]))
			n++;
	}
	if (d)
		closedir(d);
	return n;
}

int cmd_ps(int argc, char **argv)
{
	static const struct option options[] = {
	    {"json", no_argument, NULL, CLI_OPT_JSON},
	    {NULL, 0, NULL, 0},
	};
	_cleanup_error_ struct stasis_error *err = NULL;
	_cleanup_free_ struct nvml_gpu *gpus = NULL;
	_cleanup_free_ struct nvml_process *np = NULL;
	_cleanup_free_ struct ps_entry *entries = NULL;
	_cleanup_free_ struct target_container *containers = NULL;
	size_t ngpus = 0, nnp = 0, n = 0, ncontainers = 0;
	bool json = false, gpu;
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", options, NULL)) != -1) {
		if (c != CLI_OPT_JSON)
			return cli_option_error("ps", c, argv, ":");
		json = true;
	}
	if (optind != argc)
		return cli_usage_error("ps", "unexpected argument '%s'", argv[optind]);
	gpu = nvml_gpus(&gpus, &ngpus, &err) == 0 || cuda_available();
	target_list_containers(&containers, &ncontainers);
	if (gpu)
		nvml_processes(gpus, ngpus, &np, &nnp, NULL);
	n = gather(gpu, gpus, np, nnp, containers, ncontainers, &entries);
	if (json) {
		json_object *o = json_object_new_object();

		json_object_object_add(o, "gpu_driver", json_object_new_boolean(gpu));
		if (!gpu && err)
			json_object_object_add(o, "no_gpu_because",
					       json_object_new_string(err->message));
		json_object_object_add(o, "processes", entries_json(entries, n));
		json_object_object_add(o, "containers",
				       containers_json(containers, ncontainers, gpu));
		printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY));
		json_object_put(o);
		return EXIT_OK;
	}
	/* Said once: the columns stay, empty. */
	if (!gpu)
		printf("%s: the GPU columns are empty; listed are the session leaders, the "
		       "trees stasis can checkpoint\n\n",
		       err && err->message ? err->message : "no NVIDIA driver");
	print_entries(entries, n);
	if (ncontainers)
		print_containers(containers, ncontainers, gpu);
	return EXIT_OK;
}
