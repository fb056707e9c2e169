/* SPDX-License-Identifier: MIT */
#include "stream.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "fault.h"
#include "image-hash.h"
#include "image-serve.h"
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
	int fd; /* the destination's, for a file staged as a file */
	/* The destination's, for a pages image kept in memory: cap bytes of
	 * address space reserved, size of them filled. */
	unsigned char *map;
	uint64_t cap;
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
	double send_ns; /* what sending costs, in ns a byte on the wire; 0: not known yet */
	int error;
};

bool stream_sample_pays(enum stasis_compress mode, size_t sample_len, size_t sample_packed,
			double pack_ns, double send_ns)
{
	if (mode == STASIS_COMPRESS_OFF)
		return false;
	if (mode == STASIS_COMPRESS_ON)
		return true;
	if (sample_packed + sample_len / 10 > sample_len)
		return false;
	/* One thread compresses and sends: compressing a byte must cost less
	 * than sending the part of it that compression saves. */
	return send_ns <= 0 || pack_ns < (1.0 - (double)sample_packed / sample_len) * send_ns;
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
	uint64_t start = now_nsec();

	if (s->mode == STASIS_COMPRESS_OFF)
		return 0;
	n = ZSTD_compressCCtx(s->cctx, s->zbuf, s->zcap, buf, sample, LEVEL);
	if (ZSTD_isError(n) ||
	    !stream_sample_pays(s->mode, sample, n, (double)(now_nsec() - start) / sample,
				s->send_ns))
		return 0;
	n = ZSTD_compressCCtx(s->cctx, s->zbuf, s->zcap, buf, len, LEVEL);
	return ZSTD_isError(n) || n >= len ? 0 : n;
}

static int send_frame(struct stream_out *s, struct stream_file *f, const unsigned char *buf,
		      size_t len)
{
	unsigned char head[WIRE_DATA_HEAD];
	size_t packed = pack(s, buf, len), sent = packed ? packed : len;
	uint64_t start;
	double cost;
	int r;

	wire_put32(head, f->id);
	wire_put32(head + 4, (uint32_t)len);
	start = now_nsec();
	r = tls_send2(s->ch, WIRE_DATA, packed ? WIRE_PACKED : 0, head, sizeof(head),
		      packed ? s->zbuf : buf, sent);
	if (r < 0)
		return r;
	/* Averaged over the last frames or so: the link, its encryption, and
	 * the destination's pace as it holds the sender back. */
	cost = (double)(now_nsec() - start) / sent;
	s->send_ns = s->send_ns > 0 ? s->send_ns + (cost - s->send_ns) / 8 : cost;
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
	uint64_t memory_cap; /* address space for each pages image in memory, or 0 */
	/* The pages images served to CRIU from memory (stream_in_stage_pages). */
	struct serve_file *served;
	size_t nserved;
	struct image_server *server;
	char mnt[PATH_MAX];
};

int stream_in_new(int dirfd, uint64_t memory_cap, struct stream_in **out)
{
	struct stream_in *s = calloc(1, sizeof(*s));

	if (!s || !(s->raw = malloc(WIRE_MAX_RAW))) {
		free(s);
		return -ENOMEM;
	}
	s->dirfd = dirfd;
	s->memory_cap = memory_cap;
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
	/* Address space only: memory is taken as the bytes come. Where the
	 * machine will not reserve it (strict overcommit), a file. */
	if (s->memory_cap && image_is_pages_file(name)) {
		void *map = mmap(NULL, s->memory_cap, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

		if (map != MAP_FAILED) {
			madvise(map, s->memory_cap, MADV_HUGEPAGE);
			f->map = map;
			f->cap = s->memory_cap;
			return 0;
		}
	}
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
	if (f->map) {
		if (len > f->cap - f->size)
			return stasis_error_set(err, EFBIG, STASIS_DOMAIN_IMAGE, 0,
						"%s is larger than this machine's memory", f->name);
		memcpy(f->map + f->size, bytes, len);
	} else if (write_all(f->fd, bytes, len) < 0) {
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

/* Each pages image kept in memory written into the staging folder as a
 * file, the memory given back as it goes: where no FUSE folder can be
 * mounted. */
#define SPILL_STEP (64u << 20)

static int spill_pages(struct stream_in *s, struct stasis_error **err)
{
	for (size_t i = 0; i < s->t.n; i++) {
		struct stream_file *f = &s->t.files[i];
		_cleanup_close_ int fd = -1;

		if (!f->map)
			continue;
		uint64_t off = 0;
		int r = 0;

		fd = openat(s->dirfd, f->name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0)
			r = -errno;
		for (; r == 0 && off < f->size; off += SPILL_STEP) {
			uint64_t n = f->size - off < SPILL_STEP ? f->size - off : SPILL_STEP;

			r = write_all(fd, f->map + off, n) < 0 ? -errno : 0;
			madvise(f->map + off, n, MADV_DONTNEED);
		}
		if (r < 0) {
			stasis_error_errno(err, -r, "staging %s in memory: %s", f->name,
					   strerror(-r));
			return stasis_error_hint(
			    err, "give the staging folder ($STASIS_STAGE_DIR) room");
		}
		munmap(f->map, f->cap);
		f->map = NULL;
	}
	return 0;
}

/* Serves the pages images kept in memory from a FUSE folder inside the
 * staging folder, each linked as NAME there. The links are relative: CRIU
 * opens them through its images folder's descriptor after it has entered
 * a container's mount namespace and root, where an absolute path would
 * lead elsewhere. */
static int serve_pages(struct stream_in *s, const char *stage)
{
	size_t n = 0;
	int r;

	s->served = calloc(s->t.n ? s->t.n : 1, sizeof(*s->served));
	if (!s->served)
		return -ENOMEM;
	for (size_t i = 0; i < s->t.n; i++) {
		struct stream_file *f = &s->t.files[i];

		if (!f->map)
			continue;
		snprintf(s->served[n].name, sizeof(s->served[n].name), "%s", f->name);
		s->served[n].data = f->map;
		s->served[n].size = f->size;
		n++;
	}
	if (n == 0)
		return 0;
	if (fault_at("serve-mount", 0))
		return -EPERM;
	if (mkdirat(s->dirfd, STREAM_SERVED_DIR, 0700) < 0)
		return -errno;
	r = snprintf(s->mnt, sizeof(s->mnt), "%s/" STREAM_SERVED_DIR, stage) < (int)sizeof(s->mnt)
		? image_serve_start(s->mnt, s->served, n, &s->server)
		: -ENAMETOOLONG;
	if (r < 0) {
		unlinkat(s->dirfd, STREAM_SERVED_DIR, AT_REMOVEDIR);
		s->mnt[0] = '\0';
		return r;
	}
	s->nserved = n;
	for (size_t k = 0; k < n; k++) {
		char target[NAME_MAX + sizeof(STREAM_SERVED_DIR) + 1];

		image_serve_ready(s->server, k, s->served[k].size);
		snprintf(target, sizeof(target), STREAM_SERVED_DIR "/%s", s->served[k].name);
		if (symlinkat(target, s->dirfd, s->served[k].name) < 0)
			return -errno;
	}
	return 0;
}

static void stop_serving(struct stream_in *s)
{
	image_serve_stop(s->server);
	s->server = NULL;
	if (s->mnt[0] && unlinkat(s->dirfd, STREAM_SERVED_DIR, AT_REMOVEDIR) < 0)
		fprintf(stderr, "stasis: removing %s: %s\n", s->mnt, strerror(errno));
	s->mnt[0] = '\0';
	free(s->served);
	s->served = NULL;
	s->nserved = 0;
}

int stream_in_stage_pages(struct stream_in *s, const char *stage, bool *served,
			  struct stasis_error **err)
{
	int r = serve_pages(s, stage);

	*served = r == 0 && s->nserved > 0;
	if (r == 0)
		return 0;
	for (size_t k = 0; k < s->nserved; k++)
		unlinkat(s->dirfd, s->served[k].name, 0);
	stop_serving(s);
	return spill_pages(s, err);
}

void stream_in_release_pages(struct stream_in *s)
{
	if (!s)
		return;
	stop_serving(s);
	for (size_t i = 0; i < s->t.n; i++)
		if (s->t.files[i].map) {
			munmap(s->t.files[i].map, s->t.files[i].cap);
			s->t.files[i].map = NULL;
		}
}

uint64_t stream_in_bytes(const struct stream_in *s)
{
	return s->bytes;
}

void stream_in_free(struct stream_in *s)
{
	if (!s)
		return;
	stream_in_release_pages(s);
	table_free(&s->t);
	free(s->raw);
	free(s);
}
