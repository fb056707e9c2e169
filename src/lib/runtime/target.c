/* SPDX-License-Identifier: MIT */
#include "target.h"

#include <ctype.h>
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

/* containerd's identifier rule (its identifiers package), for its
 * containers and namespaces: letters and digits, joined by single '.',
 * '_' or '-', 76 at most. */
static bool containerd_identifier_ok(const char *s)
{
	size_t len = strlen(s);

	if (len == 0 || len > 76 || !isalnum((unsigned char)s[0]) ||
	    !isalnum((unsigned char)s[len - 1]))
		return false;
	for (size_t i = 0; i < len; i++) {
		bool sep = s[i] == '.' || s[i] == '_' || s[i] == '-';

		if (!isalnum((unsigned char)s[i]) && !sep)
			return false;
		if (sep && !isalnum((unsigned char)s[i + 1]))
			return false;
	}
	return true;
}

/* runc's rule (its container id check): letters, digits, '_', '+', '-'
 * and '.', never "." or "..". */
static bool runc_id_ok(const char *s)
{
	size_t len = strlen(s);

	if (len == 0 || len > 1024 || !strcmp(s, ".") || !strcmp(s, ".."))
		return false;
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("_+-.", s[i]))
			return false;
	return true;
}

static bool target_name_ok(const char *runtime, const char *name)
{
	if (runtime && strcmp(runtime, "containerd") == 0)
		return containerd_identifier_ok(name);
	return runc_id_ok(name);
}

int target_check_name(const char *runtime, const char *what, const char *name,
		      struct stasis_error **err)
{
	if (target_name_ok(runtime, name))
		return 0;
	stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0, "'%s' is not a valid %s %s", name,
			 runtime ? runtime : "container", what);
	return stasis_error_hint(err, "%s",
				 runtime && strcmp(runtime, "containerd") == 0
				     ? "use letters and digits, joined by '.', '_' or "
				       "'-' (76 characters at most)"
				     : "use letters, digits, '_', '+', '-' and '.'");
}

int target_restore_names(struct target *t, const struct manifest *m, struct stasis_error **err)
{
	int r;

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
	/* Each becomes part of a path (a link folder, a work folder): checked
	 * before anything is made of it, whether the user or the image gave it. */
	if (!t->ops->runtime)
		return 0;
	r = target_check_name(t->ops->runtime, "container id", t->id, err);
	if (r == 0 && t->namespace[0])
		r = target_check_name("containerd", "namespace", t->namespace, err);
	return r;
}

void target_list_containers(struct target_container **list, size_t *n)
{
	*list = NULL;
	*n = 0;
	for (size_t i = 0; i < sizeof(runtimes) / sizeof(runtimes[0]); i++)
		runtimes[i]->list(list, n, NULL);
}
