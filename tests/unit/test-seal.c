/* SPDX-License-Identifier: MIT */
/* The image's seal: the HMAC over the manifest's bytes, the host key made
 * on first use, and the keys a restore trusts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image.h"
#include "image-seal.h"
#include "manifest.h"
#include "util.h"

static const char text[] = "{ \"format_version\": 1 }\n";

static void make_key(struct seal_key *k, unsigned char fill)
{
	unsigned char bytes[SEAL_KEY_MIN];

	memset(bytes, fill, sizeof(bytes));
	assert_int_equal(seal_key_from(bytes, sizeof(bytes), k), 0);
}

/* Sealed with a key, the text checks with that key, and with no other;
 * one byte changed, or no seal, or a seal that is not one, is caught. */
static void seal_verdicts(void **state)
{
	struct seal_key keys[2];
	char seal[SEAL_LINE_MAX], signer[SEAL_ID_LEN + 1], changed[sizeof(text)];
	size_t which = 9;

	(void)state;
	make_key(&keys[0], 1);
	make_key(&keys[1], 2);
	assert_string_not_equal(keys[0].id, keys[1].id);
	assert_int_equal(seal_text(&keys[1], text, strlen(text), seal), 0);
	assert_int_equal(strlen(seal), strlen("stasis-seal-1 hmac-sha256 ") + 16 + 1 + 64 + 1);
	/* Good: found under the key that made it. */
	assert_int_equal(seal_check(seal, text, strlen(text), keys, 2, &which, signer),
			 SEAL_TRUSTED);
	assert_int_equal(which, 1);
	assert_string_equal(signer, keys[1].id);
	/* A manifest changed after it was sealed. */
	memcpy(changed, text, sizeof(text));
	changed[3] = 'F';
	assert_int_equal(seal_check(seal, changed, strlen(changed), keys, 2, &which, signer),
			 SEAL_MISMATCH);
	/* Sealed with a key that is not trusted here. */
	assert_int_equal(seal_check(seal, text, strlen(text), keys, 1, &which, signer),
			 SEAL_FOREIGN);
	assert_string_equal(signer, keys[1].id);
	/* No seal, and seals that are not one. */
	assert_int_equal(seal_check(NULL, text, strlen(text), keys, 2, &which, signer), SEAL_NONE);
	assert_int_equal(seal_check("stasis-seal-1 hmac-sha256 x\n", text, strlen(text), keys, 2,
				    &which, signer),
			 SEAL_MALFORMED);
	seal[strlen(seal) - 2] = 'g';
	assert_int_equal(seal_check(seal, text, strlen(text), keys, 2, &which, signer),
			 SEAL_MALFORMED);
	/* The MAC itself changed: the key's id still names it. */
	seal[strlen(seal) - 2] = seal[strlen(seal) - 3] == '0' ? '1' : '0';
	assert_int_equal(seal_check(seal, text, strlen(text), keys, 2, &which, signer),
			 SEAL_MISMATCH);
	seal_key_free(&keys[0]);
	seal_key_free(&keys[1]);
}

static void write_bytes(const char *path, const void *data, size_t len, mode_t mode)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	fclose(f);
	assert_int_equal(chmod(path, mode), 0);
}

static void expect_refused(int r, struct stasis_error **err, int status, const char *says)
{
	assert_int_equal(r, -status);
	assert_non_null(*err);
	if (!strstr((*err)->message, says))
		fail_msg("'%s' does not say '%s'", (*err)->message, says);
	stasis_error_free(*err);
	*err = NULL;
}

/* The host key is made on first use, 0600 in a 0700 folder, and read
 * again after; a key of the wrong mode, a link, a folder others may open,
 * and a key file others may read are refused. */
static void host_key_rules(void **state)
{
	char dir[] = "/tmp/stasis-unit-seal-XXXXXX", keys[PATH_MAX], path[PATH_MAX + 32];
	char *old = getenv("STASIS_KEY_DIR") ? strdup(getenv("STASIS_KEY_DIR")) : NULL;
	struct stasis_error *err = NULL;
	struct seal_key a, b;
	unsigned char bytes[SEAL_KEY_MIN] = {7};
	struct stat st;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(keys, sizeof(keys), "%s/keys", dir);
	setenv("STASIS_KEY_DIR", keys, 1);
	/* Not there: not made without create. */
	expect_refused(seal_host_key(false, &a, &err), &err, ENOENT, "no seal key");
	assert_int_equal(seal_host_key(true, &a, &err), 0);
	assert_int_equal(stat(keys, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0700);
	snprintf(path, sizeof(path), "%s/%s", keys, SEAL_KEY_NAME);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(st.st_size, SEAL_KEY_BYTES);
	assert_int_equal(seal_host_key(true, &b, &err), 0);
	assert_string_equal(a.id, b.id);
	seal_key_free(&b);
	/* Readable by others. */
	assert_int_equal(chmod(path, 0644), 0);
	expect_refused(seal_host_key(true, &b, &err), &err, EPERM, "open to others");
	assert_int_equal(chmod(path, 0600), 0);
	/* A link in its place, to a key that is fine. */
	snprintf(path, sizeof(path), "%s/elsewhere", dir);
	write_bytes(path, bytes, sizeof(bytes), 0600);
	snprintf(path, sizeof(path), "%s/%s", keys, SEAL_KEY_NAME);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(symlink("../elsewhere", path), 0);
	expect_refused(seal_host_key(true, &b, &err), &err, EPERM, "is a link");
	assert_int_equal(unlink(path), 0);
	/* Its folder open to others. */
	assert_int_equal(chmod(keys, 0755), 0);
	expect_refused(seal_host_key(true, &b, &err), &err, EPERM, "open to others");
	assert_int_equal(chmod(keys, 0700), 0);
	/* A new key once the old one is gone. */
	assert_int_equal(seal_host_key(true, &b, &err), 0);
	assert_string_not_equal(a.id, b.id);
	seal_key_free(&a);
	seal_key_free(&b);
	/* Key files root names: too short, readable by others, fine. */
	snprintf(path, sizeof(path), "%s/trusted", dir);
	write_bytes(path, bytes, 16, 0600);
	expect_refused(seal_key_load(path, &a, &err), &err, EINVAL, "holds 16 bytes");
	write_bytes(path, bytes, sizeof(bytes), 0640);
	expect_refused(seal_key_load(path, &a, &err), &err, EPERM, "open to others");
	assert_int_equal(chmod(path, 0600), 0);
	assert_int_equal(seal_key_load(path, &a, &err), 0);
	seal_key_free(&a);
	if (old)
		setenv("STASIS_KEY_DIR", old, 1);
	free(old);
	snprintf(path, sizeof(path), "rm -rf %s", dir);
	assert_int_equal(system(path), 0);
}

/* An image written here opens; its manifest changed, its seal gone, or
 * sealed by another host's key, it is refused until that key is named. */
static void image_trust(void **state)
{
	char dir[] = "/tmp/stasis-unit-sealed-XXXXXX", img[PATH_MAX], other[PATH_MAX],
	     here[PATH_MAX];
	char path[PATH_MAX + 32], keyfile[PATH_MAX + 32];
	char *old = getenv("STASIS_KEY_DIR") ? strdup(getenv("STASIS_KEY_DIR")) : NULL;
	const char *files[1] = {keyfile};
	struct image_trust trust = {.key_files = files, .nkey_files = 1};
	struct stasis_error *err = NULL;
	struct manifest m, back;
	const char *status;
	char signer[SEAL_ID_LEN + 1];

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(img, sizeof(img), "%s/image", dir);
	snprintf(other, sizeof(other), "%s/other-host", dir);
	snprintf(here, sizeof(here), "%s/this-host", dir);
	assert_int_equal(image_prepare(img, &err), 1);
	snprintf(path, sizeof(path), "%s/criu/inventory.img", img);
	write_bytes(path, "inv", 3, 0600);
	manifest_init(&m);
	manifest_add_process(&m)->pid = 7;
	assert_int_equal(image_checksum(img, &m, NULL, &err), 0);
	/* Sealed by another host. */
	setenv("STASIS_KEY_DIR", other, 1);
	assert_int_equal(image_write_manifest(img, &m, &err), 0);
	setenv("STASIS_KEY_DIR", here, 1);
	manifest_init(&back);
	expect_refused(image_read_trusted(img, NULL, &back, &err), &err, EPERM,
		       "neither this host's nor one given with --trust-key");
	manifest_free(&back);
	snprintf(keyfile, sizeof(keyfile), "%s/%s", other, SEAL_KEY_NAME);
	manifest_init(&back);
	assert_int_equal(image_read_trusted(img, &trust, &back, &err), 0);
	assert_int_equal(back.nprocs, 1);
	manifest_free(&back);
	manifest_init(&back);
	assert_int_equal(image_read_any(img, &back, &status, signer, &err), 0);
	/* This host has no key yet: it sealed nothing. */
	assert_string_equal(status, "another key");
	manifest_free(&back);
	/* Sealed here. */
	assert_int_equal(image_write_manifest(img, &m, &err), 0);
	manifest_init(&back);
	assert_int_equal(image_open(img, &back, &err), 0);
	manifest_free(&back);
	manifest_init(&back);
	assert_int_equal(image_read_any(img, &back, &status, signer, &err), 0);
	assert_string_equal(status, "this host");
	manifest_free(&back);
	/* The manifest changed after: one more process. */
	manifest_add_process(&m)->pid = 8;
	snprintf(path, sizeof(path), "%s/%s", img, MANIFEST_NAME);
	{
		char *json = manifest_to_json(&m, true);

		write_bytes(path, json, strlen(json), 0600);
		free(json);
	}
	manifest_init(&back);
	expect_refused(image_read_trusted(img, &trust, &back, &err), &err, EBADMSG,
		       "does not match its seal by this host");
	manifest_free(&back);
	/* No seal at all. */
	snprintf(path, sizeof(path), "%s/%s", img, SEAL_NAME);
	assert_int_equal(unlink(path), 0);
	manifest_init(&back);
	expect_refused(image_read_trusted(img, &trust, &back, &err), &err, EPERM, "is not sealed");
	manifest_free(&back);
	manifest_init(&back);
	assert_int_equal(image_read_any(img, &back, &status, signer, &err), 0);
	assert_string_equal(status, "none");
	manifest_free(&back);
	/* A link where the seal goes is not one. */
	assert_int_equal(symlink("/etc/hostname", path), 0);
	manifest_init(&back);
	expect_refused(image_read_trusted(img, &trust, &back, &err), &err, EBADMSG, "not a seal");
	manifest_free(&back);
	manifest_free(&m);
	if (old)
		setenv("STASIS_KEY_DIR", old, 1);
	free(old);
	snprintf(path, sizeof(path), "rm -rf %s", dir);
	assert_int_equal(system(path), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(seal_verdicts),
	    cmocka_unit_test(host_key_rules),
	    cmocka_unit_test(image_trust),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
