/* SPDX-License-Identifier: MIT */
#include "stream.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "image-hash.h"
#include "image.h"
#include "progress.h"
#include "util.h"

#define SAMPLE (64u << 10)
#define LEVEL 1
#define MAX_FILES 4096

struct stream_file {
	char name[WIRE_NAME_MAX];
	uint32_t id;
	XXH3_state_t *state;
	uint64_t size;
	int fd; /* the destination's */
};

struct file_table {
	struct stream_file *files;
	size_t n;
};

static struct stream_file *table_find(struct file_table *t, uint32_t id)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->files[i].id == id)
			return &t->files[i];
	return NULL;
}

static struct stream_file *table_add(struct file_table *t, uint32_t id, const char *name)
{
	struct stream_file *grown, *f;

	if (t->n == MAX_FILES)
		return NULL;
	grown = realloc(t->files, (t->n + 1) * sizeof(*grown));
	if (!grown)
		return NULL;
	t->files = grown;
	f = &t->files[t->n];
	*f = (struct stream_file){.id = id, .fd = -1, .state = XXH3_createState()};
	if (!f->state)
		return NULL;
	snprintf(f->name, sizeof(f->name), "%s", name);
	XXH3_128bits_reset(f->state);
	t->n++;
	return f;
}

static void table_free(struct file_table *t)
{
	for (size_t i = 0; i < t->n; i++) {
		XXH3_freeState(t->files[i].state);
		if (t->files[i].fd >= 0)
			close(t->files[i].fd);
	}
	free(t->files);
}

struct stream_out {
	struct tls_channel *ch;
	enum stasis_compress mode;
	struct file_table t;
	ZSTD_CCtx *cctx;
	unsigned char *zbuf;
	size_t zcap;
	uint32_t next_id;
	uint64_t raw, wire;
	int error;
};

bool stream_sample_pays(enum stasis_compress mode, size_t sample_len, size_t sample_packed)
{
	if (mode == STASIS_COMPRESS_OFF)
		return false;
	if (mode == STASIS_COMPRESS_ON)
		return true;
	return sample_packed + sample_len / 10 <= sample_len;
}

int stream_out_new(struct tls_channel *ch, enum stasis_compress mode, struct stream_out **out)
{
	struct stream_out *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->ch = ch;
	s->mode = mode;
	s->next_id = 1u << 20; /* above the pipes' ids */
	if (mode != STASIS_COMPRESS_OFF) {
		s->zcap = ZSTD_compressBound(WIRE_MAX_RAW);
		s->cctx = ZSTD_createCCtx();
		s->zbuf = malloc(s->zcap);
		if (!s->cctx || !s->zbuf) {
			stream_out_free(s);
			return -ENOMEM;
		}
	}
	*out = s;
	return 0;
}

/* The frame compressed into s->zbuf when that pays: its length, else 0. */
static size_t pack(struct stream_out *s, const unsigned char *buf, size_t len)
{
	size_t sample = len < SAMPLE ? len : SAMPLE, n;

	if (s->mode == STASIS_COMPRESS_OFF)
		return 0;
	n = ZSTD_compressCCtx(s->cctx, s->zbuf, s->zcap, buf, sample, LEVEL);
	if (ZSTD_isError(n) || !stream_sample_pays(s->mode, sample, n))
		return 0;
	n = ZSTD_compressCCtx(s->cctx, s->zbuf, s->zcap, buf, len, LEVEL);
	return ZSTD_isError(n) || n >= len ? 0 : n;
}

static int send_frame(struct stream_out *s, struct stream_file *f, const unsigned char *buf,
		      size_t len)
{
	unsigned char head[WIRE_DATA_HEAD];
	size_t packed = pack(s, buf, len);
	int r;

	wire_put32(head, f->id);
	wire_put32(head + 4, (uint32_t)len);
	r = tls_send2(s->ch, WIRE_DATA, packed ? WIRE_PACKED : 0, head, sizeof(head),
		      packed ? s->zbuf : buf, packed ? packed : len);
	if (r < 0)
		return r;
	XXH3_128bits_update(f->state, buf, len);
	f->size += len;
	s->raw += len;
	s->wire += WIRE_HEADER_LEN + sizeof(head) + (packed ? packed : len);
	progress_add_bytes(len);
	return 0;
}

static struct stream_file *announce(struct stream_out *s, uint32_t id, const char *name)
{
	unsigned char head[4];
	struct stream_file *f = table_add(&s->t, id, name);
	int r;

	if (!f) {
		s->error = -ENOMEM;
		return NULL;
	}
	wire_put32(head, id);
	r = tls_send2(s->ch, WIRE_FILE, 0, head, sizeof(head), name, strlen(name));
	s->wire += WIRE_HEADER_LEN + sizeof(head) + strlen(name);
	if (r < 0) {
		s->error = r;
		return NULL;
	}
	return f;
}

int stream_out_data(struct stream_out *s, uint32_t id, const char *name, const unsigned char *buf,
		    size_t len)
{
	struct stream_file *f;

	if (s->error)
		return s->error;
	f = table_find(&s->t, id);
	if (!f && !(f = announce(s, id, name)))
		return s->error;
	for (size_t done = 0; done < len && !s->error;) {
		size_t n = len - done < WIRE_MAX_RAW ? len - done : WIRE_MAX_RAW;
		int r = send_frame(s, f, buf + done, n);

		if (r < 0)
			s->error = r;
		done += n;
	}
	return s->error;
}

int stream_out_error(const struct stream_out *s)
{
	return s->error;
}

int stream_out_file(struct stream_out *s, int dirfd, const char *name)
{
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	_cleanup_free_ unsigned char *buf = malloc(WIRE_MAX_RAW);
	uint32_t id = s->next_id++;
	ssize_t n;

	if (fd < 0 || !buf)
		return fd < 0 ? -errno : -ENOMEM;
	if (!announce(s, id, name))
		return s->error;
	while ((n = read(fd, buf, WIRE_MAX_RAW)) > 0)
		if (stream_out_data(s, id, name, buf, (size_t)n) < 0)
			return s->error;
	return n < 0 ? -errno : 0;
}

bool stream_out_sent(const struct stream_out *s, const char *name)
{
	for (size_t i = 0; i < s->t.n; i++)
		if (strcmp(s->t.files[i].name, name) == 0)
			return true;
	return false;
}

int stream_out_describe(struct stream_out *s, struct manifest *m)
{
	m->image_bytes = 0;
	for (size_t i = 0; i < s->t.n; i++) {
		struct stream_file *f = &s->t.files[i];
		struct manifest_file *mf = manifest_add_file(m);

		if (!mf || asprintf(&mf->name, "%s/%s", IMAGE_CRIU_SUBDIR, f->name) < 0)
			return -ENOMEM;
		mf->size = f->size;
		hash_hex(f->state, mf->xxh128);
		m->image_bytes += f->size;
	}
	return 0;
}

void stream_out_counts(const struct stream_out *s, uint64_t *raw, uint64_t *wire)
{
	*raw = s ? s->raw : 0;
	*wire = s ? s->wire : 0;
}

void stream_out_free(struct stream_out *s)
{
	if (!s)
		return;
	table_free(&s->t);
	ZSTD_freeCCtx(s->cctx);
	free(s->zbuf);
	free(s);
}

struct stream_in {
	int dirfd;
	struct file_table t;
	unsigned char *raw;
	uint64_t bytes;
};

int stream_in_new(int dirfd, struct stream_in **out)
{
	struct stream_in *s = calloc(1, sizeof(*s));

	if (!s || !(s->raw = malloc(WIRE_MAX_RAW))) {
		free(s);
		return -ENOMEM;
	}
	s->dirfd = dirfd;
	*out = s;
	return 0;
}

static int bad_message(struct stasis_error **err, const char *what)
{
	stasis_error_set(err, EPROTO, STASIS_DOMAIN_IMAGE, 0, "the source sent %s", what);
	return stasis_error_hint(err, "run the same stasis version on both ends");
}

static int take_file(struct stream_in *s, const unsigned char *p, uint32_t len,
		     struct stasis_error **err)
{
	char name[WIRE_NAME_MAX];
	struct stream_file *f;
	uint32_t id;

	if (len < 5 || len - 4 >= sizeof(name))
		return bad_message(err, "a file without a name");
	id = wire_get32(p);
	memcpy(name, p + 4, len - 4);
	name[len - 4] = '\0';
	if (!wire_name_ok(name) || table_find(&s->t, id))
		return bad_message(err, "a file name it may not use");
	f = table_add(&s->t, id, name);
	if (!f)
		return stasis_error_errno(err, ENOMEM, "out of memory");
	f->fd = openat(s->dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (f->fd < 0)
		return stasis_error_errno(err, errno, "staging %s: %s", name, strerror(errno));
	return 0;
}

static int take_data(struct stream_in *s, const struct wire_header *h, const unsigned char *p,
		     struct stasis_error **err)
{
	struct stream_file *f = h->len >= WIRE_DATA_HEAD ? table_find(&s->t, wire_get32(p)) : NULL;
	uint32_t raw = h->len >= WIRE_DATA_HEAD ? wire_get32(p + 4) : 0;
	const unsigned char *bytes = p + WIRE_DATA_HEAD;
	size_t len = h->len - WIRE_DATA_HEAD;

	if (!f || raw > WIRE_MAX_RAW)
		return bad_message(err, "bytes of a file it did not name");
	if (h->flags & WIRE_PACKED) {
		size_t n = ZSTD_decompress(s->raw, raw, bytes, len);

		if (ZSTD_isError(n) || n != raw)
			return bad_message(err, "a frame that does not decompress");
		bytes = s->raw;
		len = n;
	} else if (len != raw) {
		return bad_message(err, "a frame of the wrong length");
	}
	if (write_all(f->fd, bytes, len) < 0) {
		stasis_error_errno(err, errno, "staging %s in memory: %s", f->name,
				   strerror(errno));
		return stasis_error_hint(err, "give the staging folder ($STASIS_STAGE_DIR) room");
	}
	XXH3_128bits_update(f->state, bytes, len);
	f->size += len;
	s->bytes += len;
	progress_add_bytes(len);
	return 0;
}

int stream_in_take(struct stream_in *s, const struct wire_header *h, const unsigned char *payload,
		   struct stasis_error **err)
{
	if (h->type == WIRE_FILE)
		return take_file(s, payload, h->len, err);
	return take_data(s, h, payload, err);
}

int stream_in_verify(struct stream_in *s, const struct manifest *m, struct stasis_error **err)
{
	size_t matched = 0;

	for (size_t i = 0; i < m->nfiles; i++) {
		const char *name = m->files[i].name;
		const char *base = strncmp(name, IMAGE_CRIU_SUBDIR "/", 5) == 0 ? name + 5 : name;
		struct stream_file *f = NULL;
		char hex[33];

		for (size_t k = 0; k < s->t.n && !f; k++)
			if (strcmp(s->t.files[k].name, base) == 0)
				f = &s->t.files[k];
		if (!f)
			return stasis_error_set(err, EBADMSG, STASIS_DOMAIN_IMAGE, 0,
						"%s never arrived", base);
		hash_hex(f->state, hex);
		if (f->size != m->files[i].size || strcmp(hex, m->files[i].xxh128) != 0)
			return stasis_error_set(err, EBADMSG, STASIS_DOMAIN_IMAGE, 0,
						"%s arrived damaged: checksum mismatch", base);
		matched++;
	}
	if (matched != s->t.n)
		return bad_message(err, "files its manifest does not list");
	return 0;
}

uint64_t stream_in_bytes(const struct stream_in *s)
{
	return s->bytes;
}

void stream_in_free(struct stream_in *s)
{
	if (!s)
		return;
	table_free(&s->t);
	free(s->raw);
	free(s);
}
