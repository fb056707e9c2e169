/* SPDX-License-Identifier: MIT */
/* GPU edits of an OCI runtime config (config.json), as a CDI spec's
 * containerEdits would make them: NVIDIA device nodes with their cgroup
 * rules, read-only bind mounts of the driver's libraries, environment. */
#ifndef STASIS_OCISPEC_H
#define STASIS_OCISPEC_H

#include "error.h"

struct oci_edit_summary {
	unsigned int devices, mounts, env, hooks_skipped;
};

/* Edit the config at path in place. gpus: "all" or a list of UUIDs or
 * indexes; cdi_file: apply that JSON CDI spec instead of looking at the
 * machine. */
int oci_gpu_spec(const char *path, const char *gpus, const char *cdi_file,
		 struct oci_edit_summary *summary, struct stasis_error **err);

#endif
