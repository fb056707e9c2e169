/* SPDX-License-Identifier: MIT */
/* Pages images that CRIU writes into pipes instead of files (image-pipe.c),
 * for the compressor. Internal to the library.
 *
 * CRIU names its pages images pages-1.img, pages-2.img, ... in the order it
 * writes them, one after another. Each name is linked, in the folder CRIU
 * dumps into, to the read end of a pipe that stasis holds
 * (/proc/PID/fd/N): CRIU's open finds a reader at once, and its splice
 * moves the pages into the pipe without copying them. A thread reads the
 * pipes into frames and hands each one on. Should stasis die, the links
 * dangle and CRIU's open fails instead of waiting for a reader. */
#ifndef STASIS_IMAGE_PIPE_H
#define STASIS_IMAGE_PIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct page_pipes;

/* Called from the reading thread with the next len bytes of pages-ID.img
 * in buf, which goes back through page_pipes_give_back; buf is NULL and
 * len 0 when only the end is told. end: CRIU closed the file and this is
 * the last of it. */
typedef void (*page_pipes_deliver_fn)(void *ctx, unsigned int id, unsigned char *buf, size_t len,
				      bool end);

/* Links count names in the folder stagefd, with nbuffers frames of
 * frame_len bytes to read into, and starts reading. */
int page_pipes_start(int stagefd, unsigned int count, size_t nbuffers, size_t frame_len,
		     page_pipes_deliver_fn deliver, void *ctx, struct page_pipes **out);
void page_pipes_give_back(struct page_pipes *pp, unsigned char *buf);
/* CRIU is done: reads what is left in the pipes, tells it, and stops. */
void page_pipes_stop(struct page_pipes *pp);
/* How long the reader waited for a free frame: the compression was behind
 * and CRIU waited too. */
uint64_t page_pipes_stall_usec(const struct page_pipes *pp);
/* Stops, closes the pipes and frees; the links stay for the folder's owner
 * to remove. */
void page_pipes_free(struct page_pipes *pp);

#endif
