/* SPDX-License-Identifier: MIT */
/* The image's seal (image-seal.h): the host key, keys root names, and the
 * HMAC-SHA256 of the manifest's bytes. The only file that knows GnuTLS's
 * HMAC. */
#include "image-seal.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define SEAL_MAGIC "stasis-seal-1"
#define SEAL_ALGO "hmac-sha256"
#define SEAL_MAC_BYTES 32
/* What each HMAC covers before its text: a seal and a key's id are never
 * the same HMAC, whatever the text. */
#define SEAL_DOMAIN SEAL_MAGIC " manifest\n"
#define SEAL_ID_DOMAIN SEAL_MAGIC " key id\n"

void seal_key_free(struct seal_key *k)
{
	if (!k)
		return;
	if (k->data)
		explicit_bzero(k->data, k->len);
	free(k->data);
	memset(k, 0, sizeof(*k));
}

const char *seal_key_dir(void)
{
	const char *dir = getenv("STASIS_KEY_DIR");

	return dir && *dir ? dir : SEAL_KEY_DIR_DEFAULT;
}

static int hmac(const struct seal_key *k, const char *domain, const void *text, size_t len,
		unsigned char out[SEAL_MAC_BYTES])
{
	gnutls_hmac_hd_t h;

	if (gnutls_hmac_init(&h, GNUTLS_MAC_SHA256, k->data, k->len) < 0)
		return -EIO;
	if (gnutls_hmac(h, domain, strlen(domain)) < 0 || (len && gnutls_hmac(h, text, len) < 0)) {
		gnutls_hmac_deinit(h, NULL);
		return -EIO;
	}
	gnutls_hmac_deinit(h, out);
	return 0;
}

static void to_hex(const unsigned char *bytes, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[bytes[i] >> 4];
		out[2 * i + 1] = digits[bytes[i] & 15];
	}
	out[2 * n] = '\0';
}

int seal_key_from(const void *data, size_t len, struct seal_key *k)
{
	unsigned char mac[SEAL_MAC_BYTES];

	memset(k, 0, sizeof(*k));
	k->data = malloc(len ? len : 1);
	if (!k->data)
		return -ENOMEM;
	memcpy(k->data, data, len);
	k->len = len;
	if (hmac(k, SEAL_ID_DOMAIN, NULL, 0, mac) < 0) {
		seal_key_free(k);
		return -EIO;
	}
	to_hex(mac, SEAL_ID_LEN / 2, k->id);
	return 0;
}

/* The key in fd, a file already opened without following a link: a
 * regular file of root's that no one else may read or write. */
static int key_from_fd(int fd, const char *path, struct seal_key *k, struct stasis_error **err)
{
	unsigned char buf[SEAL_KEY_MAX + 1];
	struct stat st;
	size_t got = 0;
	ssize_t n;
	int r;

	if (fstat(fd, &st) < 0)
		return stasis_error_errno(err, errno, "key file %s: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode)) {
		stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
				 "key file %s is not a regular file", path);
		return stasis_error_hint(err, "a key file is a regular file of root's, mode 0600");
	}
	if (st.st_uid != 0 || (st.st_mode & 077)) {
		stasis_error_set(err, EPERM, STASIS_DOMAIN_USAGE, 0,
				 "key file %s is %s (uid %u, mode %04o): whoever else can read it "
				 "can seal images that root restores",
				 path, st.st_uid != 0 ? "not root's" : "open to others",
				 (unsigned int)st.st_uid, (unsigned int)(st.st_mode & 07777));
		return stasis_error_hint(err, "chown root:root %s; chmod 0600 %s", path, path);
	}
	while (got < sizeof(buf) && (n = read(fd, buf + got, sizeof(buf) - got)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			explicit_bzero(buf, sizeof(buf));
			return stasis_error_errno(err, errno, "reading key file %s: %s", path,
						  strerror(errno));
		}
		got += (size_t)n;
	}
	if (got < SEAL_KEY_MIN || got > SEAL_KEY_MAX) {
		explicit_bzero(buf, sizeof(buf));
		stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
				 "key file %s holds %s%zu bytes; a key is %d to %d bytes", path,
				 got > SEAL_KEY_MAX ? "more than " : "",
				 got > SEAL_KEY_MAX ? SEAL_KEY_MAX : got, SEAL_KEY_MIN,
				 SEAL_KEY_MAX);
		return stasis_error_hint(err, "head -c 32 /dev/urandom makes one");
	}
	r = seal_key_from(buf, got, k);
	explicit_bzero(buf, sizeof(buf));
	if (r < 0)
		return stasis_error_errno(err, -r, "key file %s: %s", path, strerror(-r));
	snprintf(k->origin, sizeof(k->origin), "%s", path);
	return 0;
}

int seal_key_load(const char *path, struct seal_key *k, struct stasis_error **err)
{
	/* Not blocked by a FIFO: anything but a regular file is refused. */
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

	if (fd < 0)
		return stasis_error_errno(err, errno, "key file %s: %s", path, strerror(errno));
	return key_from_fd(fd, path, k, err);
}

/* The host key's folder, opened, made (0700) on first use when create. */
static int open_key_dir(bool create, struct stasis_error **err)
{
	const char *dir = seal_key_dir();
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;

	if (fd < 0 && errno == ENOENT && create) {
		if (mkdir(dir, 0700) < 0 && errno != EEXIST)
			return stasis_error_errno(err, errno, "making the seal key's folder %s: %s",
						  dir, strerror(errno));
		fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (fd < 0 && errno == ENOENT)
		return stasis_error_set(err, ENOENT, STASIS_DOMAIN_SYSTEM, ENOENT,
					"no seal key folder %s yet", dir);
	if (fd < 0 && (errno == ELOOP || errno == ENOTDIR)) {
		stasis_error_set(err, EPERM, STASIS_DOMAIN_USAGE, 0,
				 "the seal key's folder %s is a link or not a folder", dir);
		return stasis_error_hint(err, "make it a folder of root's, mode 0700");
	}
	if (fd < 0)
		return stasis_error_errno(err, errno, "the seal key's folder %s: %s", dir,
					  strerror(errno));
	if (fstat(fd, &st) < 0 || st.st_uid != 0 || (st.st_mode & 077)) {
		close(fd);
		stasis_error_set(err, EPERM, STASIS_DOMAIN_USAGE, 0,
				 "the seal key's folder %s is %s (uid %u, mode %04o)", dir,
				 st.st_uid != 0 ? "not root's" : "open to others",
				 (unsigned int)st.st_uid, (unsigned int)(st.st_mode & 07777));
		return stasis_error_hint(err, "chown root:root %s; chmod 0700 %s", dir, dir);
	}
	return fd;
}

/* A new random key under a name of its own (O_EXCL), linked to its place:
 * a reader sees a whole key or none; when another stasis linked one
 * first, that one stays. */
static int make_host_key(int dirfd, struct stasis_error **err)
{
	unsigned char key[SEAL_KEY_BYTES];
	char tmp[64];
	int fd, r = 0;

	if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key))
		return stasis_error_errno(err, errno ? errno : EIO, "making a seal key: %s",
					  strerror(errno ? errno : EIO));
	snprintf(tmp, sizeof(tmp), ".%s.%d", SEAL_KEY_NAME, (int)getpid());
	unlinkat(dirfd, tmp, 0); /* left by a killed stasis of this PID */
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		r = -errno;
	if (r == 0)
		r = write_all(fd, key, sizeof(key));
	explicit_bzero(key, sizeof(key));
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (fd >= 0 && close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && linkat(dirfd, tmp, dirfd, SEAL_KEY_NAME, 0) < 0 && errno != EEXIST)
		r = -errno;
	if (fd >= 0)
		unlinkat(dirfd, tmp, 0);
	if (r == 0)
		fsync(dirfd);
	if (r < 0)
		return stasis_error_errno(err, -r, "making the seal key %s/%s: %s", seal_key_dir(),
					  SEAL_KEY_NAME, strerror(-r));
	return 0;
}

int seal_host_key(bool create, struct seal_key *k, struct stasis_error **err)
{
	_cleanup_close_ int dirfd = open_key_dir(create, err);
	_cleanup_close_ int fd = -1;
	char path[4096];
	int r;

	if (dirfd < 0)
		return dirfd;
	snprintf(path, sizeof(path), "%s/%s", seal_key_dir(), SEAL_KEY_NAME);
	fd = openat(dirfd, SEAL_KEY_NAME, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT && create) {
		r = make_host_key(dirfd, err);
		if (r < 0)
			return r;
		fd = openat(dirfd, SEAL_KEY_NAME, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	}
	if (fd < 0 && errno == ENOENT)
		return stasis_error_set(err, ENOENT, STASIS_DOMAIN_SYSTEM, ENOENT,
					"no seal key %s yet", path);
	if (fd < 0 && errno == ELOOP) {
		stasis_error_set(err, EPERM, STASIS_DOMAIN_USAGE, 0, "the seal key %s is a link",
				 path);
		return stasis_error_hint(err, "remove it: stasis makes a new key, and images "
					      "sealed with the old one need --trust-key");
	}
	if (fd < 0)
		return stasis_error_errno(err, errno, "the seal key %s: %s", path, strerror(errno));
	return key_from_fd(fd, path, k, err);
}

int seal_text(const struct seal_key *k, const char *text, size_t len, char *out)
{
	unsigned char mac[SEAL_MAC_BYTES];
	char hex[2 * SEAL_MAC_BYTES + 1];
	int r = hmac(k, SEAL_DOMAIN, text, len, mac);

	if (r < 0)
		return r;
	to_hex(mac, sizeof(mac), hex);
	snprintf(out, SEAL_LINE_MAX, "%s %s %s %s\n", SEAL_MAGIC, SEAL_ALGO, k->id, hex);
	return 0;
}

/* Equal, in a time that does not depend on where they differ. */
static bool same_bytes(const char *a, const char *b, size_t n)
{
	unsigned char diff = 0;

	for (size_t i = 0; i < n; i++)
		diff |= (unsigned char)(a[i] ^ b[i]);
	return diff == 0;
}

static bool hex_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

enum seal_verdict seal_check(const char *seal, const char *text, size_t len,
			     const struct seal_key *keys, size_t nkeys, size_t *which, char *signer)
{
	const size_t head = strlen(SEAL_MAGIC " " SEAL_ALGO " ");
	const size_t whole = head + SEAL_ID_LEN + 1 + 2 * SEAL_MAC_BYTES + 1;
	char want[SEAL_LINE_MAX];

	signer[0] = '\0';
	if (!seal)
		return SEAL_NONE;
	if (strlen(seal) != whole || strncmp(seal, SEAL_MAGIC " " SEAL_ALGO " ", head) != 0 ||
	    !hex_ok(seal + head, SEAL_ID_LEN) || seal[head + SEAL_ID_LEN] != ' ' ||
	    !hex_ok(seal + head + SEAL_ID_LEN + 1, 2 * SEAL_MAC_BYTES) || seal[whole - 1] != '\n')
		return SEAL_MALFORMED;
	memcpy(signer, seal + head, SEAL_ID_LEN);
	signer[SEAL_ID_LEN] = '\0';
	for (size_t i = 0; i < nkeys; i++) {
		if (strcmp(keys[i].id, signer) != 0)
			continue;
		*which = i;
		if (seal_text(&keys[i], text, len, want) < 0)
			return SEAL_MISMATCH;
		return same_bytes(want, seal, whole) ? SEAL_TRUSTED : SEAL_MISMATCH;
	}
	return SEAL_FOREIGN;
}

int image_write_manifest(const char *dir, const struct manifest *m, struct stasis_error **err)
{
	_cleanup_free_ char *text = manifest_to_json(m, true);
	struct seal_key key;
	char seal[SEAL_LINE_MAX];
	int r;

	if (!text)
		return stasis_error_errno(err, ENOMEM, "out of memory encoding the manifest");
	r = seal_host_key(true, &key, err);
	if (r < 0)
		return stasis_error_wrap(err, "sealing the image");
	r = seal_text(&key, text, strlen(text), seal);
	seal_key_free(&key);
	if (r < 0)
		return stasis_error_errno(err, -r, "sealing the image: %s", strerror(-r));
	/* The seal first: a manifest is there only with its seal, and a
	 * folder without a manifest is an incomplete image. */
	r = write_file_atomic(dir, SEAL_NAME, seal, strlen(seal));
	if (r == 0)
		r = write_file_atomic(dir, MANIFEST_NAME, text, strlen(text));
	if (r < 0)
		return stasis_error_errno(err, -r, "writing %s/%s: %s", dir, MANIFEST_NAME,
					  strerror(-r));
	return 0;
}

/* The seal file beside the manifest, or NULL when there is none. */
static int read_seal(const char *dir, char **out, bool *malformed, struct stasis_error **err)
{
	char path[4096], buf[SEAL_LINE_MAX + 1];
	_cleanup_close_ int fd = -1;
	struct stat st;
	ssize_t n;

	*out = NULL;
	*malformed = false;
	snprintf(path, sizeof(path), "%s/%s", dir, SEAL_NAME);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0 && errno != ELOOP)
		return stasis_error_errno(err, errno, "reading %s: %s", path, strerror(errno));
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > SEAL_LINE_MAX) {
		*malformed = true;
		return 0;
	}
	do
		n = read(fd, buf, SEAL_LINE_MAX);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return stasis_error_errno(err, errno, "reading %s: %s", path, strerror(errno));
	buf[n] = '\0';
	if (strlen(buf) != (size_t)n) {
		*malformed = true;
		return 0;
	}
	*out = strdup(buf);
	return *out ? 0 : stasis_error_errno(err, ENOMEM, "out of memory");
}

static void free_keys(struct seal_key *keys, size_t n)
{
	for (size_t i = 0; i < n; i++)
		seal_key_free(&keys[i]);
}

/* Why an image is refused, and how to trust one that is not damaged. */
static int refuse(const char *dir, enum seal_verdict v, const char *signer,
		  const struct seal_key *keys, size_t which, struct stasis_error **err)
{
	switch (v) {
	case SEAL_NONE:
		stasis_error_set(err, EPERM, STASIS_DOMAIN_IMAGE, 0,
				 "%s is not sealed: not made by a stasis that seals its images, so "
				 "nothing says whose it is",
				 dir);
		return stasis_error_hint(
		    err, "a restore runs its processes with the credentials it states; "
			 "checkpoint again, or seal an image you vouch for as docs/SECURITY.md "
			 "shows");
	case SEAL_FOREIGN:
		stasis_error_set(err, EPERM, STASIS_DOMAIN_IMAGE, 0,
				 "%s is sealed by key %s, neither this host's nor one given with "
				 "--trust-key",
				 dir, signer);
		return stasis_error_hint(err, "if you trust whoever holds the key that sealed it, "
					      "restore with --trust-key FILE of that key");
	case SEAL_MISMATCH:
		stasis_error_set(err, EBADMSG, STASIS_DOMAIN_IMAGE, 0,
				 "%s/%s does not match its seal by %s: it changed after it was "
				 "sealed",
				 dir, MANIFEST_NAME, which == 0 ? "this host" : keys[which].origin);
		return stasis_error_hint(err, "the image is damaged or was tampered with; "
					      "checkpoint again");
	default:
		stasis_error_set(err, EBADMSG, STASIS_DOMAIN_IMAGE, 0, "%s/%s is not a seal", dir,
				 SEAL_NAME);
		return stasis_error_hint(err, "the image is damaged, or not stasis's");
	}
}

int image_read_trusted(const char *dir, const struct image_trust *trust, struct manifest *m,
		       struct stasis_error **err)
{
	_cleanup_free_ char *text = NULL, *seal = NULL;
	struct seal_key keys[1 + SEAL_MAX_TRUSTED];
	size_t nkeys = 1, nfiles = trust ? trust->nkey_files : 0, which = 0;
	char signer[SEAL_ID_LEN + 1];
	enum seal_verdict v;
	bool malformed = false;
	int r;

	memset(keys, 0, sizeof(keys));
	if (nfiles > SEAL_MAX_TRUSTED)
		return stasis_error_set(err, E2BIG, STASIS_DOMAIN_USAGE, 0,
					"at most %d --trust-key files", SEAL_MAX_TRUSTED);
	r = manifest_read_text(dir, &text, err);
	if (r == 0)
		r = read_seal(dir, &seal, &malformed, err);
	/* No host key yet: nothing was sealed here, and a restore makes none. */
	if (r == 0 && (r = seal_host_key(false, &keys[0], err)) == -ENOENT) {
		stasis_error_freep(err);
		r = 0;
	}
	for (size_t i = 0; r == 0 && i < nfiles; i++)
		r = seal_key_load(trust->key_files[i], &keys[nkeys++], err);
	if (r < 0) {
		free_keys(keys, nkeys);
		return r;
	}
	v = malformed ? SEAL_MALFORMED
		      : seal_check(seal, text, strlen(text), keys, nkeys, &which, signer);
	if (v != SEAL_TRUSTED)
		r = refuse(dir, v, signer, keys, which, err);
	free_keys(keys, nkeys);
	if (r < 0)
		return r;
	r = manifest_from_json(text, m, err);
	return r < 0 ? stasis_error_wrap(err, "%s/%s", dir, MANIFEST_NAME) : 0;
}

int image_read_any(const char *dir, struct manifest *m, const char **status, char *signer,
		   struct stasis_error **err)
{
	_cleanup_free_ char *text = NULL, *seal = NULL;
	struct seal_key key = {0};
	size_t which = 0;
	bool malformed = false, have_key, no_key;
	int r = manifest_read_text(dir, &text, err), k;

	signer[0] = '\0';
	if (r == 0 && read_seal(dir, &seal, &malformed, NULL) < 0)
		malformed = true;
	if (r < 0)
		return r;
	k = seal_host_key(false, &key, NULL);
	/* None made yet: this host sealed nothing. */
	have_key = k == 0;
	no_key = k == -ENOENT;
	switch (malformed ? SEAL_MALFORMED
			  : seal_check(seal, text, strlen(text), &key, have_key, &which, signer)) {
	case SEAL_TRUSTED:
		*status = "this host";
		break;
	case SEAL_NONE:
		*status = "none";
		break;
	case SEAL_FOREIGN:
		*status = have_key || no_key ? "another key" : "unchecked";
		break;
	default:
		*status = "broken";
	}
	seal_key_free(&key);
	r = manifest_from_json(text, m, err);
	return r < 0 ? stasis_error_wrap(err, "%s/%s", dir, MANIFEST_NAME) : 0;
}
