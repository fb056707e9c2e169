/* SPDX-License-Identifier: MIT */
/* manifest.json: what an image directory holds. Written last and atomically
 * so that a directory without one is an incomplete image. */
#ifndef STASIS_MANIFEST_H
#define STASIS_MANIFEST_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "criu-images.h"
#include "error.h"

#define MANIFEST_NAME "manifest.json"
#define MANIFEST_FORMAT_VERSION 1
#define MANIFEST_MAX_PROCESS_GPUS 16
/* Bounds on what a manifest may hold: a manifest is input, and its parse
 * must stay quick and small whatever a file there says. */
#define MANIFEST_MAX_BYTES (16u << 20)
#define MANIFEST_MAX_PROCESSES 8192
#define MANIFEST_MAX_PHASES 256
#define MANIFEST_MAX_FILES 65536
/* The folder of an image that holds its files (CRIU's and stasis's): the
 * manifest names each file below it. */
#define IMAGE_CRIU_SUBDIR "criu"

struct manifest_gpu {
	int index;
	char uuid[64]; /* "GPU-xxxxxxxx-..." */
	char name[96];
	char chip[32]; /* architecture, "Hopper" */
	uint64_t memory_total;
	int minor; /* N of its /dev/nvidiaN, -1 when unknown */
};

/* A process's user and group IDs, as CRIU's image states them (every
 * thread's the same): the ones its restore gives it. */
struct manifest_creds {
	bool known; /* recorded; an image made before they were has none */
	uint32_t uid, euid, suid, fsuid;
	uint32_t gid, egid, sgid, fsgid;
};

struct manifest_process {
	pid_t pid; /* 0 for one of a PID namespace that the preflight did not see */
	pid_t ppid;
	char comm[32];
	char *cmdline;
	bool cuda; /* its GPU state was checkpointed by the driver */
	uint64_t gpu_bytes;
	size_t ngpus;
	int gpus[MANIFEST_MAX_PROCESS_GPUS]; /* indexes into manifest.gpus */
	uint64_t lock_us, checkpoint_us;     /* at checkpoint */
	uint64_t restore_us, unlock_us;	     /* at restore, or with leave_running */
	unsigned int device_files;	     /* /dev/nvidia* descriptors saved by the plugin */
	unsigned int device_maps;	     /* /dev/nvidia* mappings kept as reservations */
	pid_t ns_pid;			     /* its PID inside its PID namespace (containers) */
	bool zombie; /* saved as a zombie: restored as one, without credentials */
	struct manifest_creds creds;
};

/* A container image: what a restore elsewhere needs to know. */
struct manifest_container {
	char *runtime; /* "runc", "containerd"; NULL for a process tree */
	char *id;
	char *bundle;
	char *spec;	    /* the bundle's config.json, as JSON text */
	char *namespace;    /* containerd's namespace, else NULL */
	char *image;	    /* the image it was made from (containerd), else NULL */
	char *image_digest; /* its manifest's (or index's) digest, if known */
	char *snapshotter;  /* containerd's snapshotter of its root */
	char *cri_config;   /* the CRI's ContainerConfig (JSON text), if the CRI made it */
};

struct manifest_phase {
	char name[48];
	uint64_t usec;
};

struct manifest_file {
	char *name; /* relative to the image directory */
	uint64_t size;
	char xxh128[33];	/* hex */
	uint64_t unpacked_size; /* of a compressed file once decompressed; else 0 */
};

struct manifest_options {
	bool leave_running;
	bool shell_job;
	bool tcp_established;
	bool ext_unix_sk; /* CRIU's --ext-unix-sk */
	bool compress;	  /* pages images compressed (image-pack.c) */
	bool staged;	  /* dumped into memory, written after the workload ran again */
	/* CRIU kept files in /dev/shm, linked to deleted ones the tree maps
	 * (CRIU's link-remap): the image restores on this machine only. */
	bool link_remap;
	char link_remap_dir[32]; /* its folder of root's in /dev/shm (shm-remap.h) */
};

struct manifest {
	int format_version;
	char *stasis_version;
	char *created; /* UTC, ISO 8601 */
	char *hostname;
	char *kernel;
	int criu_version;	 /* 40101 for 4.1.1 */
	int cuda_driver_version; /* 0 without CUDA processes; 13000 for 13.0 */
	char *nvidia_driver;	 /* "580.159.04", or NULL */
	struct manifest_options options;
	struct manifest_container container;
	struct manifest_process *procs;
	size_t nprocs;
	struct manifest_gpu *gpus;
	size_t ngpus;
	struct manifest_phase *phases;
	size_t nphases;
	struct manifest_file *files;
	size_t nfiles;
	uint64_t image_bytes;
	/* At a checkpoint only, not saved: with --leave-running, why the image
	 * was not staged in memory (a string literal), or NULL; whether the
	 * driver's copy had transparent huge pages, and why not (a string
	 * literal); how many processes CRIU was asked to write pages from,
	 * whether a task too big for its pipes was to be handed over in chunks,
	 * and whether a big task's chunks were written side by side, in parts
	 * (a staged image only). */
	const char *unstaged_why;
	bool huge_pages;
	const char *no_huge_pages_why;
	int page_writers;
	bool page_writer_chunks;
	/* How many tries the GPU lock took (gpu_batch.lock_tries), where more
	 * than one. */
	unsigned int lock_tries;
	bool page_writer_parts;
	/* Not saved: CRIU's statistics of the dump or the restore that filled
	 * m in, as CRIU wrote them (stats-dump, stats-restore), where it did. */
	struct criu_dump_stats criu_dump;
	struct criu_restore_stats criu_restore;
};

void manifest_init(struct manifest *m);
void manifest_free(struct manifest *m);

int manifest_add_phase(struct manifest *m, const char *name, uint64_t usec);
uint64_t manifest_phase_usec(const struct manifest *m, const char *name);
bool manifest_has_phase(const struct manifest *m, const char *name);
struct manifest_process *manifest_add_process(struct manifest *m);
struct manifest_gpu *manifest_add_gpu(struct manifest *m);
struct manifest_file *manifest_add_file(struct manifest *m);

/* An image file's name as a manifest may list it: "criu/NAME", NAME one
 * component of letters, digits and "._+-", not starting with a dot. */
bool manifest_file_name_ok(const char *name);

/* The manifest of a whole image lists CRIU's inventory (a manifest sent
 * before the dump, a migration's HELLO, lists no files yet). */
int manifest_check_complete(const struct manifest *m, struct stasis_error **err);

/* How many of m's processes had their GPU state checkpointed. */
size_t manifest_cuda_count(const struct manifest *m);

/* The same IDs (whether known aside). */
bool manifest_creds_equal(const struct manifest_creds *a, const struct manifest_creds *b);

/* "UID:GID" where each is the same real, effective, saved and file
 * system ID, else "UID,EUID,SUID,FSUID:GID,EGID,SGID,FSGID"; "-" when not
 * known. Returns buf. */
const char *manifest_creds_format(const struct manifest_creds *c, char *buf, size_t len);

/* The process whose parent is outside the image: the root of the tree. */
const struct manifest_process *manifest_root(const struct manifest *m);

/* JSON text of the manifest; the caller frees it. */
char *manifest_to_json(const struct manifest *m, bool pretty);

/* Parse and validate; fills m (manifest_init'ed by the caller). */
int manifest_from_json(const char *text, struct manifest *m, struct stasis_error **err);

int manifest_write(const char *dir, const struct manifest *m, struct stasis_error **err);
int manifest_read(const char *dir, struct manifest *m, struct stasis_error **err);
/* The text of dir's manifest, as manifest_read reads it: a regular file,
 * not followed, of MANIFEST_MAX_BYTES at most, with no NUL. */
int manifest_read_text(const char *dir, char **out, struct stasis_error **err);

#endif
