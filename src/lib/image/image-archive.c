/* SPDX-License-Identifier: MIT */
#include "image-archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define ARCHIVE_CRIU_DIR "checkpoint"
#define ARCHIVE_ROOTFS_DIFF "rootfs-diff.tar"
#define ARCHIVE_STATS "stats-dump"
#define ARCHIVE_SPEC "spec.dump"
#define ARCHIVE_CONFIG "config.dump"
#define ARCHIVE_STATUS "status.dump" /* the CRI's ContainerStatus */
#define COPY_CHUNK (1 << 20)

static bool compressed_name(const char *path)
{
	size_t n = strlen(path);

	return (n > 4 && strcmp(path + n - 4, ".zst") == 0) ||
	       (n > 5 && strcmp(path + n - 5, ".zstd") == 0);
}

static int archive_fail(struct archive *a, const char *what, const char *path,
			struct stasis_error **err)
{
	const char *why = archive_error_string(a);

	return stasis_error_set(err, EIO, STASIS_DOMAIN_SYSTEM, 0, "%s %s: %s", what, path,
				why ? why : "libarchive failed");
}

/* ---- writing ---- */

static int add_bytes(struct archive *a, const char *name, const void *data, size_t len,
		     const char *out, struct stasis_error **err)
{
	struct archive_entry *e = archive_entry_new();
	int r = 0;

	if (!e)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0600);
	archive_entry_set_size(e, (la_int64_t)len);
	archive_entry_set_mtime(e, time(NULL), 0);
	if (archive_write_header(a, e) != ARCHIVE_OK ||
	    (len && archive_write_data(a, data, len) != (la_ssize_t)len))
		r = archive_fail(a, "writing", out, err);
	archive_entry_free(e);
	return r;
}

/* The file at dirfd/name into the archive as entry name as_name. */
static int add_file(struct archive *a, int dirfd, const char *name, const char *as_name,
		    const char *out, struct stasis_error **err)
{
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	_cleanup_free_ char *buf = NULL;
	struct archive_entry *e;
	struct stat st;
	int r = 0;

	if (fd < 0 || fstat(fd, &st) < 0)
		return stasis_error_errno(err, errno, "reading %s of the image: %s", name,
					  strerror(errno));
	if (!S_ISREG(st.st_mode))
		return stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
					"%s of the image is not a plain file", name);
	buf = malloc(COPY_CHUNK);
	e = archive_entry_new();
	if (!buf || !e) {
		archive_entry_free(e);
		return stasis_error_errno(err, ENOMEM, "out of memory");
	}
	archive_entry_set_pathname(e, as_name);
	archive_entry_set_filetype(e, AE_IFREG);
	archive_entry_set_perm(e, 0600);
	archive_entry_set_size(e, st.st_size);
	archive_entry_set_mtime(e, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
	if (archive_write_header(a, e) != ARCHIVE_OK)
		r = archive_fail(a, "writing", out, err);
	archive_entry_free(e);
	for (;;) {
		ssize_t n = r < 0 ? 0 : read(fd, buf, COPY_CHUNK);

		if (n < 0)
			return stasis_error_errno(err, errno, "reading %s: %s", name,
						  strerror(errno));
		if (n == 0)
			break;
		if (archive_write_data(a, buf, (size_t)n) != n)
			return archive_fail(a, "writing", out, err);
	}
	return r;
}

/* CRIU's files under checkpoint/, with a copy of the two that checkpointctl
 * and podman read at the top. */
static int add_criu_folder(struct archive *a, int dirfd, const char *out, struct stasis_error **err)
{
	_cleanup_close_ int criu =
	    openat(dirfd, IMAGE_CRIU_SUBDIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct dirent *de;
	DIR *d;
	int r = 0;

	if (criu < 0)
		return stasis_error_errno(err, errno, "the image has no %s folder: %s",
					  IMAGE_CRIU_SUBDIR, strerror(errno));
	d = fdopendir(dup(criu));
	if (!d)
		return stasis_error_errno(err, errno, "reading the image: %s", strerror(errno));
	while (r == 0 && (de = readdir(d))) {
		char name[PATH_MAX];

		if (de->d_name[0] == '.')
			continue;
		snprintf(name, sizeof(name), ARCHIVE_CRIU_DIR "/%s", de->d_name);
		r = add_file(a, criu, de->d_name, name, out, err);
		if (r == 0 && (strcmp(de->d_name, ARCHIVE_ROOTFS_DIFF) == 0 ||
			       strcmp(de->d_name, ARCHIVE_STATS) == 0))
			r = add_file(a, criu, de->d_name, de->d_name, out, err);
	}
	closedir(d);
	return r;
}

/* checkpointctl takes an archive only with a folder entry for CRIU's
 * files, which a tar of the files alone lacks. */
static int add_folder(struct archive *a, const char *name, const char *out,
		      struct stasis_error **err)
{
	struct archive_entry *e = archive_entry_new();
	int r = 0;

	if (!e)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	archive_entry_set_pathname(e, name);
	archive_entry_set_filetype(e, AE_IFDIR);
	archive_entry_set_perm(e, 0700);
	archive_entry_set_mtime(e, time(NULL), 0);
	if (archive_write_header(a, e) != ARCHIVE_OK)
		r = archive_fail(a, "writing", out, err);
	archive_entry_free(e);
	return r;
}

static int add_json(struct archive *a, const char *name, json_object *o, const char *out,
		    struct stasis_error **err)
{
	const char *text = o ? json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN) : NULL;
	int r = text ? add_bytes(a, name, text, strlen(text), out, err)
		     : stasis_error_errno(err, ENOMEM, "out of memory");

	json_object_put(o);
	return r;
}

static void put_string(json_object *o, const char *key, const char *value)
{
	if (value && *value)
		json_object_object_add(o, key, json_object_new_string(value));
}

/* The image's NAME@DIGEST (its digest and tag off the name): what the CRI
 * pulls again at a restore from an archive. "" without a digest, or for an
 * image named by its ID alone. */
static void image_ref(const char *image, const char *digest, char *out, size_t len)
{
	const char *at = strchr(image, '@'), *end = at ? at : image + strlen(image);
	const char *slash = memrchr(image, '/', (size_t)(end - image));
	const char *colon =
	    memchr(slash ? slash : image, ':', (size_t)(end - (slash ? slash : image)));

	out[0] = '\0';
	if (colon)
		end = colon;
	if (digest && *digest && end > image && strncmp(image, "sha256:", 7) != 0)
		snprintf(out, len, "%.*s@%s", (int)(end - image), image, digest);
}

/* status.dump, the CRI's ContainerStatus of a container the CRI made, as
 * its restore from an archive reads it (the name, image, labels and
 * annotations it gives the restored container), from the CRI's config. */
static json_object *cri_status(const char *cri_config)
{
	static const char *const keys[] = {"metadata", "image", "labels", "annotations",
					   "log_path"};
	json_object *config = json_tokener_parse(cri_config), *status, *v;

	if (!config)
		return NULL;
	status = json_object_new_object();
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (json_object_object_get_ex(config, keys[i], &v))
			json_object_object_add(status, keys[i], json_object_get(v));
	json_object_put(config);
	return status;
}

/* What checkpointctl, podman and containerd read of the workload:
 * config.dump (checkpointctl's ContainerConfig) and spec.dump (an OCI
 * spec: a container's own, else one that names the tree's root process,
 * made by stasis). */
static int add_workload(struct archive *a, const struct manifest *m, const char *out,
			struct stasis_error **err)
{
	const struct manifest_process *root = m->nprocs ? manifest_root(m) : NULL;
	json_object *config = json_object_new_object(), *spec = NULL;
	char pid[16] = "";
	int r = 0;

	if (root)
		snprintf(pid, sizeof(pid), "%d", (int)root->pid);
	put_string(config, "id", m->container.id ? m->container.id : pid);
	put_string(config, "name", m->container.id ? m->container.id : root ? root->comm : "");
	put_string(config, "rootfsImageName", m->container.image);
	put_string(config, "rootfsImage", m->container.image);
	if (m->container.image) {
		char ref[1024];

		image_ref(m->container.image, m->container.image_digest, ref, sizeof(ref));
		put_string(config, "rootfsImageRef", ref);
	}
	put_string(config, "runtime", m->container.runtime);
	put_string(config, "createdTime", m->created);
	put_string(config, "checkpointedTime", m->created);
	if (m->container.spec)
		r = add_bytes(a, ARCHIVE_SPEC, m->container.spec, strlen(m->container.spec), out,
			      err);
	else {
		json_object *process = json_object_new_object(), *args = json_object_new_array();
		json_object *annotations = json_object_new_object();

		spec = json_object_new_object();
		json_object_array_add(args, json_object_new_string(root ? root->comm : ""));
		json_object_object_add(process, "args", args);
		json_object_object_add(spec, "ociVersion", json_object_new_string("1.0.2"));
		json_object_object_add(spec, "process", process);
		json_object_object_add(annotations, "io.container.manager",
				       json_object_new_string("stasis"));
		json_object_object_add(spec, "annotations", annotations);
		r = add_json(a, ARCHIVE_SPEC, spec, out, err);
	}
	if (r == 0 && m->container.cri_config) {
		json_object *status = cri_status(m->container.cri_config);

		r = status ? add_json(a, ARCHIVE_STATUS, status, out, err) : 0;
	}
	if (r < 0) {
		json_object_put(config);
		return r;
	}
	return add_json(a, ARCHIVE_CONFIG, config, out, err);
}

int image_archive_create(const char *path, struct stasis_error **err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0)
		return stasis_error_errno(err, errno, "creating %s: %s", path,
					  errno == EEXIST ? "it exists already" : strerror(errno));
	return fd;
}

int image_archive_write(const char *dir, const struct manifest *m, int fd, const char *path,
			struct stasis_error **err)
{
	_cleanup_close_ int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct archive *a;
	int r = 0;

	if (dirfd < 0)
		return stasis_error_errno(err, errno, "opening %s: %s", dir, strerror(errno));
	a = archive_write_new();
	if (!a)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
	    (compressed_name(path) && archive_write_add_filter_zstd(a) != ARCHIVE_OK) ||
	    archive_write_open_fd(a, fd) != ARCHIVE_OK) {
		r = archive_fail(a, "writing", path, err);
		archive_write_free(a);
		return r;
	}
	r = add_file(a, dirfd, "manifest.json", "manifest.json", path, err);
	if (r == 0 && faccessat(dirfd, "manifest.seal", F_OK, AT_SYMLINK_NOFOLLOW) == 0)
		r = add_file(a, dirfd, "manifest.seal", "manifest.seal", path, err);
	if (r == 0)
		r = add_folder(a, ARCHIVE_CRIU_DIR "/", path, err);
	if (r == 0)
		r = add_criu_folder(a, dirfd, path, err);
	if (r == 0)
		r = add_workload(a, m, path, err);
	if (archive_write_close(a) != ARCHIVE_OK && r == 0)
		r = archive_fail(a, "writing", path, err);
	archive_write_free(a);
	if (r == 0 && fsync(fd) < 0)
		r = stasis_error_errno(err, errno, "writing %s: %s", path, strerror(errno));
	return r;
}

/* ---- reading ---- */

/* Where an entry of the archive goes in the image folder: NULL for what
 * stasis does not take (podman's and checkpointctl's own files, the
 * copies at the top), "" for what it refuses. */
static const char *image_name(const char *entry, char *buf, size_t len)
{
	static const char *const skipped[] = {
	    ARCHIVE_STATS,	 ARCHIVE_SPEC,	  ARCHIVE_CONFIG,
	    ARCHIVE_ROOTFS_DIFF, ARCHIVE_STATUS,  "network.status",
	    "bind.mounts",	 "deleted.files", "devshm-checkpoint.tar"};
	const char *leaf;

	if (strncmp(entry, "./", 2) == 0)
		entry += 2;
	if (strcmp(entry, "manifest.json") == 0 || strcmp(entry, "manifest.seal") == 0)
		return entry;
	if (strcmp(entry, ARCHIVE_CRIU_DIR) == 0 || strcmp(entry, ARCHIVE_CRIU_DIR "/") == 0)
		return IMAGE_CRIU_SUBDIR;
	for (size_t i = 0; i < sizeof(skipped) / sizeof(skipped[0]); i++)
		if (strcmp(entry, skipped[i]) == 0)
			return NULL;
	if (strncmp(entry, ARCHIVE_CRIU_DIR "/", strlen(ARCHIVE_CRIU_DIR "/")) != 0)
		return "";
	leaf = entry + strlen(ARCHIVE_CRIU_DIR "/");
	snprintf(buf, len, IMAGE_CRIU_SUBDIR "/%s", leaf);
	/* One plain name, as the manifest's list of files has them. */
	return manifest_file_name_ok(buf) ? buf : "";
}

static int refuse_entry(const char *path, const char *entry, const char *why,
			struct stasis_error **err)
{
	stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0, "%s: entry '%s' %s", path, entry,
			 why);
	return stasis_error_hint(err, "nothing was restored; an image archive holds only "
				      "plain files, stasis's manifest and CRIU's files under "
				      "checkpoint/");
}

/* One entry's data into dirfd/name, a new file of root's. */
static int extract_file(struct archive *a, int dirfd, const char *name, const char *path,
			struct stasis_error **err)
{
	_cleanup_close_ int fd =
	    openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	const void *block;
	size_t size;
	la_int64_t offset, at = 0;
	int r;

	if (fd < 0)
		return stasis_error_errno(err, errno, "extracting %s: %s", name, strerror(errno));
	while ((r = archive_read_data_block(a, &block, &size, &offset)) == ARCHIVE_OK) {
		if (offset != at && lseek(fd, offset, SEEK_SET) < 0)
			return stasis_error_errno(err, errno, "extracting %s: %s", name,
						  strerror(errno));
		if (size && write_all(fd, block, size) < 0)
			return stasis_error_errno(err, errno, "extracting %s: %s", name,
						  strerror(errno));
		at = offset + (la_int64_t)size;
	}
	if (r != ARCHIVE_EOF)
		return archive_fail(a, "reading", path, err);
	if (ftruncate(fd, at) < 0)
		return stasis_error_errno(err, errno, "extracting %s: %s", name, strerror(errno));
	return 0;
}

static int read_entries(struct archive *a, int dirfd, const char *path, struct stasis_error **err)
{
	struct archive_entry *e;
	bool manifest = false;
	int r = 0, got;

	while (r == 0 && (got = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		const char *entry = archive_entry_pathname(e);
		char buf[PATH_MAX];
		const char *name = entry ? image_name(entry, buf, sizeof(buf)) : "";
		mode_t type = archive_entry_filetype(e);

		if (!name)
			continue;
		if (!*name)
			return refuse_entry(path, entry ? entry : "?",
					    "is not a name stasis writes", err);
		if (strcmp(name, IMAGE_CRIU_SUBDIR) == 0) {
			if (type != AE_IFDIR)
				return refuse_entry(path, entry, "is not a folder", err);
			continue;
		}
		if (type != AE_IFREG || archive_entry_hardlink(e))
			return refuse_entry(path, entry, "is not a plain file", err);
		manifest = manifest || strcmp(name, "manifest.json") == 0;
		r = extract_file(a, dirfd, name, path, err);
	}
	if (r == 0 && got != ARCHIVE_EOF)
		return archive_fail(a, "reading", path, err);
	if (r == 0 && !manifest) {
		stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
				 "%s holds no stasis manifest: not an image stasis wrote", path);
		return stasis_error_hint(err, "nothing was restored; restore a podman or CRIU "
					      "archive with its own runtime");
	}
	return r;
}

int image_archive_read(const char *path, const char *dir, struct stasis_error **err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	_cleanup_close_ int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct archive *a;
	struct stat st;
	int r;

	if (fd < 0 || fstat(fd, &st) < 0)
		return stasis_error_errno(err, errno, "opening %s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
					"%s is not a plain file", path);
	if (dirfd < 0)
		return stasis_error_errno(err, errno, "opening %s: %s", dir, strerror(errno));
	if (mkdirat(dirfd, IMAGE_CRIU_SUBDIR, 0700) < 0)
		return stasis_error_errno(err, errno, "creating %s/%s: %s", dir, IMAGE_CRIU_SUBDIR,
					  strerror(errno));
	a = archive_read_new();
	if (!a)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	/* Only what stasis writes: a tar, perhaps zstd'd (no filter that
	 * would run a program). */
	if (archive_read_support_format_tar(a) != ARCHIVE_OK ||
	    archive_read_support_filter_none(a) != ARCHIVE_OK ||
	    archive_read_support_filter_zstd(a) != ARCHIVE_OK ||
	    archive_read_open_fd(a, fd, COPY_CHUNK) != ARCHIVE_OK) {
		r = archive_fail(a, "reading", path, err);
		archive_read_free(a);
		return r;
	}
	r = read_entries(a, dirfd, path, err);
	archive_read_free(a);
	return r;
}
