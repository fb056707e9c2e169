/* SPDX-License-Identifier: MIT */
/* A test double of libcuda.so.1 for machines without a GPU: the driver's
 * checkpoint state machine, kept per PID in files under $FAKE_CUDA_DIR so
 * that it survives across processes (and CRIU restores), with switches to
 * make any call fail or hang:
 *   FAKE_CUDA_FAIL="lock:909,checkpoint:801:PID,..."   call[:code[:pid[:times]]]
 *                          (times: only the first that many calls fail)
 *   FAKE_CUDA_HANG="lock"                              sleep (lock: until its timeout)
 *   FAKE_CUDA_DELAY="checkpoint:1500"                  take that long, then succeed
 *   FAKE_CUDA_LIVE=1       PIDs are real processes: one that has exited
 *                          fails every call, as with the real driver
 * A process is a CUDA process when its state file exists. */
#include <cuda.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake-state.h"

#define EXPORT __attribute__((visibility("default")))

/* How many times call has been made on pid, this one included: a count
 * kept in $FAKE_CUDA_DIR, as the state is. */
static int counted_call(const char *call, int pid)
{
	const char *dir = getenv("FAKE_CUDA_DIR");
	char path[512];
	int count = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/calls-%s-%d", dir ? dir : "/tmp", call, pid);
	f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%d", &count) != 1)
			count = 0;
		fclose(f);
	}
	f = fopen(path, "w");
	if (f) {
		fprintf(f, "%d\n", ++count);
		fclose(f);
	}
	return count;
}

/* Returns the injected result for call on pid, or CUDA_SUCCESS. */
static CUresult injected(const char *call, int pid)
{
	const char *spec = getenv("FAKE_CUDA_FAIL");
	char copy[1024], *save = NULL;

	if (!spec)
		return CUDA_SUCCESS;
	snprintf(copy, sizeof(copy), "%s", spec);
	for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		char name[64] = "";
		int code = 999, target = 0;

		int times = 0;

		sscanf(item, "%63[^:]:%d:%d:%d", name, &code, &target, &times);
		if (strcmp(name, call) == 0 && (target == 0 || target == pid) &&
		    (times == 0 || counted_call(call, pid) <= times))
			return (CUresult)code;
	}
	return CUDA_SUCCESS;
}

static int hang_ms(const char *call)
{
	const char *spec = getenv("FAKE_CUDA_HANG");

	return spec && strstr(spec, call) ? 1 : 0;
}

/* The fake driver knows a process by its PID inside its own PID namespace,
 * as the fake worker registers itself (getpid()): the host's PID outside
 * one, and the same PID again after a migration into a new namespace. */
static int state_pid(int pid)
{
	char path[64], line[256];
	int last = pid;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f)) {
		char *end;

		if (strncmp(line, "NSpid:", 6) != 0)
			continue;
		for (char *q = line + 6;; q = end) {
			long v = strtol(q, &end, 10);

			if (end == q)
				break;
			last = (int)v;
		}
	}
	if (f)
		fclose(f);
	return last > 0 ? last : pid;
}

static int read_state(int pid, CUprocessState *state)
{
	int v = fake_state_read(state_pid(pid));

	if (v < 0)
		return -1;
	*state = (CUprocessState)v;
	return 0;
}

/* One transition: from -> to, or the error the driver gives. */
/* Milliseconds FAKE_CUDA_DELAY gives call, as real copies take time. */
static unsigned int delay_ms(const char *call)
{
	const char *spec = getenv("FAKE_CUDA_DELAY");
	const char *at = spec ? strstr(spec, call) : NULL;

	return at && at[strlen(call)] == ':' ? (unsigned int)atoi(at + strlen(call) + 1) : 0;
}

/* The state letter of pid's stat ('\0' where unknown). */
static char stat_state(int pid)
{
	char path[64], line[512], *paren, state = '\0';
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (f && fgets(line, sizeof(line), f) && (paren = strrchr(line, ')')))
		state = paren[2];
	if (f)
		fclose(f);
	return state;
}

/* Gone or a zombie: driver 580 answers every call about such a process,
 * get-state included, with CUDA_ERROR_OPERATING_SYSTEM. The unit tests'
 * processes are made up, hence FAKE_CUDA_LIVE. */
static int exited(int pid)
{
	if (!getenv("FAKE_CUDA_LIVE"))
		return 0;
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return 1;
	return stat_state(pid) == 'Z';
}

/* Whether pid's thread (the fake's restore thread) sits in a tracing
 * stop. The real driver answers get-state by asking the process itself:
 * asked about a process whose restore thread a tracer holds (CRIU at
 * restore, before the plugin wakes that thread), it never returns (seen
 * with driver 580). The fake fails such a call at once, so that a test
 * catches the caller, where the real one would hang. */
static int held_by_tracer(int pid)
{
	return getenv("FAKE_CUDA_LIVE") && stat_state(pid) == 't';
}

static CUresult transition(const char *call, int pid, CUprocessState from, CUprocessState to)
{
	CUprocessState state;
	CUresult r;

	if (read_state(pid, &state) < 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (hang_ms(call))
		sleep(3600);
	usleep(delay_ms(call) * 1000u);
	if (exited(pid))
		return CUDA_ERROR_OPERATING_SYSTEM;
	r = injected(call, pid);
	if (r != CUDA_SUCCESS)
		return r;
	if (state != from)
		return CUDA_ERROR_ILLEGAL_STATE;
	fake_state_write(state_pid(pid), (int)to);
	return CUDA_SUCCESS;
}

EXPORT CUresult cuInit(unsigned int flags)
{
	(void)flags;
	return injected("init", 0);
}

EXPORT CUresult cuDriverGetVersion(int *version)
{
	const char *v = getenv("FAKE_CUDA_VERSION");

	*version = v ? atoi(v) : 13000;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count)
{
	*count = 1;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
	*dev = ordinal;
	return ordinal == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	memset(uuid->bytes, 0x11 * (dev + 1), sizeof(uuid->bytes));
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCheckpointProcessGetState(int pid, CUprocessState *state)
{
	CUresult r = injected("get-state", pid);

	if (r != CUDA_SUCCESS)
		return r;
	if (exited(pid))
		return CUDA_ERROR_OPERATING_SYSTEM;
	if (held_by_tracer(pid)) {
		fprintf(stderr,
			"fake-cuda: get-state of PID %d while a tracer holds it: the real "
			"driver would wait for ever\n",
			pid);
		return CUDA_ERROR_NOT_READY;
	}
	return read_state(pid, state) == 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

EXPORT CUresult cuCheckpointProcessGetRestoreThreadId(int pid, int *tid)
{
	CUprocessState state;

	if (read_state(pid, &state) < 0)
		return CUDA_ERROR_INVALID_VALUE;
	*tid = pid;
	return CUDA_SUCCESS;
}

/* A rank of the fake NCCL (tests/fake-nccl): the lock waits, up to ms,
 * for its queued collectives to complete, which they do only once every
 * peer has started them (the counts in $FAKE_NCCL_DIR). A peer already
 * locked never will: the real driver's lock of an NCCL rank whose kernel
 * waits for a locked peer times out the same way. */
static int nccl_drained(int pid, unsigned int ms)
{
	const char *dir = getenv("FAKE_NCCL_DIR");
	char path[4096], id[32];
	int rank, nranks, fd, drained = 1;
	uint64_t *counts;
	FILE *f;

	if (!dir)
		return 1;
	snprintf(path, sizeof(path), "%s/rank-%d", dir, pid);
	f = fopen(path, "r");
	if (!f)
		return 1;
	if (fscanf(f, "%31s %d %d", id, &rank, &nranks) != 3 || rank < 0 || rank >= nranks) {
		fclose(f);
		return 1;
	}
	fclose(f);
	snprintf(path, sizeof(path), "%s/comm-%s", dir, id);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return 1;
	counts = mmap(NULL, (size_t)nranks * sizeof(*counts), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (counts == MAP_FAILED)
		return 1;
	for (unsigned int waited = 0;; waited++) {
		uint64_t mine = __atomic_load_n(&counts[rank], __ATOMIC_SEQ_CST);

		drained = 1;
		for (int i = 0; i < nranks; i++)
			if (__atomic_load_n(&counts[i], __ATOMIC_SEQ_CST) < mine)
				drained = 0;
		if (drained || waited >= ms)
			break;
		usleep(1000);
	}
	munmap(counts, (size_t)nranks * sizeof(*counts));
	return drained;
}

EXPORT CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
	if (hang_ms("lock")) {
		/* A process that never leaves its CUDA call: the lock times out. */
		unsigned int ms = args && args->timeoutMs ? args->timeoutMs : 3600000;

		usleep(ms * 1000u);
		return CUDA_ERROR_TIMEOUT;
	}
	{
		CUresult r =
		    transition("lock", pid, CU_PROCESS_STATE_RUNNING, CU_PROCESS_STATE_LOCKED);
		unsigned int ms = args && args->timeoutMs ? args->timeoutMs : 30000;

		if (r != CUDA_SUCCESS || nccl_drained(pid, ms))
			return r;
		/* As the driver: its wait for the queued work ended, the
		 * process runs again and the lock is not taken. */
		fake_state_write(state_pid(pid), CU_PROCESS_STATE_RUNNING);
		return CUDA_ERROR_NOT_READY;
	}
}

static void record_hold(int pid, const char *step);

/* STATE.p2p: pid was checkpointed while a fake NCCL communicator of its
 * mapped its peers' memory ($FAKE_NCCL_DIR/p2p-PID): like driver 580, the
 * checkpoint succeeds and the restore fails, leaving it checkpointed. */
static void p2p_marker(int pid, char *path, size_t size)
{
	fake_state_path(state_pid(pid), path, size);
	strncat(path, ".p2p", size - strlen(path) - 1);
}

static void record_p2p(int pid)
{
	const char *dir = getenv("FAKE_NCCL_DIR");
	char path[4096];
	int fd;

	if (!dir)
		return;
	snprintf(path, sizeof(path), "%s/p2p-%d", dir, pid);
	if (access(path, F_OK) != 0)
		return;
	p2p_marker(pid, path, sizeof(path));
	fd = open(path, O_WRONLY | O_CREAT, 0600);
	if (fd >= 0)
		close(fd);
}

EXPORT CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
	CUresult r;

	(void)args;
	record_hold(pid, "checkpoint");
	r = transition("checkpoint", pid, CU_PROCESS_STATE_LOCKED, CU_PROCESS_STATE_CHECKPOINTED);
	if (r == CUDA_SUCCESS)
		record_p2p(pid);
	return r;
}

/* Where the process stood when the driver checkpointed or restored it, for
 * the tests: "tracer=PID others=stopped|running" in STATE.checkpoint-held
 * or STATE.held, the restore thread being the main one. The real driver
 * needs the other threads held still. */
static void record_hold(int pid, const char *step)
{
	char path[4096], line[256];
	_Bool others_stopped = 1;
	int tracer = 0;
	FILE *f;
	DIR *tasks;
	struct dirent *de;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		sscanf(line, "TracerPid: %d", &tracer);
	if (f)
		fclose(f);
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	tasks = opendir(path);
	while (tasks && (de = readdir(tasks))) {
		char state = '?';
		int tid = atoi(de->d_name);

		if (tid <= 0 || tid == pid)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
		f = fopen(path, "r");
		if (f && fgets(line, sizeof(line), f) && strrchr(line, ')'))
			state = strrchr(line, ')')[2];
		if (f)
			fclose(f);
		others_stopped &= state == 't';
	}
	if (tasks)
		closedir(tasks);
	fake_state_path(state_pid(pid), path, sizeof(path));
	strcat(path, strcmp(step, "restore") == 0 ? ".held" : ".checkpoint-held");
	f = fopen(path, "w");
	if (f) {
		fprintf(f, "tracer=%d others=%s\n", tracer, others_stopped ? "stopped" : "running");
		fclose(f);
	}
}

EXPORT CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
	record_hold(pid, "restore");
	if (args && args->gpuPairsCount) {
		/* Like driver 580: the pairs must pair the one GPU with one GPU. */
		if (args->gpuPairsCount != 1)
			return CUDA_ERROR_INVALID_VALUE;
	}
	{
		char marker[4096];

		p2p_marker(pid, marker, sizeof(marker));
		if (access(marker, F_OK) == 0)
			return CUDA_ERROR_NOT_SUPPORTED;
	}
	return transition("restore", pid, CU_PROCESS_STATE_CHECKPOINTED, CU_PROCESS_STATE_LOCKED);
}

EXPORT CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
	(void)args;
	return transition("unlock", pid, CU_PROCESS_STATE_LOCKED, CU_PROCESS_STATE_RUNNING);
}
