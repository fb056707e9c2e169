/* SPDX-License-Identifier: MIT */
/* Hashing a big file with its reads spread over a few threads
 * (image-hash.h). The hash must take the bytes in order, but it runs at
 * several times the speed of one thread's copy out of the page cache: on a
 * warm restore, one thread reading and hashing a pages image was what the
 * restore waited for once CRIU had filled the memory. Readers take the
 * chunks in turn into a ring of slots; the calling thread hashes slot after
 * slot and frees each for the chunk HASH_SLOTS further on. */
#include "image-hash.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define HASH_READERS 3
#define HASH_SLOTS 6

struct hash_ring {
	int fd;
	uint64_t chunks; /* of the size the file had when the hash began */
	uint64_t size;
	char *slots;		 /* HASH_SLOTS chunks of HASH_CHUNK */
	ssize_t got[HASH_SLOTS]; /* bytes read into a slot, or -errno */
	bool ready[HASH_SLOTS];	 /* read, not yet hashed */
	uint64_t next, hashed;	 /* the next chunk to read; chunks hashed */
	uint64_t asked;		 /* the end of the readahead asked for */
	bool stop;
	pthread_mutex_t lock;
	pthread_cond_t changed;
};

/* All of len at off, unless the file ends first: bytes read, or -errno. */
static ssize_t read_whole(int fd, char *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

static void ask_ahead(struct hash_ring *r, uint64_t chunk)
{
	uint64_t at = chunk * HASH_CHUNK;

	if (at + HASH_READ_AHEAD / 2 < r->asked || r->asked >= r->size)
		return;
	posix_fadvise(r->fd, (off_t)r->asked, HASH_READ_AHEAD, POSIX_FADV_WILLNEED);
	r->asked += HASH_READ_AHEAD;
}

static void *ring_reader(void *arg)
{
	struct hash_ring *r = arg;

	pthread_mutex_lock(&r->lock);
	while (!r->stop && r->next < r->chunks) {
		uint64_t chunk = r->next++;
		size_t slot = chunk % HASH_SLOTS;
		ssize_t n;

		/* The slot is free once the chunk HASH_SLOTS back is hashed. */
		while (!r->stop && chunk >= r->hashed + HASH_SLOTS)
			pthread_cond_wait(&r->changed, &r->lock);
		if (r->stop)
			break;
		ask_ahead(r, chunk);
		pthread_mutex_unlock(&r->lock);
		n = read_whole(r->fd, r->slots + slot * HASH_CHUNK, HASH_CHUNK, chunk * HASH_CHUNK);
		pthread_mutex_lock(&r->lock);
		r->got[slot] = n;
		r->ready[slot] = true;
		pthread_cond_broadcast(&r->changed);
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

/* Hash the chunks as they come, in order: 0, or -errno. */
static int ring_hash(struct hash_ring *r, XXH3_state_t *state, uint64_t *offset,
		     const atomic_bool *cancel)
{
	for (uint64_t chunk = 0; chunk < r->chunks; chunk++) {
		size_t slot = chunk % HASH_SLOTS;
		ssize_t n;

		if (cancel && atomic_load(cancel))
			return -ECANCELED;
		pthread_mutex_lock(&r->lock);
		while (!r->ready[slot])
			pthread_cond_wait(&r->changed, &r->lock);
		n = r->got[slot];
		pthread_mutex_unlock(&r->lock);
		if (n < 0)
			return (int)n;
		XXH3_128bits_update(state, r->slots + slot * HASH_CHUNK, (size_t)n);
		*offset += (uint64_t)n;
		pthread_mutex_lock(&r->lock);
		r->ready[slot] = false;
		r->hashed = chunk + 1;
		pthread_cond_broadcast(&r->changed);
		pthread_mutex_unlock(&r->lock);
		/* A file cut short since it was measured: what follows is
		 * whatever hash_tail finds. */
		if ((size_t)n < HASH_CHUNK)
			break;
	}
	return 0;
}

static int hash_ring_run(struct hash_ring *r, XXH3_state_t *state, uint64_t *offset,
			 const atomic_bool *cancel)
{
	pthread_t readers[HASH_READERS];
	size_t started = 0;
	int ret;

	for (size_t i = 0; i < HASH_READERS; i++)
		if (pthread_create(&readers[started], NULL, ring_reader, r) == 0)
			started++;
	/* No reader: nothing hashed here, hash_tail reads it all. */
	if (started == 0)
		return 0;
	ret = ring_hash(r, state, offset, cancel);
	pthread_mutex_lock(&r->lock);
	r->stop = true;
	pthread_cond_broadcast(&r->changed);
	pthread_mutex_unlock(&r->lock);
	for (size_t i = 0; i < started; i++)
		pthread_join(readers[i], NULL);
	return ret;
}

int hash_file_ahead(int fd, XXH3_state_t *state, char *buf, uint64_t *offset,
		    const atomic_bool *cancel)
{
	struct hash_ring r = {.fd = fd};
	struct stat st;
	int ret = 0;

	if (*offset == 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size >= HASH_AHEAD_MIN) {
		r.size = (uint64_t)st.st_size;
		r.chunks = (r.size + HASH_CHUNK - 1) / HASH_CHUNK;
		r.slots = malloc((size_t)HASH_SLOTS * HASH_CHUNK);
	}
	if (r.slots) {
		pthread_mutex_init(&r.lock, NULL);
		pthread_cond_init(&r.changed, NULL);
		ret = hash_ring_run(&r, state, offset, cancel);
		pthread_cond_destroy(&r.changed);
		pthread_mutex_destroy(&r.lock);
		free(r.slots);
	}
	/* Without a ring (a small file, no memory, no thread) this thread
	 * reads it all; after one, whatever the file grew by since. */
	return ret < 0 ? ret : hash_tail(fd, state, buf, offset, cancel);
}
