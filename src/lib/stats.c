/* SPDX-License-Identifier: MIT */
/* --print-stats: podman's shape, every duration in microseconds: stasis's
 * phases, and CRIU's own statistics under CRIU's names, as podman and
 * checkpointctl print them ("criu_statistics"). */
#include <json-c/json.h>
#include <string.h>

#include "stasis.h"
#include "views.h"

static void add_u64(json_object *o, const char *key, uint64_t value)
{
	json_object_object_add(o, key, json_object_new_uint64(value));
}

json_object *stats_criu_json(const struct criu_dump_stats *d, const struct criu_restore_stats *r)
{
	json_object *o = json_object_new_object();

	if (d && d->present) {
		add_u64(o, "freezing_time", d->freezing_time);
		add_u64(o, "frozen_time", d->frozen_time);
		add_u64(o, "memdump_time", d->memdump_time);
		add_u64(o, "memwrite_time", d->memwrite_time);
		add_u64(o, "pages_scanned", d->pages_scanned);
		add_u64(o, "pages_skipped_parent", d->pages_skipped_parent);
		add_u64(o, "pages_written", d->pages_written);
		add_u64(o, "pages_lazy", d->pages_lazy);
		if (d->has_irmap_resolve)
			add_u64(o, "irmap_resolve", d->irmap_resolve);
		if (d->has_page_pipes) {
			add_u64(o, "page_pipes", d->page_pipes);
			add_u64(o, "page_pipe_bufs", d->page_pipe_bufs);
		}
		if (d->has_shpages) {
			add_u64(o, "shpages_scanned", d->shpages_scanned);
			add_u64(o, "shpages_skipped_parent", d->shpages_skipped_parent);
			add_u64(o, "shpages_written", d->shpages_written);
		}
	}
	if (r && r->present) {
		add_u64(o, "pages_compared", r->pages_compared);
		add_u64(o, "pages_skipped_cow", r->pages_skipped_cow);
		add_u64(o, "forking_time", r->forking_time);
		add_u64(o, "restore_time", r->restore_time);
		if (r->has_pages_restored)
			add_u64(o, "pages_restored", r->pages_restored);
	}
	return o;
}

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
	if (m->criu_dump.present || m->criu_restore.present)
		json_object_object_add(root, "criu_statistics",
				       stats_criu_json(&m->criu_dump, &m->criu_restore));
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
