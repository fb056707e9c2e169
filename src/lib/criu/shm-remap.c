/* SPDX-License-Identifier: MIT */
#include "shm-remap.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int shm_remap_make(char name[SHM_REMAP_NAME_MAX], struct stasis_error **err)
{
	char path[64] = SHM_DIR SHM_REMAP_PREFIX "XXXXXX";

	/* mkdtemp makes it 0700, and stasis runs as root. */
	if (!mkdtemp(path))
		return stasis_error_errno(err, errno,
					  "making a folder in %s for CRIU's link-remap: %s",
					  SHM_DIR, strerror(errno));
	snprintf(name, SHM_REMAP_NAME_MAX, "%s", path + strlen(SHM_DIR));
	return 0;
}

static bool name_ok(const char *name)
{
	size_t n = strlen(SHM_REMAP_PREFIX);

	if (strncmp(name, SHM_REMAP_PREFIX, n) != 0 || strlen(name) != n + 6)
		return false;
	for (const char *p = name + n; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9')))
			return false;
	return true;
}

int shm_remap_check(const char *name, struct stasis_error **err)
{
	struct stat st;
	int fd;

	if (!name_ok(name))
		return stasis_error_set(err, EINVAL, STASIS_DOMAIN_IMAGE, 0,
					"the manifest names no valid link-remap folder");
	fd = open(SHM_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		stasis_error_set(err, e, STASIS_DOMAIN_IMAGE, 0,
				 "CRIU's link-remap files of this image (" SHM_DIR
				 "%s) are gone: %s",
				 name, strerror(e));
		return stasis_error_hint(err, "such an image restores once, on the machine that "
					      "made it, before it reboots");
	}
	close(fd);
	if (!S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 077))
		return stasis_error_set(err, EPERM, STASIS_DOMAIN_IMAGE, 0,
					SHM_DIR "%s is no folder of root's alone", name);
	return 0;
}

void shm_remap_remove(const char *name)
{
	int fd = open(SHM_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return;
	if (name_ok(name))
		unlinkat(fd, name, AT_REMOVEDIR); /* fails, as it should, unless empty */
	close(fd);
}
