/* SPDX-License-Identifier: MIT */
#include "criu-settings.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "breakpoints.h"
#include "criu-rpc.h"
#include "devfiles.h"
#include "exec.h"
#include "lock.h"
#include "shm-remap.h"
#include "util.h"

/* Eight were measured on the GPU machine (16 CPUs); more were not. */
#define CRIU_PAGE_WRITERS_MAX 8
/* CRIU's PAGE_PART_MIN_BYTES (the patch's): a writer's share of a task
 * below it is not worth a chunk of its own. */
#define CRIU_PAGE_PART_MIN_BYTES (64ull << 20)
/* CRIU's own default and the most its fill takes */
#define CRIU_FILL_THREADS_MIN 4
#define CRIU_FILL_THREADS_MAX 16

static long clamp(long n, long lo, long hi)
{
	return n < lo ? lo : n > hi ? hi : n;
}

static long cpus(void)
{
	return sysconf(_SC_NPROCESSORS_ONLN);
}

/* With stasis's CRIU, a dump of a tree writes each task's pages from a
 * process of its own while it dumps the next tasks (CRIU_PAGE_WRITERS at
 * once): one thread's copy into the page cache, not the drain, is what a
 * dump of GPU processes waits on. One a CPU, unless the user chose. A task
 * too big for its pipes to fit in the descriptors is handed over in chunks
 * (CRIU_PAGE_WRITER_CHUNKS=1), else CRIU writes it while it dumps it and
 * the next task waits: two 16 GiB processes paused 13.6 s against 18.3 s. */
int criu_page_writers(void)
{
	const char *n = getenv("CRIU_PAGE_WRITERS");

	if (n)
		return atoi(n) < 1 ? 1 : atoi(n);
	return (int)clamp(cpus(), 1, CRIU_PAGE_WRITERS_MAX);
}

bool criu_page_writer_chunks(void)
{
	const char *chunks = getenv("CRIU_PAGE_WRITER_CHUNKS");

	return criu_page_writers() > 1 && (!chunks || strcmp(chunks, "1") == 0);
}

bool criu_page_parts_possible(void)
{
	const char *parts = getenv("CRIU_PAGE_WRITER_PARTS");

	/* Only the staging's commit joins the parts, and an image whose parts
	 * nobody joined cannot restore: the user may keep them off ("0"),
	 * never turn them on. */
	return criu_page_writer_chunks() && !(parts && strcmp(parts, "0") == 0);
}

uint64_t criu_page_part_bytes(void)
{
	return criu_page_parts_possible() ? (uint64_t)criu_page_writers() * CRIU_PAGE_PART_MIN_BYTES
					  : 0;
}

/* With stasis's CRIU, a restore fills a task's large mappings from
 * several threads (CRIU_FILL_THREADS, 4 unless set). A cold image of one
 * process filled faster from 16 (the GPU machine's CPUs): w3 5.6 s against
 * 6.5 s, w1 10.9 s against 12.2 s, warm restores too (6 of 8 rounds on
 * three machines; where the disk wants no deeper queue, about the same).
 * A tree's tasks fill side by side, so they share the CPUs, never fewer
 * than the 4 that trees were measured with. */
static long fill_threads(size_t nprocs)
{
	return clamp(cpus() / (long)(nprocs ? nprocs : 1), CRIU_FILL_THREADS_MIN,
		     CRIU_FILL_THREADS_MAX);
}

bool criu_takes_settings(void)
{
	/* 0 unknown, 1 yes, -1 no: the binary does not change under a run */
	static _Atomic int takes;
	const char *argv[] = {criu_binary(), "--setting", "STASIS_PROBE=1", "--version", NULL};
	_cleanup_free_ char *out = NULL;

	if (!takes)
		takes = exec_run(argv, &out) == 0 ? 1 : -1;
	return takes > 0;
}

struct text {
	char *out;
	size_t len, used;
	int error;
};

/* One line, "KEY "VALUE"". CRIU's parser takes no quote, backslash or
 * line's end in a value, cuts it at a '#' (a comment) and fails the whole
 * file on some spaces: a value with any of them is refused, with a clear
 * error, rather than given to CRIU changed. */
static void line(struct text *t, const char *key, const char *fmt, ...)
{
	char value[PATH_MAX + 128];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(value, sizeof(value), fmt, ap);
	va_end(ap);
	if (t->error)
		return;
	if (n < 0 || (size_t)n >= sizeof(value) || strpbrk(value, "\"\\\n\t #")) {
		t->error = -EINVAL;
		return;
	}
	n = snprintf(t->out + t->used, t->len - t->used, "%s \"%s\"\n", key, value);
	if (n < 0 || (size_t)n >= t->len - t->used)
		t->error = -ENAMETOOLONG;
	else
		t->used += (size_t)n;
}

/* A setting stasis chooses unless the user's environment has it: CRIU
 * takes the environment's where no setting names it. */
#define DEFAULT_SETTING(t, name, ...)                                                              \
	do {                                                                                       \
		if (!getenv(name))                                                                 \
			line(t, "setting", name "=" __VA_ARGS__);                                  \
	} while (0)

/* CRIU loads every plugin in its libdir. stasis does the GPU steps itself,
 * so CRIU gets only stasis's own plugin (for leftover /dev/nvidia*
 * descriptors), never the cuda plugin, unless the user chose one. */
static void plugin_folder(struct text *t)
{
	const char *plugins = stasis_criu_plugin_dir();
	char dir[PATH_MAX];

	if (getenv("CRIU_LIBS_DIR"))
		return;
	if (plugins) {
		line(t, "libdir", "%s", plugins);
		return;
	}
	snprintf(dir, sizeof(dir), "%s/criu-no-plugins", stasis_run_dir());
	if (mkdir_p(dir) == 0)
		line(t, "libdir", "%s", dir);
}

static void settings_lines(struct text *t, const struct criu_settings *s)
{
	if (!getenv("CRIU_FAULT") && hw_breakpoints_probe(true) == HW_BREAKPOINTS_BROKEN)
		line(t, "setting", "CRIU_FAULT=" CRIU_FAULT_NO_BREAKPOINTS);
	DEFAULT_SETTING(t, "CRIU_PAGE_WRITERS", "%d", criu_page_writers());
	DEFAULT_SETTING(t, "CRIU_PAGE_WRITER_CHUNKS", "1");
	/* Always said: parts the staging does not join make an image that
	 * cannot restore, whatever the environment has. */
	line(t, "setting", "CRIU_PAGE_WRITER_PARTS=%s",
	     s->page_parts && criu_page_parts_possible() ? "1" : "0");
	if (s->fill_nprocs)
		DEFAULT_SETTING(t, "CRIU_FILL_THREADS", "%ld", fill_threads(s->fill_nprocs));
	/* Ghost files only in folders no user but root can change (stasis's
	 * CRIU patch 0008): preflight refuses those it sees, and CRIU the
	 * ones it cannot (in flight in a unix socket, opened after it). */
	line(t, "setting", "CRIU_GHOST_ROOT_FOLDERS=1");
	/* Relative to the root, as CRIU takes it; "-": none at all. */
	if (s->link_remap_dir)
		line(t, "setting", "CRIU_LINK_REMAP_DIR=%s%s", SHM_DIR + 1, s->link_remap_dir);
	else
		line(t, "setting", "CRIU_LINK_REMAP_DIR=-");
	/* Set and empty: stasis runs this CRIU and has no GPU work for it. */
	line(t, "setting", "STASIS_PLUGIN_SOCKET=%s", s->plugin_socket ? s->plugin_socket : "");
	line(t, "setting", "STASIS_NVIDIA_DEV_MAP=%s", s->dev_map ? s->dev_map : "");
}

int criu_settings_text(const struct criu_settings *s, char *out, size_t len)
{
	struct text t = {.out = out, .len = len};

	if (!len)
		return -ENAMETOOLONG;
	out[0] = '\0';
	plugin_folder(&t);
	if (criu_takes_settings())
		settings_lines(&t, s);
	return t.error;
}

/* A value CRIU could not take as stasis means it: a path of stasis's
 * (its install folder, STASIS_RUN_DIR) with a space, a tab, '#', a quote
 * or a backslash. */
static int settings_refused(int r, struct stasis_error **err)
{
	if (r == -ENAMETOOLONG)
		return stasis_error_errno(err, ENAMETOOLONG, "CRIU's settings do not fit");
	stasis_error_set(
	    err, EINVAL, STASIS_DOMAIN_USAGE, 0,
	    "a path stasis gives CRIU has a space, a tab, '#', a quote or a backslash, "
	    "which CRIU's configuration files cannot hold");
	return stasis_error_hint(err, "install stasis, and set STASIS_RUN_DIR, under paths "
				      "without them");
}

int criu_settings_conf(const struct criu_settings *s, const char *path, const char *before,
		       const char *extra, struct stasis_error **err)
{
	char text[8192];
	_cleanup_close_ int fd = -1;
	int r = criu_settings_text(s, text, sizeof(text));

	if (r < 0)
		return settings_refused(r, err);
	if (unlink(path) < 0 && errno != ENOENT)
		return stasis_error_errno(err, errno, "removing %s: %s", path, strerror(errno));
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	before = before ? before : "";
	if (fd < 0 || dprintf(fd, "%s%s%s%s", before,
			      *before && before[strlen(before) - 1] != '\n' ? "\n" : "", text,
			      extra ? extra : "") < 0)
		return stasis_error_errno(err, errno, "writing %s: %s", path, strerror(errno));
	return 0;
}

int criu_settings_file(const struct criu_settings *s, int *fd, char *path, size_t len,
		       struct stasis_error **err)
{
	char text[8192];
	int r = criu_settings_text(s, text, sizeof(text));

	*fd = -1;
	if (r < 0)
		return settings_refused(r, err);
	*fd = memfd_create("stasis-criu-settings", MFD_CLOEXEC);
	if (*fd < 0)
		return stasis_error_errno(err, errno, "making CRIU's settings: %s",
					  strerror(errno));
	if (write_all(*fd, text, strlen(text)) < 0) {
		r = stasis_error_errno(err, errno, "writing CRIU's settings: %s", strerror(errno));
		close(*fd);
		*fd = -1;
		return r;
	}
	snprintf(path, len, "/proc/%d/fd/%d", (int)getpid(), *fd);
	return 0;
}
