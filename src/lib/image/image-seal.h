/* SPDX-License-Identifier: MIT */
/* Whose image is it: the manifest (which holds the checksum of every image
 * file) is sealed with an HMAC-SHA256 under a key that only root can read,
 * the host key, made on first use. A restore creates processes with the
 * credentials the image states, so it accepts only an image sealed by this
 * host's key or by a key root names (--trust-key). The seal is a line of
 * its own beside the manifest (manifest.seal); it covers the manifest's
 * bytes as they are on disk, which are the bytes then parsed. */
#ifndef STASIS_IMAGE_SEAL_H
#define STASIS_IMAGE_SEAL_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "manifest.h"

#define SEAL_NAME "manifest.seal"
/* The host key's file in its folder ($STASIS_KEY_DIR, else
 * SEAL_KEY_DIR_DEFAULT): root's, 0700, the key 0600. */
#define SEAL_KEY_DIR_DEFAULT "/var/lib/stasis"
#define SEAL_KEY_NAME "seal.key"
#define SEAL_KEY_BYTES 32 /* a host key made here */
#define SEAL_KEY_MIN 32
#define SEAL_KEY_MAX 4096
/* --trust-key FILE, at most this many times. */
#define SEAL_MAX_TRUSTED 8
/* A key's id: hex of the first 8 bytes of an HMAC of a fixed text with it,
 * which says which key sealed an image without saying anything of it. */
#define SEAL_ID_LEN 16

struct seal_key {
	unsigned char *data;
	size_t len;
	char id[SEAL_ID_LEN + 1];
	char origin[4096]; /* the file it came from, for messages */
};

void seal_key_free(struct seal_key *k);

/* The host key's folder: $STASIS_KEY_DIR, else SEAL_KEY_DIR_DEFAULT. */
const char *seal_key_dir(void);

/* The host key. The folder and the key must be root's and no one else's
 * (a folder writable by others, a key readable by others, a link, or
 * anything but a regular file is refused). With create, the folder (0700)
 * and the key (0600, random) are made when missing: the key is written to
 * a new name (O_EXCL) and linked into place, so a reader sees a whole key
 * or none, and two first uses at once agree on one. Without create, a
 * missing key is -ENOENT. */
int seal_host_key(bool create, struct seal_key *k, struct stasis_error **err);

/* A key file root names (--trust-key): a regular file of root's that no
 * one else may read or write, of SEAL_KEY_MIN to SEAL_KEY_MAX bytes. */
int seal_key_load(const char *path, struct seal_key *k, struct stasis_error **err);

/* A key from bytes (tests). */
int seal_key_from(const void *data, size_t len, struct seal_key *k);

/* The seal of text with k: one line, "stasis-seal-1 hmac-sha256 ID MAC\n",
 * into out (SEAL_LINE_MAX bytes). */
#define SEAL_LINE_MAX 128
int seal_text(const struct seal_key *k, const char *text, size_t len, char *out);

enum seal_verdict {
	SEAL_TRUSTED,	/* sealed by one of the keys */
	SEAL_NONE,	/* no seal */
	SEAL_MALFORMED, /* a seal file that is not a seal */
	SEAL_FOREIGN,	/* sealed by a key that is not one of them */
	SEAL_MISMATCH,	/* sealed by one of them, but not this text: changed since */
};

/* Checks seal (NULL: there is none) against text and keys; *which is the
 * index of the key that matched (SEAL_TRUSTED, SEAL_MISMATCH); signer gets
 * the id the seal names (SEAL_ID_LEN + 1 bytes, "" when none). */
enum seal_verdict seal_check(const char *seal, const char *text, size_t len,
			     const struct seal_key *keys, size_t nkeys, size_t *which,
			     char *signer);

/* The keys an image may be sealed by: the host key and those of files
 * root names. */
struct image_trust {
	const char *const *key_files;
	size_t nkey_files;
};

/* Writes the seal of m's manifest with the host key (made on first use),
 * then the manifest; both atomically. */
int image_write_manifest(const char *dir, const struct manifest *m, struct stasis_error **err);

/* Reads the manifest of dir and refuses it unless its seal is by the host
 * key or by one of trust's (NULL: the host key alone); the error says how
 * to trust an image that is refused. */
int image_read_trusted(const char *dir, const struct image_trust *trust, struct manifest *m,
		       struct stasis_error **err);

/* For stasis inspect: reads the manifest whatever its seal, and says in
 * status (a string literal) whether it is sealed and by whom: "this host",
 * "another key", "none", "broken" (the manifest changed after it was
 * sealed, or the seal file is not one), or "unchecked" (the host key cannot
 * be read: not root). signer gets the id the seal names. */
int image_read_any(const char *dir, struct manifest *m, const char **status, char *signer,
		   struct stasis_error **err);

#endif
