/* SPDX-License-Identifier: MIT */
/* --print-stats: podman's shape, every duration in microseconds. */
#include <json-c/json.h>
#include <string.h>

#include "stasis.h"

char *stasis_stats_json(const struct manifest *m)
{
	json_object *root = json_object_new_object();
	json_object *phases = json_object_new_object();
	json_object *procs = json_object_new_array();
	bool checkpointed = manifest_has_phase(m, "cuda_lock");
	bool restored = manifest_has_phase(m, "cuda_restore");
	char *text;

	for (size_t i = 0; i < m->nphases; i++)
		json_object_object_add(phases, m->phases[i].name,
				       json_object_new_uint64(m->phases[i].usec));
	json_object_object_add(root, "phases_us", phases);
	for (size_t i = 0; i < m->nprocs; i++) {
		const struct manifest_process *p = &m->procs[i];
		json_object *o;

		if (!p->cuda)
			continue;
		o = json_object_new_object();
		json_object_object_add(o, "pid", json_object_new_int(p->pid));
		json_object_object_add(o, "gpu_bytes", json_object_new_uint64(p->gpu_bytes));
		/* The steps this operation ran: a restore's stats show its own. */
		if (checkpointed) {
			json_object_object_add(o, "lock_us", json_object_new_uint64(p->lock_us));
			json_object_object_add(o, "checkpoint_us",
					       json_object_new_uint64(p->checkpoint_us));
		}
		if (restored) {
			json_object_object_add(o, "restore_us",
					       json_object_new_uint64(p->restore_us));
			json_object_object_add(o, "unlock_us",
					       json_object_new_uint64(p->unlock_us));
		}
		json_object_array_add(procs, o);
	}
	json_object_object_add(root, "cuda_processes", procs);
	json_object_object_add(root, "processes", json_object_new_int((int)m->nprocs));
	json_object_object_add(root, "image_bytes", json_object_new_uint64(m->image_bytes));
	if (manifest_has_phase(m, "pause")) {
		json_object_object_add(root, "staged", json_object_new_boolean(m->options.staged));
		if (m->unstaged_why)
			json_object_object_add(root, "not_staged_because",
					       json_object_new_string(m->unstaged_why));
	}
	if (m->lock_tries)
		json_object_object_add(root, "lock_tries", json_object_new_int((int)m->lock_tries));
	if (checkpointed) {
		json_object_object_add(root, "huge_pages", json_object_new_boolean(m->huge_pages));
		if (m->no_huge_pages_why)
			json_object_object_add(root, "no_huge_pages_because",
					       json_object_new_string(m->no_huge_pages_why));
	}
	/* Set by a checkpoint only. */
	if (m->page_writers) {
		json_object_object_add(root, "page_writers", json_object_new_int(m->page_writers));
		json_object_object_add(root, "page_writer_chunks",
				       json_object_new_boolean(m->page_writer_chunks));
		json_object_object_add(root, "page_writer_parts",
				       json_object_new_boolean(m->page_writer_parts));
	}
	text = strdup(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN));
	json_object_put(root);
	return text;
}
