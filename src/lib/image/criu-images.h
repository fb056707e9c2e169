/* SPDX-License-Identifier: MIT */
/* What CRIU's own image files say, decoded with the protobuf-c code CRIU's
 * build generates from its images' .proto files: its statistics
 * (stats-dump, stats-restore) and its process tree (pstree.img and each
 * process's core) with each process's open files and sockets (ids-PID.img,
 * fdinfo-N.img, fs-PID.img, files.img), as crit and checkpointctl show
 * them; criu-tree.h reads the tree with every thread's credentials, as the
 * manifest lists it and a restore checks it. An image folder is
 * input: every file is read whole within a bound, every entry within its
 * file, every allocation of the decoder within a budget, and what is used
 * of each field is checked. */
#ifndef STASIS_CRIU_IMAGES_H
#define STASIS_CRIU_IMAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

/* The names of CRIU's statistics files, in its image or work folder. */
#define CRIU_STATS_DUMP "stats-dump"
#define CRIU_STATS_RESTORE "stats-restore"

/* Bounds on what is read: far above what a dump writes. */
#define CRIU_IMAGES_MAX_FILE (64u << 20)
#define CRIU_IMAGES_MAX_ENTRIES (1u << 20)   /* in one file */
#define CRIU_IMAGES_MAX_PROCESSES (1u << 16) /* in pstree.img */
#define CRIU_IMAGES_BUDGET (512u << 20)	     /* the decoder's memory for one read */
#define CRIU_PID_MAX 4194304u		     /* the kernel's PID_MAX_LIMIT */

/* CRIU's dump_stats_entry (images/stats.proto): times in microseconds. */
struct criu_dump_stats {
	bool present;
	uint32_t freezing_time, frozen_time, memdump_time, memwrite_time;
	uint64_t pages_scanned, pages_skipped_parent, pages_written, pages_lazy;
	bool has_irmap_resolve, has_page_pipes, has_page_pipe_bufs, has_shpages;
	uint32_t irmap_resolve;
	uint64_t page_pipes, page_pipe_bufs;
	uint64_t shpages_scanned, shpages_skipped_parent, shpages_written;
};

/* CRIU's restore_stats_entry. */
struct criu_restore_stats {
	bool present;
	uint64_t pages_compared, pages_skipped_cow;
	uint32_t forking_time, restore_time;
	bool has_pages_restored;
	uint64_t pages_restored;
};

/* Decoders of a whole file's bytes, for the tests as for the files. */
int criu_stats_parse_dump(const uint8_t *buf, size_t len, struct criu_dump_stats *out,
			  struct stasis_error **err);
int criu_stats_parse_restore(const uint8_t *buf, size_t len, struct criu_restore_stats *out,
			     struct stasis_error **err);

/* The statistics CRIU wrote into dir: 0 and out->present, 0 without it
 * when dir has no such file (a runtime's dump, a failed one), or an error
 * for a file that is there but unreadable or malformed. */
int criu_stats_read_dump(const char *dir, struct criu_dump_stats *out, struct stasis_error **err);
int criu_stats_read_restore(const char *dir, struct criu_restore_stats *out,
			    struct stasis_error **err);

/* One open file of a process as checkpointctl lists it: its descriptor
 * ("3", or "cwd" and "root"), CRIU's type of it ("REG", "PIPE", ...; empty
 * for cwd and root) and what it is (a path, "pipe:[ID]", "socket:[INO]"). */
struct criu_file_view {
	char fd[16];
	char type[16];
	char *path;
};

/* One socket: its descriptor, CRIU's type ("UNIXSK", "INETSK", ...), the
 * protocol ("TCP", "UDP", empty for unix ones), its type ("STREAM") and
 * state ("LISTEN"), its addresses (a unix socket's name in src, '@' first
 * where abstract) and its buffers. */
struct criu_socket_view {
	int fd;
	char fd_type[16];
	char family[16];
	char protocol[16];
	char type[16];
	char state[16];
	char *src, *dst;
	uint32_t src_port, dst_port;
	uint32_t send_buf, recv_buf;
};

struct criu_process_view {
	pid_t pid, ppid, pgid, sid;
	size_t nthreads;
	char comm[32];
	char task_state[16]; /* "Alive", "Zombie", "Dead", "Stopped" */
	struct criu_file_view *files;
	size_t nfiles;
	struct criu_socket_view *sockets;
	size_t nsockets;
};

struct criu_tree_view {
	struct criu_process_view *procs; /* pstree.img's order: the root first */
	size_t nprocs;
};

enum {
	CRIU_VIEW_FILES = 1 << 0,
	CRIU_VIEW_SOCKETS = 1 << 1,
};

/* The tree in dir (CRIU's folder of an image), with each process's files
 * and sockets where asked (CRIU_VIEW_*). */
int criu_view_read(const char *dir, unsigned int what, struct criu_tree_view *out,
		   struct stasis_error **err);
void criu_view_free(struct criu_tree_view *v);

#endif
