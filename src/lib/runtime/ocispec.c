/* SPDX-License-Identifier: MIT */
#include "ocispec.h"

#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "exec.h"
#include "nvml.h"
#include "util.h"

/* The object at key in o, created when missing. */
static json_object *child(json_object *o, const char *key, json_type type)
{
	json_object *v;

	if (json_object_object_get_ex(o, key, &v) && json_object_is_type(v, type))
		return v;
	v = type == json_type_array ? json_object_new_array() : json_object_new_object();
	json_object_object_add(o, key, v);
	return v;
}

static int add_device(json_object *config, const char *path, const char *host_path,
		      struct oci_edit_summary *sum, struct stasis_error **err)
{
	json_object *linux_ = child(config, "linux", json_type_object);
	json_object *devices = child(linux_, "devices", json_type_array);
	json_object *rules =
	    child(child(linux_, "resources", json_type_object), "devices", json_type_array);
	json_object *dev = json_object_new_object(), *rule = json_object_new_object();
	struct stat st;

	if (stat(host_path, &st) < 0 || !S_ISCHR(st.st_mode)) {
		json_object_put(dev);
		json_object_put(rule);
		return stasis_error_set(err, ENODEV, STASIS_DOMAIN_USAGE, 0,
					"%s is not a character device here", host_path);
	}
	for (size_t i = 0; i < json_object_array_length(devices); i++) {
		json_object *d = json_object_array_get_idx(devices, i), *p;

		if (json_object_object_get_ex(d, "path", &p) &&
		    strcmp(json_object_get_string(p), path) == 0) {
			json_object_put(dev);
			json_object_put(rule);
			return 0; /* already there */
		}
	}
	json_object_object_add(dev, "path", json_object_new_string(path));
	json_object_object_add(dev, "type", json_object_new_string("c"));
	json_object_object_add(dev, "major", json_object_new_int((int)major(st.st_rdev)));
	json_object_object_add(dev, "minor", json_object_new_int((int)minor(st.st_rdev)));
	json_object_object_add(dev, "fileMode", json_object_new_int(0666));
	json_object_object_add(dev, "uid", json_object_new_int(0));
	json_object_object_add(dev, "gid", json_object_new_int(0));
	json_object_array_add(devices, dev);
	json_object_object_add(rule, "allow", json_object_new_boolean(1));
	json_object_object_add(rule, "type", json_object_new_string("c"));
	json_object_object_add(rule, "major", json_object_new_int((int)major(st.st_rdev)));
	json_object_object_add(rule, "minor", json_object_new_int((int)minor(st.st_rdev)));
	json_object_object_add(rule, "access", json_object_new_string("rwm"));
	json_object_array_add(rules, rule);
	sum->devices++;
	return 0;
}

static void add_mount(json_object *config, const char *dest, const char *source,
		      json_object *options, struct oci_edit_summary *sum)
{
	json_object *mounts = child(config, "mounts", json_type_array);
	json_object *m = json_object_new_object();

	json_object_object_add(m, "destination", json_object_new_string(dest));
	json_object_object_add(m, "type", json_object_new_string("bind"));
	json_object_object_add(m, "source", json_object_new_string(source));
	if (!options) {
		options = json_object_new_array();
		json_object_array_add(options, json_object_new_string("rbind"));
		json_object_array_add(options, json_object_new_string("ro"));
		json_object_array_add(options, json_object_new_string("nosuid"));
		json_object_array_add(options, json_object_new_string("nodev"));
	}
	json_object_object_add(m, "options", options);
	json_object_array_add(mounts, m);
	sum->mounts++;
}

/* The driver's user-space libraries, as ldconfig lists them, each bound
 * read-only at the path ldconfig names (the soname links included). */
static int add_driver_libraries(json_object *config, struct oci_edit_summary *sum,
				struct stasis_error **err)
{
	const char *argv[] = {"ldconfig", "-p", NULL};
	_cleanup_free_ char *out = NULL;
	char *save = NULL;

	if (exec_run(argv, &out) != 0)
		return stasis_error_set(err, ENOENT, STASIS_DOMAIN_USAGE, 0,
					"ldconfig -p failed; cannot find the driver's libraries");
	for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *arrow = strstr(line, "=> "), real[PATH_MAX];
		const char *path = arrow ? arrow + 3 : NULL;

		if (!path || (!strstr(line, "libcuda.so") && !strstr(line, "libnvidia-") &&
			      !strstr(line, "libcudadebugger")))
			continue;
		if (realpath(path, real))
			add_mount(config, path, real, NULL, sum);
	}
	return 0;
}

static bool selected(const char *gpus, int minor, const struct nvml_gpu *all, size_t n)
{
	_cleanup_free_ char *copy = strdup(gpus);
	char *save = NULL;

	if (strcmp(gpus, "all") == 0)
		return true;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		for (size_t i = 0; i < n; i++)
			if (all[i].minor == minor &&
			    (strcmp(all[i].uuid, tok) == 0 || atoi(tok) == all[i].index))
				return true;
	return false;
}

static int edits_from_machine(json_object *config, const char *gpus, struct oci_edit_summary *sum,
			      struct stasis_error **err)
{
	static const char *const control[] = {"/dev/nvidiactl", "/dev/nvidia-uvm",
					      "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"};
	_cleanup_free_ struct nvml_gpu *all = NULL;
	size_t n = 0;
	struct stat st;
	int r;

	if (stat(control[0], &st) < 0) {
		stasis_error_set(err, ENODEV, STASIS_DOMAIN_USAGE, 0,
				 "no NVIDIA device nodes here (%s is missing)", control[0]);
		return stasis_error_hint(err, "load the NVIDIA driver, or give a CDI spec with "
					      "--cdi");
	}
	r = nvml_gpus(&all, &n, err);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(control); i++)
		if (stat(control[i], &st) == 0 &&
		    (r = add_device(config, control[i], control[i], sum, err)) < 0)
			return r;
	for (size_t i = 0; i < n; i++) {
		char path[64];

		if (all[i].minor < 0 || !selected(gpus, all[i].minor, all, n))
			continue;
		snprintf(path, sizeof(path), "/dev/nvidia%d", all[i].minor);
		r = add_device(config, path, path, sum, err);
		if (r < 0)
			return r;
	}
	if (stat("/usr/bin/nvidia-smi", &st) == 0)
		add_mount(config, "/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi", NULL, sum);
	return add_driver_libraries(config, sum, err);
}

static const char *str(json_object *o, const char *key)
{
	json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : NULL;
}

static int apply_edits(json_object *config, json_object *edits, struct oci_edit_summary *sum,
		       struct stasis_error **err)
{
	json_object *v,
	    *env = child(child(config, "process", json_type_object), "env", json_type_array);
	int r;

	if (json_object_object_get_ex(edits, "env", &v))
		for (size_t i = 0; i < json_object_array_length(v); i++, sum->env++)
			json_object_array_add(env,
					      json_object_get(json_object_array_get_idx(v, i)));
	if (json_object_object_get_ex(edits, "deviceNodes", &v))
		for (size_t i = 0; i < json_object_array_length(v); i++) {
			json_object *d = json_object_array_get_idx(v, i);
			const char *path = str(d, "path"), *host = str(d, "hostPath");

			if (!path)
				continue;
			r = add_device(config, path, host ? host : path, sum, err);
			if (r < 0)
				return r;
		}
	if (json_object_object_get_ex(edits, "mounts", &v))
		for (size_t i = 0; i < json_object_array_length(v); i++) {
			json_object *m = json_object_array_get_idx(v, i), *opts = NULL;

			if (!str(m, "hostPath") || !str(m, "containerPath"))
				continue;
			if (json_object_object_get_ex(m, "options", &opts))
				json_object_get(opts);
			add_mount(config, str(m, "containerPath"), str(m, "hostPath"), opts, sum);
		}
	if (json_object_object_get_ex(edits, "hooks", &v))
		sum->hooks_skipped += (unsigned int)json_object_array_length(v);
	return 0;
}

static bool cdi_device_selected(json_object *dev, const char *gpus)
{
	_cleanup_free_ char *copy = strdup(gpus);
	const char *name = str(dev, "name");
	char *save = NULL;

	if (strcmp(gpus, "all") == 0)
		return true;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		if (name && strcmp(name, tok) == 0)
			return true;
	return false;
}

static int edits_from_cdi(json_object *config, const char *file, const char *gpus,
			  struct oci_edit_summary *sum, struct stasis_error **err)
{
	_cleanup_free_ char *text = read_file_str(file, NULL);
	json_object *cdi, *v;
	int r = 0;

	if (!text)
		return stasis_error_errno(err, errno, "cannot read CDI spec %s", file);
	cdi = json_tokener_parse(text);
	if (!cdi || !json_object_is_type(cdi, json_type_object)) {
		json_object_put(cdi);
		stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
				 "CDI spec %s is not JSON; stasis reads JSON CDI specs", file);
		return stasis_error_hint(err, "nvidia-ctk cdi generate --format=json");
	}
	if (json_object_object_get_ex(cdi, "containerEdits", &v))
		r = apply_edits(config, v, sum, err);
	if (r == 0 && json_object_object_get_ex(cdi, "devices", &v))
		for (size_t i = 0; r == 0 && i < json_object_array_length(v); i++) {
			json_object *dev = json_object_array_get_idx(v, i), *edits;

			if (cdi_device_selected(dev, gpus) &&
			    json_object_object_get_ex(dev, "containerEdits", &edits))
				r = apply_edits(config, edits, sum, err);
		}
	json_object_put(cdi);
	return r;
}

int oci_gpu_spec(const char *path, const char *gpus, const char *cdi_file,
		 struct oci_edit_summary *sum, struct stasis_error **err)
{
	_cleanup_free_ char *text = read_file_str(path, NULL), *dir = NULL;
	json_object *config;
	const char *out, *slash;
	int r;

	memset(sum, 0, sizeof(*sum));
	if (!text)
		return stasis_error_errno(err, errno, "cannot read %s", path);
	config = json_tokener_parse(text);
	if (!config || !json_object_is_type(config, json_type_object)) {
		json_object_put(config);
		return stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
					"%s is not an OCI config (not a JSON object)", path);
	}
	r = cdi_file ? edits_from_cdi(config, cdi_file, gpus, sum, err)
		     : edits_from_machine(config, gpus, sum, err);
	if (r == 0) {
		out = json_object_to_json_string_ext(config, JSON_C_TO_STRING_PRETTY |
								 JSON_C_TO_STRING_NOSLASHESCAPE);
		slash = strrchr(path, '/');
		dir = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
		r = write_file_atomic(dir, slash ? slash + 1 : path, out, strlen(out));
		if (r < 0)
			stasis_error_errno(err, -r, "writing %s", path);
	}
	json_object_put(config);
	return r;
}
