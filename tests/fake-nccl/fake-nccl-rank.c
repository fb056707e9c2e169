/* SPDX-License-Identifier: MIT */
/* fake-nccl-rank DIR NRANKS [train|idle0]: loads its job, which links the
 * (fake) libnccl, local to it as Python loads PyTorch's libraries, so that
 * NCCL is not in the global scope where a preloaded interposer looks
 * first; fake-nccl-job.c says what the job does. */
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	char self[PATH_MAX], lib[PATH_MAX + 64];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	int (*job)(int, char **);
	void *h;

	if (n < 0)
		return 2;
	self[n] = '\0';
	snprintf(lib, sizeof(lib), "%s/../fake/libfake-nccl-job.so", dirname(self));
	h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "fake-nccl-rank: %s\n", dlerror());
		return 2;
	}
	job = (int (*)(int, char **))dlsym(h, "fake_nccl_job");
	return job ? job(argc, argv) : 2;
}
