/* SPDX-License-Identifier: MIT */
#include "nvml.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* NVML's ABI as its header declares it (the header does not ship with the
 * CUDA toolkit, so the few types needed are written out here). */
typedef void *nvml_device;
typedef int nvml_return;
#define NVML_SUCCESS 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7

struct nvml_memory {
	unsigned long long total, free, used;
};

struct nvml_pci_info {
	char bus_id_legacy[16];
	unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
	char bus_id[32];
};

struct nvml_process_info {
	unsigned int pid;
	unsigned long long used_gpu_memory;
	unsigned int gpu_instance_id, compute_instance_id;
};

static struct {
	void *handle;
	nvml_return (*init)(void);
	const char *(*error_string)(nvml_return r);
	nvml_return (*driver_version)(char *buf, unsigned int len);
	nvml_return (*device_count)(unsigned int *n);
	nvml_return (*device_by_index)(unsigned int i, nvml_device *dev);
	nvml_return (*uuid)(nvml_device dev, char *buf, unsigned int len);
	nvml_return (*name)(nvml_device dev, char *buf, unsigned int len);
	nvml_return (*architecture)(nvml_device dev, unsigned int *arch);
	nvml_return (*compute_capability)(nvml_device dev, int *major, int *minor);
	nvml_return (*pci_info)(nvml_device dev, struct nvml_pci_info *pci);
	nvml_return (*memory_info)(nvml_device dev, struct nvml_memory *mem);
	nvml_return (*persistence_mode)(nvml_device dev, unsigned int *mode);
	nvml_return (*mig_mode)(nvml_device dev, unsigned int *current, unsigned int *pending);
	nvml_return (*compute_mode)(nvml_device dev, unsigned int *mode);
	nvml_return (*minor_number)(nvml_device dev, unsigned int *minor);
	nvml_return (*compute_processes)(nvml_device dev, unsigned int *count,
					 struct nvml_process_info *infos);
} nvml;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_status = ENODEV;

static void load(void)
{
	const char *name = getenv("STASIS_LIBNVML");
	const struct {
		const char *name;
		void **slot;
	} symbols[] = {
	    {"nvmlInit_v2", (void **)&nvml.init},
	    {"nvmlErrorString", (void **)&nvml.error_string},
	    {"nvmlSystemGetDriverVersion", (void **)&nvml.driver_version},
	    {"nvmlDeviceGetCount_v2", (void **)&nvml.device_count},
	    {"nvmlDeviceGetHandleByIndex_v2", (void **)&nvml.device_by_index},
	    {"nvmlDeviceGetUUID", (void **)&nvml.uuid},
	    {"nvmlDeviceGetName", (void **)&nvml.name},
	    {"nvmlDeviceGetArchitecture", (void **)&nvml.architecture},
	    {"nvmlDeviceGetCudaComputeCapability", (void **)&nvml.compute_capability},
	    {"nvmlDeviceGetPciInfo_v3", (void **)&nvml.pci_info},
	    {"nvmlDeviceGetMemoryInfo", (void **)&nvml.memory_info},
	    {"nvmlDeviceGetPersistenceMode", (void **)&nvml.persistence_mode},
	    {"nvmlDeviceGetMigMode", (void **)&nvml.mig_mode},
	    {"nvmlDeviceGetComputeMode", (void **)&nvml.compute_mode},
	    {"nvmlDeviceGetMinorNumber", (void **)&nvml.minor_number},
	    {"nvmlDeviceGetComputeRunningProcesses_v3", (void **)&nvml.compute_processes},
	};

	nvml.handle = dlopen(name && *name ? name : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!nvml.handle)
		return;
	for (size_t i = 0; i < ARRAY_SIZE(symbols); i++)
		*symbols[i].slot = dlsym(nvml.handle, symbols[i].name);
	if (!nvml.init || !nvml.device_count || !nvml.device_by_index || !nvml.uuid) {
		load_status = ENOTSUP;
		return;
	}
	load_status = nvml.init() == NVML_SUCCESS ? 0 : EIO;
}

int nvml_load(struct stasis_error **err)
{
	pthread_once(&load_once, load);
	if (load_status == 0)
		return 0;
	if (load_status == ENODEV) {
		stasis_error_set(err, ENODEV, STASIS_DOMAIN_NVML, 0,
				 "no NVIDIA driver found (libnvidia-ml.so.1 cannot be loaded)");
		return stasis_error_hint(err, "install the NVIDIA driver 570 or newer");
	}
	return stasis_error_set(err, load_status, STASIS_DOMAIN_NVML, 0,
				"NVML could not be initialised");
}

int nvml_driver_version(char *buf, size_t len, struct stasis_error **err)
{
	nvml_return r;

	if (nvml_load(err) < 0)
		return -ENODEV;
	r = nvml.driver_version ? nvml.driver_version(buf, (unsigned int)len) : -1;
	if (r != NVML_SUCCESS)
		return stasis_error_set(err, EIO, STASIS_DOMAIN_NVML, r,
					"NVML cannot tell the driver version");
	return 0;
}

static const char *arch_name(unsigned int arch)
{
	static const char *const names[] = {
	    [2] = "Kepler", [3] = "Maxwell", [4] = "Pascal", [5] = "Volta",	[6] = "Turing",
	    [7] = "Ampere", [8] = "Ada",     [9] = "Hopper", [10] = "Blackwell"};

	if (arch < ARRAY_SIZE(names) && names[arch])
		return names[arch];
	return "unknown";
}

static void describe_gpu(nvml_device dev, struct nvml_gpu *g)
{
	struct nvml_memory mem;
	struct nvml_pci_info pci;
	unsigned int v, pending;

	nvml.uuid(dev, g->uuid, sizeof(g->uuid));
	if (nvml.name)
		nvml.name(dev, g->name, sizeof(g->name));
	snprintf(g->arch, sizeof(g->arch), "%s",
		 nvml.architecture && nvml.architecture(dev, &v) == NVML_SUCCESS ? arch_name(v)
										 : "unknown");
	if (nvml.compute_capability)
		nvml.compute_capability(dev, &g->cc_major, &g->cc_minor);
	if (nvml.pci_info && nvml.pci_info(dev, &pci) == NVML_SUCCESS)
		snprintf(g->pci_bus_id, sizeof(g->pci_bus_id), "%s", pci.bus_id);
	if (nvml.memory_info && nvml.memory_info(dev, &mem) == NVML_SUCCESS) {
		g->memory_total = mem.total;
		g->memory_used = mem.used;
	}
	g->persistence = -1;
	if (nvml.persistence_mode && nvml.persistence_mode(dev, &v) == NVML_SUCCESS)
		g->persistence = (int)v;
	g->mig = -1;
	if (nvml.mig_mode && nvml.mig_mode(dev, &v, &pending) == NVML_SUCCESS)
		g->mig = (int)v;
	g->minor = -1;
	if (nvml.minor_number && nvml.minor_number(dev, &v) == NVML_SUCCESS)
		g->minor = (int)v;
	g->compute_mode = 0;
	if (nvml.compute_mode && nvml.compute_mode(dev, &v) == NVML_SUCCESS)
		g->compute_mode = (int)v;
}

int nvml_gpus(struct nvml_gpu **gpus_out, size_t *n_out, struct stasis_error **err)
{
	unsigned int n = 0;
	struct nvml_gpu *gpus;

	if (nvml_load(err) < 0)
		return -ENODEV;
	if (nvml.device_count(&n) != NVML_SUCCESS)
		return stasis_error_set(err, EIO, STASIS_DOMAIN_NVML, 0, "NVML cannot count GPUs");
	gpus = calloc(n ? n : 1, sizeof(*gpus));
	if (!gpus)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	for (unsigned int i = 0; i < n; i++) {
		nvml_device dev;

		gpus[i].index = (int)i;
		if (nvml.device_by_index(i, &dev) == NVML_SUCCESS)
			describe_gpu(dev, &gpus[i]);
	}
	*gpus_out = gpus;
	*n_out = n;
	return 0;
}

int nvml_processes(const struct nvml_gpu *gpus, size_t ngpus, struct nvml_process **out,
		   size_t *n_out, struct stasis_error **err)
{
	struct nvml_process *procs = NULL;
	size_t n = 0;

	if (nvml_load(err) < 0)
		return -ENODEV;
	for (size_t g = 0; g < ngpus && nvml.compute_processes; g++) {
		struct nvml_process_info infos[256];
		unsigned int count = ARRAY_SIZE(infos);
		nvml_device dev;

		if (nvml.device_by_index((unsigned int)gpus[g].index, &dev) != NVML_SUCCESS ||
		    nvml.compute_processes(dev, &count, infos) != NVML_SUCCESS)
			continue;
		for (unsigned int i = 0; i < count; i++) {
			struct nvml_process *bigger = realloc(procs, (n + 1) * sizeof(*procs));

			if (!bigger) {
				free(procs);
				return stasis_error_errno(err, ENOMEM, "out of memory");
			}
			procs = bigger;
			procs[n].pid = (pid_t)infos[i].pid;
			procs[n].gpu = (int)g;
			/* NVML says "not available" with all bits set. */
			procs[n].used_known = infos[i].used_gpu_memory != ~0ULL;
			procs[n].used_bytes = procs[n].used_known ? infos[i].used_gpu_memory : 0;
			n++;
		}
	}
	*out = procs;
	*n_out = n;
	return 0;
}

static int manifest_gpu_for(struct manifest *m, const struct nvml_gpu *g)
{
	struct manifest_gpu *mg;

	for (size_t i = 0; i < m->ngpus; i++)
		if (strcmp(m->gpus[i].uuid, g->uuid) == 0)
			return (int)i;
	mg = manifest_add_gpu(m);
	if (!mg)
		return -1;
	mg->index = g->index;
	snprintf(mg->uuid, sizeof(mg->uuid), "%s", g->uuid);
	snprintf(mg->name, sizeof(mg->name), "%s", g->name);
	snprintf(mg->chip, sizeof(mg->chip), "%s", g->arch);
	mg->memory_total = g->memory_total;
	mg->minor = g->minor;
	return (int)(m->ngpus - 1);
}

void nvml_describe_processes(struct manifest *m)
{
	_cleanup_free_ struct nvml_gpu *gpus = NULL;
	_cleanup_free_ struct nvml_process *procs = NULL;
	size_t ngpus = 0, nprocs = 0;
	char version[64];

	if (nvml_gpus(&gpus, &ngpus, NULL) < 0 ||
	    nvml_processes(gpus, ngpus, &procs, &nprocs, NULL) < 0)
		return;
	if (nvml_driver_version(version, sizeof(version), NULL) == 0)
		m->nvidia_driver = strdup(version);
	/* Every GPU of the machine: a restore onto other GPUs must pair each GPU
	 * a process could see, not only those it used. */
	for (size_t g = 0; g < ngpus; g++)
		manifest_gpu_for(m, &gpus[g]);
	for (size_t i = 0; i < nprocs; i++) {
		for (size_t j = 0; j < m->nprocs; j++) {
			struct manifest_process *p = &m->procs[j];
			int idx;

			if (p->pid != procs[i].pid || !p->cuda)
				continue;
			idx = manifest_gpu_for(m, &gpus[procs[i].gpu]);
			if (idx >= 0 && p->ngpus < MANIFEST_MAX_PROCESS_GPUS)
				p->gpus[p->ngpus++] = idx;
			p->gpu_bytes += procs[i].used_bytes;
		}
	}
}
