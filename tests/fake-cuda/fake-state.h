/* SPDX-License-Identifier: MIT */
/* The fake driver's per-process state: one file per PID under
 * $FAKE_CUDA_DIR holding the CUprocessState number. Shared by the fake
 * libcuda and the fake CUDA worker. */
#ifndef FAKE_STATE_H
#define FAKE_STATE_H

#include <stdio.h>
#include <stdlib.h>

static inline void fake_state_path(int pid, char *buf, size_t len)
{
	const char *dir = getenv("FAKE_CUDA_DIR");

	snprintf(buf, len, "%s/%d", dir && *dir ? dir : "/tmp/fake-cuda", pid);
}

/* The state number, or -1 when pid is not a (fake) CUDA process. */
static inline int fake_state_read(int pid)
{
	char path[4096], buf[8] = "";
	FILE *f;

	fake_state_path(pid, path, sizeof(path));
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '0';
	fclose(f);
	return atoi(buf);
}

static inline void fake_state_write(int pid, int state)
{
	char path[4096];
	FILE *f;

	fake_state_path(pid, path, sizeof(path));
	f = fopen(path, "w");
	if (f) {
		fprintf(f, "%d\n", state);
		fclose(f);
	}
}

#endif
