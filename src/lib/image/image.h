/* SPDX-License-Identifier: MIT */
/* The image directory: layout, checksums of the files CRIU wrote, and the
 * checks made before a restore touches anything. */
#ifndef STASIS_IMAGE_H
#define STASIS_IMAGE_H

#include <stdbool.h>

#include "error.h"
#include "image-seal.h"
#include "manifest.h"

/* Added to the name of a compressed pages image. */
#define IMAGE_PACKED_SUFFIX ".zst"

/* The image folder dir (relative to the working folder, through links),
 * as an absolute path with no link into out, where every folder above it is
 * one that no user but root can change (root's, and writable by others
 * only where sticky and writable by all): then every later step may go by
 * that path and reach the folder checked. dir itself may not exist yet;
 * its parent must. An error names the folder that fails. */
int image_resolve_folder(const char *dir, char *out, size_t size, struct stasis_error **err);

/* DIR must not exist or be empty, and when it exists be root's and
 * writable by root alone; creates DIR and DIR/criu (0700). 1 when it made
 * DIR, 0 when DIR was there (empty), or an error. */
int image_prepare(const char *dir, struct stasis_error **err);

/* An image folder and its CRIU folder are root's, writable by root alone,
 * and the CRIU folder is no link; else an error that names the owner or
 * mode. Restore refuses anything else before it reads a file. */
int image_check_folder(const char *dir, struct stasis_error **err);

/* After a checkpoint failed: removes what it wrote into a DIR that
 * image_prepare accepted, leaving DIR as it was (made: it made DIR, which
 * goes); nothing once the manifest is written. CRIU's logs are in the
 * checkpoint's work folder, which the error names. */
void image_discard(const char *dir, bool made);

/* After a checkpoint succeeded: CRIU's logs and statistics ("*.log",
 * "stats-dump") from its work folder go with the image, into DIR/criu
 * (they are no part of what the manifest lists). -errno. */
int image_take_logs(const char *dir, const char *work);

/* Hashes the pages images while CRIU writes them, and starts their
 * writeback early, so that the checksum after the dump reads only what
 * CRIU wrote last. Only an optimisation: whatever it could not follow is
 * hashed whole by image_checksum. */
struct image_follower;
int image_follow_start(const char *dir, struct image_follower **out, struct stasis_error **err);
/* Stops following and finishes the hashes of the files it followed among
 * files (their xxh128 and size); on failure none are set. */
int image_follow_finish(struct image_follower *f, struct manifest_file *files, size_t nfiles);
void image_follow_free(struct image_follower *f);

/* Compression (--compress, image-pack.c): CRIU writes the image into a
 * staging folder in memory, its pages images into pipes there (image-pipe.c)
 * or, beyond the pipes, files; a pool of threads compresses each pages image
 * while it grows into DIR/criu/NAME.img.zst, freeing the staged bytes it
 * took; the finish moves the other files over. */
struct image_packer;
/* Refuses before anything changes when there is no staging folder. */
int image_pack_preflight(struct stasis_error **err);
/* nprocs: how many processes CRIU dumps, for the number of pipes. */
int image_pack_start(const char *dir, size_t nprocs, struct image_packer **out,
		     struct stasis_error **err);
/* Where CRIU writes meanwhile. */
const char *image_pack_stage(const struct image_packer *p);
/* CRIU is done: compress the rest, copy the other files to DIR/criu, and
 * add the compressed files to m with their checksums. */
int image_pack_finish(struct image_packer *p, struct manifest *m, struct stasis_error **err);
/* Stops the threads and removes the staging folder. */
void image_pack_free(struct image_packer *p);

/* After the dump: m's processes become those of CRIU's tree in criu_dir
 * (image-procs.c), each with the credentials the image gives it; what the
 * preflight learned of a process is kept, a process started since is
 * added, one gone before the freeze is dropped. Where the image's PIDs
 * are those inside a PID namespace (a container), a process started
 * since has its PID inside and 0 as its PID on the host, not known. */
int image_take_processes(const char *criu_dir, struct manifest *m, struct stasis_error **err);

/* Before a restore runs CRIU: CRIU's tree in criu_dir holds the processes
 * m lists, with the credentials m states, or an error names the first
 * that differs. */
int image_check_processes(const char *criu_dir, const struct manifest *m,
			  struct stasis_error **err);

/* After progress_begin of CRIU's dump into dir (its CRIU folder, or where
 * it is staged): the progress line counts the pages images' bytes so far
 * of what m's processes hold in memory. dir must stay until progress_end. */
void image_progress_pages(const struct manifest *m, const char *dir);

/* m's image_bytes: the sum of its files' sizes. */
void image_count_bytes(struct manifest *m);

/* Checksum every file under DIR/criu into m->files and add up image_bytes,
 * using what follower (may be NULL) has hashed already; files m lists
 * already keep their checksums. */
int image_checksum(const char *dir, struct manifest *m, struct image_follower *follower,
		   struct stasis_error **err);

/* Read the manifest, refused unless sealed by this host or by a key of
 * trust (NULL: this host's alone; image-seal.h), verify every file but the pages images, and start
 * verifying those in the background: a restore runs CRIU meanwhile and
 * waits for the answer before the tree runs. A compressed image is
 * decompressed into memory instead, and verified on the way; its pages are
 * served to CRIU from a FUSE folder as they come (image-serve.c), or, where
 * none can be mounted, staged as files that CRIU must wait for. */
struct image_verifier;
int image_open_begin(const char *dir, const struct image_trust *trust, struct manifest *m,
		     struct image_verifier **out, struct stasis_error **err);
int image_verify_wait(struct image_verifier *v, struct stasis_error **err);
/* Cancels the verification if it still runs; < 0 only when what it
 * verified so far is wrong. */
int image_verify_stop(struct image_verifier *v, struct stasis_error **err);
/* The folder CRIU restores from: DIR/criu, or the staging folder. */
const char *image_verifier_criu_dir(const struct image_verifier *v);
/* Adds how long the decompression took ("unpack", which overlaps CRIU's
 * restore when served), how much of it was spent reading ("unpack_read")
 * and waiting for the decompressing threads ("unpack_queue_wait") to m's
 * phases, when there was one; when the pages were
 * served, also how long it paused to stay near CRIU's reads
 * ("unpack_paused"), and when CRIU's first and last reads were answered,
 * from the start of serving ("serve_first_read", "serve_last_read"). */
void image_verifier_record(const struct image_verifier *v, struct manifest *m);
/* Whether CRIU may read a compressed image's pages before they are all
 * decompressed. */
bool image_verifier_serves(const struct image_verifier *v);
/* CRIU is done with the image: cancels a verification still running and
 * frees the decompressed pages and the staging folder. */
void image_verifier_unstage(struct image_verifier *v);
/* Unstages, and frees v. */
void image_verifier_free(struct image_verifier *v);

/* Read the manifest, sealed by this host, and verify every file it lists. */
int image_open(const char *dir, struct manifest *m, struct stasis_error **err);

/* Flush the image's file system to disk (syncfs); records the "sync" phase. */
int image_sync(const char *dir, struct manifest *m, struct stasis_error **err);

#endif
