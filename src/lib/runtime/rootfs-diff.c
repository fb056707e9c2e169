/* SPDX-License-Identifier: MIT */
#include "rootfs-diff.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <iconv.h>
#include <langinfo.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

#define WHITEOUT ".wh."
#define OPAQUE ".wh..wh..opq"
#define READ_BLOCK (64 * 1024)

/* Each member lands with its numeric owner, its mode (set-ID bits too),
 * its times and its extended attributes. libarchive refuses a member whose
 * name holds "..", is absolute, or leads through a symbolic link (one of
 * the image, or one the diff made a member before), and a hard link whose
 * target does; the chroot stays as a second wall. A parent folder is not
 * made up: a diff names every folder it adds, so a missing one means the
 * diff is not of this image. */
#define EXTRACT_FLAGS                                                                              \
	(ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |                     \
	 ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_SECURE_SYMLINKS |                                 \
	 ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS |                \
	 ARCHIVE_EXTRACT_NO_AUTODIR)

static void tar_freep(struct archive **a)
{
	if (*a)
		archive_read_free(*a);
}

static void disk_freep(struct archive **a)
{
	if (*a)
		archive_write_free(*a);
}

/* libarchive's message for its last failure, which some paths leave unset. */
static const char *why(struct archive *a)
{
	const char *text = archive_error_string(a);

	return text ? text : "unknown error";
}

/* A member's name relative to the root, into out: leading "/", "./" and
 * "../" go, as the chroot read them (".." of the root is the root), and so
 * does a folder's trailing "/"; "" for the root itself. A ".." further in
 * is left for libarchive to refuse. */
static int relative(const char *name, char *out, size_t len)
{
	size_t n;

	for (;;) {
		if (name[0] == '/')
			name++;
		else if (strncmp(name, "./", 2) == 0)
			name += 2;
		else if (strncmp(name, "../", 3) == 0)
			name += 3;
		else
			break;
	}
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		name = "";
	n = strlen(name);
	while (n > 0 && name[n - 1] == '/')
		n--;
	if (n >= len)
		return -ENAMETOOLONG;
	memcpy(out, name, n);
	out[n] = '\0';
	return 0;
}

static const char *base_name(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? slash + 1 : path;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

/* path and all below it; a path already gone is fine. */
static int remove_tree(const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlink(path) < 0 ? -errno : 0;
	return nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS) < 0 ? -errno : 0;
}

/* Everything in folder dir (an opaque folder: the image's files go). */
static int empty_dir(const char *dir)
{
	char path[PATH_MAX + 256];
	struct dirent *de;
	DIR *d = opendir(dir[0] ? dir : ".");
	int r = 0;

	if (!d)
		return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
	while (r == 0 && (de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof(path), "%s%s%s", dir, dir[0] ? "/" : "", de->d_name);
		r = remove_tree(path);
	}
	closedir(d);
	return r;
}

/* A whiteout's deletion, against the image's files. */
static int delete_whited_out(const char *path)
{
	const char *name = base_name(path);
	char dir[PATH_MAX], target[PATH_MAX + 8];
	size_t dir_len = (size_t)(name - path);

	snprintf(dir, sizeof(dir), "%.*s", (int)(dir_len ? dir_len - 1 : 0), path);
	if (strcmp(name, OPAQUE) == 0)
		return empty_dir(dir);
	snprintf(target, sizeof(target), "%s%s%s", dir, dir[0] ? "/" : "", name + strlen(WHITEOUT));
	return remove_tree(target);
}

/* Makes the member at path (relative to the root) through the disk writer;
 * the member's data is consumed. */
static int extract(struct archive *tar, struct archive_entry *e, const char *path,
		   struct archive *disk, char *msg, size_t len)
{
	mode_t type = archive_entry_filetype(e);
	const char *target = archive_entry_hardlink(e);
	char link[PATH_MAX];
	struct stat st;
	int r;

	/* A device node in a container is its runtime's to make, from the
	 * devices its spec lists; a diff that carries one (mode 0666 on a
	 * disk, say) is refused. */
	if (type == AE_IFCHR || type == AE_IFBLK) {
		snprintf(msg, len,
			 "/%s: a device node: a container's changes carry none (its runtime "
			 "makes the devices its spec lists)",
			 path);
		return -EPERM;
	}
	/* A folder of the image goes whole where the diff has something
	 * else: libarchive replaces only an empty one. */
	if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && type != AE_IFDIR) {
		r = remove_tree(path);
		if (r < 0) {
			snprintf(msg, len, "/%s: %s", path, strerror(-r));
			return r;
		}
	}
	archive_entry_copy_pathname(e, path);
	if (target) {
		r = relative(target, link, sizeof(link));
		if (r < 0) {
			snprintf(msg, len, "/%s: %s", path, strerror(-r));
			return r;
		}
		archive_entry_copy_hardlink(e, link);
	}
	/* A layer tar carries no access time: it takes the modification
	 * time rather than the time of the restore. */
	if (!archive_entry_atime_is_set(e))
		archive_entry_set_atime(e, archive_entry_mtime(e), archive_entry_mtime_nsec(e));
	/* Anything short of OK fails the apply: libarchive reports an owner,
	 * a mode or an attribute it could not set as a warning. */
	if (archive_read_extract2(tar, e, disk) != ARCHIVE_OK) {
		snprintf(msg, len, "/%s: %s", path, why(tar));
		return archive_errno(tar) > 0 ? -archive_errno(tar) : -EIO;
	}
	return 0;
}

/* A reader of the tar in fd, from its start. Only the plain tar formats:
 * containerd's differ writes an uncompressed OCI layer, and no filter that
 * libarchive could run as an outside program runs inside the chroot. */
static struct archive *open_tar(int fd, char *msg, size_t len)
{
	struct archive *tar = archive_read_new();

	if (!tar) {
		snprintf(msg, len, "%s", strerror(ENOMEM));
		return NULL;
	}
	if (lseek(fd, 0, SEEK_SET) < 0) {
		snprintf(msg, len, "not a whole tar: %s", strerror(errno));
		archive_read_free(tar);
		return NULL;
	}
	if (archive_read_support_filter_none(tar) != ARCHIVE_OK ||
	    archive_read_support_format_tar(tar) != ARCHIVE_OK ||
	    archive_read_open_fd(tar, fd, READ_BLOCK) != ARCHIVE_OK) {
		snprintf(msg, len, "not a whole tar: %s", why(tar));
		archive_read_free(tar);
		return NULL;
	}
	return tar;
}

/* One pass over the tar: the whiteouts (deletions, disk NULL), or every
 * other member, through disk. */
static int pass(int fd, struct archive *disk, char *msg, size_t len)
{
	_cleanup_(tar_freep) struct archive *tar = open_tar(fd, msg, len);
	struct archive_entry *e;
	int r;

	if (!tar)
		return -EIO;
	/* A warning here is a name that is not UTF-8 where the tar says it
	 * is: libarchive keeps its bytes as they are, as the kernel does. */
	while ((r = archive_read_next_header(tar, &e)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
		const char *name = archive_entry_pathname(e);
		char path[PATH_MAX];
		bool whiteout;

		r = name ? relative(name, path, sizeof(path)) : -EINVAL;
		if (r < 0) {
			snprintf(msg, len, "a member's name: %s", strerror(-r));
			return r;
		}
		whiteout = path[0] && strncmp(base_name(path), WHITEOUT, strlen(WHITEOUT)) == 0;
		if (!path[0] || whiteout != !disk)
			continue;
		if (disk) {
			r = extract(tar, e, path, disk, msg, len);
		} else {
			r = delete_whited_out(path);
			if (r < 0)
				snprintf(msg, len, "/%s: %s", path, strerror(-r));
		}
		if (r < 0)
			return r;
	}
	if (r != ARCHIVE_EOF) {
		snprintf(msg, len, "not a whole tar: %s", why(tar));
		return -EIO;
	}
	return 0;
}

/* Both passes, the members' metadata set as each lands and the folders'
 * at the disk writer's close (their mode could bar what goes in them). */
static int apply_all(int fd, char *msg, size_t len)
{
	_cleanup_(disk_freep) struct archive *disk = archive_write_disk_new();
	int r;

	if (!disk) {
		snprintf(msg, len, "%s", strerror(ENOMEM));
		return -ENOMEM;
	}
	if (archive_write_disk_set_options(disk, EXTRACT_FLAGS) != ARCHIVE_OK) {
		snprintf(msg, len, "%s", why(disk));
		return -EINVAL;
	}
	r = pass(fd, NULL, msg, len);
	if (r == 0)
		r = pass(fd, disk, msg, len);
	if (r == 0 && archive_write_close(disk) != ARCHIVE_OK) {
		snprintf(msg, len, "setting the folders' modes and times: %s", why(disk));
		r = -EIO;
	}
	return r;
}

/* In the child: chrooted into rootfs, both passes; the error's text to
 * report. */
static int apply_in_root(int fd, const char *rootfs, char *msg, size_t len)
{
	iconv_t cd;

	/* libarchive converts a PAX name from UTF-8 with iconv, and glibc
	 * reads its table of conversions (which names libraries to load)
	 * once, at the first: it must be the host's, not one the container
	 * put in its root. */
	cd = iconv_open(nl_langinfo(CODESET), "UTF-8");
	if (cd != (iconv_t)-1)
		iconv_close(cd);
	if (chroot(rootfs) < 0 || chdir("/") < 0) {
		snprintf(msg, len, "entering %s: %s", rootfs, strerror(errno));
		return -errno;
	}
	umask(0);
	return apply_all(fd, msg, len);
}

int rootfs_diff_apply(const char *tar, const char *rootfs, struct stasis_error **err)
{
	_cleanup_close_ int fd = open(tar, O_RDONLY | O_CLOEXEC);
	char msg[PATH_MAX + 128] = "";
	int pipe_fds[2], status;
	ssize_t n;
	pid_t pid;

	if (fd < 0)
		return stasis_error_errno(err, errno, "opening %s: %s", tar, strerror(errno));
	if (pipe2(pipe_fds, O_CLOEXEC) < 0)
		return stasis_error_errno(err, errno, "pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0) {
		close(pipe_fds[0]);
		close(pipe_fds[1]);
		return stasis_error_errno(err, errno, "fork: %s", strerror(errno));
	}
	if (pid == 0) {
		close(pipe_fds[0]);
		if (apply_in_root(fd, rootfs, msg, sizeof(msg)) < 0) {
			write_all(pipe_fds[1], msg, strlen(msg));
			_exit(1);
		}
		_exit(0);
	}
	close(pipe_fds[1]);
	n = read(pipe_fds[0], msg, sizeof(msg) - 1);
	msg[n > 0 ? n : 0] = '\0';
	close(pipe_fds[0]);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return stasis_error_errno(err, errno, "waiting for the rootfs diff: %s",
						  strerror(errno));
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	return stasis_error_set(err, EIO, STASIS_DOMAIN_SYSTEM, 0, "applying %s onto %s failed: %s",
				tar, rootfs, msg[0] ? msg : "its process died");
}
