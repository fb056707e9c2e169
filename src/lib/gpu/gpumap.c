/* SPDX-License-Identifier: MIT */
#include "gpumap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* A side of an entry: a GPU index or a UUID as the driver writes it. */
static bool gpu_name_valid(const char *name)
{
	struct cuda_uuid uuid;
	uint64_t index;

	return parse_uint_in(name, 0, GPU_MAP_MAX - 1, &index) == 0 ||
	       cuda_uuid_parse(name, &uuid) == 0;
}

static int map_error(struct stasis_error **err, const char *fmt, const char *what)
{
	stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0, fmt, what);
	return stasis_error_hint(err, "write it as 0=1,1=0 or GPU-...=GPU-...");
}

int gpu_map_parse(const char *text, struct gpu_map *map, struct stasis_error **err)
{
	const char *item = text;

	memset(map, 0, sizeof(*map));
	if (!*text)
		return map_error(err, "--gpu-map is empty%s", "");
	for (;;) {
		size_t len = strcspn(item, ","), eq = strcspn(item, "=");
		char entry[128];

		snprintf(entry, sizeof(entry), "%.*s", (int)len, item);
		if (!len)
			return map_error(err, "--gpu-map '%s' has an empty part", text);
		if (map->n == GPU_MAP_MAX)
			return map_error(err, "--gpu-map '%s' has more than 64 parts", text);
		if (eq >= len || eq == 0 || eq + 1 == len || strchr(entry + eq + 1, '='))
			return map_error(err, "--gpu-map part '%s' is not OLD=NEW", entry);
		snprintf(map->entries[map->n].from, sizeof(map->entries[0].from), "%.*s", (int)eq,
			 item);
		snprintf(map->entries[map->n].to, sizeof(map->entries[0].to), "%.*s",
			 (int)(len - eq - 1), item + eq + 1);
		if (eq >= sizeof(map->entries[0].from) || len - eq > sizeof(map->entries[0].to) ||
		    !gpu_name_valid(map->entries[map->n].from) ||
		    !gpu_name_valid(map->entries[map->n].to))
			return map_error(
			    err, "--gpu-map part '%s' does not name GPUs by index or UUID", entry);
		for (size_t i = 0; i < map->n; i++) {
			if (strcmp(map->entries[i].from, map->entries[map->n].from) == 0)
				return map_error(err, "--gpu-map maps GPU '%s' twice",
						 map->entries[i].from);
			if (strcmp(map->entries[i].to, map->entries[map->n].to) == 0)
				return map_error(err, "--gpu-map maps two GPUs onto '%s'",
						 map->entries[i].to);
		}
		map->n++;
		if (!item[len])
			return 0;
		item += len + 1;
	}
}

/* A GPU named by UUID or by index, in a list of n. */
static int find_gpu(const char *name, const char *const *uuids, const int *indexes, size_t n)
{
	uint64_t idx;
	bool is_index = parse_uint_in(name, 0, GPU_MAP_MAX - 1, &idx) == 0;

	for (size_t i = 0; i < n; i++) {
		if (strcmp(uuids[i], name) == 0)
			return (int)i;
		if (is_index && indexes[i] == (int)idx)
			return (int)i;
	}
	return -1;
}

/* The image's GPUs for find_gpu. */
static void image_gpus(const struct manifest *m, const char **uuids, int *indexes)
{
	for (size_t i = 0; i < m->ngpus && i < GPU_MAP_MAX; i++) {
		uuids[i] = m->gpus[i].uuid;
		indexes[i] = m->gpus[i].index;
	}
}

/* Each OLD of map is one of the image's GPUs, named once: into from[]. */
static int map_from_image(const struct gpu_map *map, const struct manifest *m, int *from,
			  struct stasis_error **err)
{
	const char *uuids[GPU_MAP_MAX];
	int indexes[GPU_MAP_MAX];

	image_gpus(m, uuids, indexes);
	for (size_t i = 0; i < map->n; i++) {
		from[i] = find_gpu(map->entries[i].from, uuids, indexes,
				   m->ngpus < GPU_MAP_MAX ? m->ngpus : GPU_MAP_MAX);
		if (from[i] < 0) {
			stasis_error_set(err, ENODEV, STASIS_DOMAIN_USAGE, 0,
					 "--gpu-map: the image has no GPU '%s'",
					 map->entries[i].from);
			return stasis_error_hint(err, "stasis inspect lists the image's GPUs");
		}
		for (size_t j = 0; j < i; j++)
			if (from[j] == from[i]) {
				stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
						 "--gpu-map maps the image's GPU %s twice ('%s' "
						 "and '%s')",
						 m->gpus[from[i]].uuid, map->entries[j].from,
						 map->entries[i].from);
				return stasis_error_hint(err, "name each GPU once");
			}
	}
	return 0;
}

int gpu_map_check_image(const char *text, const struct manifest *m, struct stasis_error **err)
{
	struct gpu_map map;
	int from[GPU_MAP_MAX];
	int r = gpu_map_parse(text, &map, err);

	if (r < 0)
		return r;
	if (!manifest_cuda_count(m)) {
		stasis_error_set(
		    err, EINVAL, STASIS_DOMAIN_USAGE, 0,
		    "--gpu-map: the image holds no GPU state, there is nothing to map");
		return stasis_error_hint(err, "restore it without --gpu-map");
	}
	return map_from_image(&map, m, from, err);
}

static int parse_map(const struct manifest *m, const struct nvml_gpu *gpus, size_t ngpus,
		     const char *text, struct gpu_plan *plan, struct stasis_error **err)
{
	const char *new_uuids[GPU_MAP_MAX];
	int new_idx[GPU_MAP_MAX], from[GPU_MAP_MAX];
	struct gpu_map map;
	int r = gpu_map_parse(text, &map, err);

	if (r == 0)
		r = map_from_image(&map, m, from, err);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ngpus && i < GPU_MAP_MAX; i++) {
		new_uuids[i] = gpus[i].uuid;
		new_idx[i] = gpus[i].index;
	}
	for (size_t i = 0; i < map.n; i++) {
		int to = find_gpu(map.entries[i].to, new_uuids, new_idx,
				  ngpus < GPU_MAP_MAX ? ngpus : GPU_MAP_MAX);

		if (to < 0) {
			stasis_error_set(err, ENODEV, STASIS_DOMAIN_USAGE, 0,
					 "--gpu-map: no GPU '%s' here", map.entries[i].to);
			return stasis_error_hint(err, "stasis ps lists this machine's GPUs");
		}
		plan->target[from[i]] = to;
	}
	return 0;
}

static bool target_taken(const struct gpu_plan *plan, int target)
{
	for (size_t i = 0; i < plan->n; i++)
		if (plan->target[i] == target)
			return true;
	return false;
}

static uint64_t image_bytes_on(const struct manifest *m, size_t gpu)
{
	uint64_t bytes = 0;

	for (size_t i = 0; i < m->nprocs; i++)
		for (size_t j = 0; j < m->procs[i].ngpus; j++)
			if ((size_t)m->procs[i].gpus[j] == gpu)
				bytes += m->procs[i].gpu_bytes / m->procs[i].ngpus;
	return bytes;
}

/* Same UUID if present, else an unused GPU of the same chip with room. */
static void default_targets(const struct manifest *m, const struct nvml_gpu *gpus, size_t ngpus,
			    struct gpu_plan *plan)
{
	for (size_t i = 0; i < plan->n; i++)
		for (size_t g = 0; plan->target[i] < 0 && g < ngpus; g++)
			if (strcmp(gpus[g].uuid, m->gpus[i].uuid) == 0 &&
			    !target_taken(plan, (int)g))
				plan->target[i] = (int)g;
	for (size_t i = 0; i < plan->n; i++) {
		for (size_t g = 0; plan->target[i] < 0 && g < ngpus; g++) {
			uint64_t free_bytes = gpus[g].memory_total - gpus[g].memory_used;

			if (target_taken(plan, (int)g) ||
			    strcmp(gpus[g].arch, m->gpus[i].chip) != 0 ||
			    free_bytes < image_bytes_on(m, i))
				continue;
			plan->target[i] = (int)g;
		}
	}
}

static int check_targets(const struct manifest *m, const struct nvml_gpu *gpus,
			 const struct gpu_plan *plan, struct stasis_error **err)
{
	for (size_t i = 0; i < plan->n; i++) {
		const struct nvml_gpu *t;
		uint64_t need = image_bytes_on(m, i);

		if (plan->target[i] < 0) {
			stasis_error_set(err, ENODEV, STASIS_DOMAIN_CUDA, 0,
					 "no GPU here for checkpointed GPU %s (%s %s)",
					 m->gpus[i].uuid, m->gpus[i].chip, m->gpus[i].name);
			return stasis_error_hint(err, "free a GPU of that chip, or give --gpu-map");
		}
		for (size_t j = 0; j < i; j++)
			if (plan->target[j] == plan->target[i]) {
				stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
						 "two checkpointed GPUs map onto GPU %s",
						 gpus[plan->target[i]].uuid);
				return stasis_error_hint(err,
							 "the driver needs a one-to-one GPU map");
			}
		t = &gpus[plan->target[i]];
		if (strcmp(t->arch, m->gpus[i].chip) != 0) {
			stasis_error_set(err, EINVAL, STASIS_DOMAIN_CUDA, 0,
					 "GPU %s is a %s, the image was made on a %s", t->uuid,
					 t->arch, m->gpus[i].chip);
			return stasis_error_hint(err, "restore onto a GPU of the same chip");
		}
		if (need && t->memory_total - t->memory_used < need) {
			char a[32], b[32];

			stasis_error_set(
			    err, ENOSPC, STASIS_DOMAIN_CUDA, 0,
			    "GPU %s has %s free, the image needs %s", t->uuid,
			    format_bytes(t->memory_total - t->memory_used, a, sizeof(a)),
			    format_bytes(need, b, sizeof(b)));
			return stasis_error_hint(err,
						 "free GPU memory or restore onto another GPU");
		}
	}
	return 0;
}

static bool used_by_a_process(const struct manifest *m, size_t gpu)
{
	for (size_t i = 0; i < m->nprocs; i++)
		for (size_t j = 0; j < m->procs[i].ngpus; j++)
			if ((size_t)m->procs[i].gpus[j] == gpu)
				return true;
	return false;
}

/* Every GPU that moves, whether --gpu-map or the default rule moved it:
 * the processes' GPUs first, then those only completing the permutation. */
static void plan_notes(const struct manifest *m, const struct nvml_gpu *gpus, struct gpu_plan *plan)
{
	for (int used = 1; used >= 0; used--)
		for (size_t i = 0; i < plan->n; i++) {
			const char *to = gpus[plan->target[i]].uuid;
			size_t len = strlen(plan->notes);

			if (strcmp(m->gpus[i].uuid, to) == 0 || used_by_a_process(m, i) != used)
				continue;
			snprintf(plan->notes + len, sizeof(plan->notes) - len, "%s%s -> %s%s",
				 len ? ", " : "", m->gpus[i].uuid, to,
				 used ? "" : " (no process used it)");
		}
}

/* The device files follow the GPUs: /dev/nvidiaOLD becomes /dev/nvidiaNEW. */
static void plan_dev_map(const struct manifest *m, const struct nvml_gpu *gpus,
			 struct gpu_plan *plan)
{
	for (size_t i = 0; i < plan->n; i++) {
		int from = m->gpus[i].minor, to = gpus[plan->target[i]].minor;
		size_t used = strlen(plan->dev_map);

		if (from < 0 || to < 0 || from == to)
			continue;
		snprintf(plan->dev_map + used, sizeof(plan->dev_map) - used, "%s%d:%d",
			 used ? "," : "", from, to);
	}
}

int gpu_plan_make(const struct manifest *m, const struct nvml_gpu *gpus, size_t ngpus,
		  const char *map, struct gpu_plan *plan, struct stasis_error **err)
{
	bool identity = true;
	int r;

	memset(plan, 0, sizeof(*plan));
	if (m->ngpus > ARRAY_SIZE(plan->target) || ngpus > ARRAY_SIZE(plan->target))
		return stasis_error_set(err, E2BIG, STASIS_DOMAIN_USAGE, 0, "too many GPUs");
	plan->n = m->ngpus;
	for (size_t i = 0; i < plan->n; i++)
		plan->target[i] = -1;
	if (map && *map) {
		r = parse_map(m, gpus, ngpus, map, plan, err);
		if (r < 0)
			return r;
	}
	default_targets(m, gpus, ngpus, plan);
	r = check_targets(m, gpus, plan, err);
	if (r < 0)
		return r;
	for (size_t i = 0; i < plan->n; i++) {
		struct cuda_gpu_pair *pair = &plan->pairs[i];

		if (cuda_uuid_parse(m->gpus[i].uuid, &pair->old_uuid) < 0 ||
		    cuda_uuid_parse(gpus[plan->target[i]].uuid, &pair->new_uuid) < 0)
			return stasis_error_set(err, EINVAL, STASIS_DOMAIN_IMAGE, 0,
						"GPU UUID %s cannot be parsed", m->gpus[i].uuid);
		if (memcmp(&pair->old_uuid, &pair->new_uuid, sizeof(pair->old_uuid)) != 0)
			identity = false;
	}
	plan_dev_map(m, gpus, plan);
	plan_notes(m, gpus, plan);
	/* Pairs only when something moves: drivers before 580 refuse them. */
	plan->npairs = identity ? 0 : (unsigned int)plan->n;
	return 0;
}
