/* SPDX-License-Identifier: MIT */
#include "target.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const struct target_ops *const runtimes[] = {&target_runc, &target_containerd};

int target_for_runtime(const char *runtime, const struct target_ops **ops,
		       struct stasis_error **err)
{
	*ops = &target_tree;
	if (!runtime)
		return 0;
	for (size_t i = 0; i < sizeof(runtimes) / sizeof(runtimes[0]); i++) {
		if (strcmp(runtimes[i]->runtime, runtime) == 0) {
			*ops = runtimes[i];
			return 0;
		}
	}
	stasis_error_set(err, ENOTSUP, STASIS_DOMAIN_USAGE, 0, "unknown runtime '%s'", runtime);
	return stasis_error_hint(err, "stasis drives runc and containerd");
}

int target_for_image(const struct manifest *m, const char *runtime, const struct target_ops **ops,
		     struct stasis_error **err)
{
	if (runtime && !m->container.runtime) {
		stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
				 "the image holds a process tree, not a container");
		return stasis_error_hint(err, "restore it without --runtime");
	}
	if (m->container.runtime && (!runtime || strcmp(runtime, m->container.runtime) != 0)) {
		stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
				 "the image holds %s container '%s'", m->container.runtime,
				 m->container.id);
		return stasis_error_hint(err, "restore it with --runtime %s", m->container.runtime);
	}
	return target_for_runtime(m->container.runtime, ops, err);
}

void target_restore_names(struct target *t, const struct manifest *m)
{
	const struct stasis_restore_options *o = t->restore;
	const struct manifest_container *c = &m->container;

	snprintf(t->images, sizeof(t->images), "%s/%s", t->dir, IMAGE_CRIU_SUBDIR);
	snprintf(t->id, sizeof(t->id), "%s", o->name ? o->name : c->id ? c->id : "");
	snprintf(t->bundle, sizeof(t->bundle), "%s",
		 o->bundle   ? o->bundle
		 : c->bundle ? c->bundle
			     : "");
	snprintf(t->namespace, sizeof(t->namespace), "%s",
		 o->namespace	? o->namespace
		 : c->namespace ? c->namespace
				: "");
	snprintf(t->address, sizeof(t->address), "%s", o->address ? o->address : "");
}

void target_list_containers(struct target_container **list, size_t *n)
{
	*list = NULL;
	*n = 0;
	for (size_t i = 0; i < sizeof(runtimes) / sizeof(runtimes[0]); i++)
		runtimes[i]->list(list, n, NULL);
}
