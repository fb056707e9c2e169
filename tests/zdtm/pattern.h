/* SPDX-License-Identifier: MIT */
/*
 * The memory pattern of stasis's own zdtm tests. Each 8-byte word is a
 * function of a seed and of the word's place, so a page that comes back
 * from a restore with another page's bytes, a stale copy or zeros is
 * caught, and the check says which page. Every hole_every-th page (0: none)
 * is left untouched: it is not in the image, and must come back as zeros.
 */
#ifndef STASIS_ZDTM_PATTERN_H
#define STASIS_ZDTM_PATTERN_H

#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

/* splitmix64: cheap, and no two places of one seed give the same word */
static inline uint64_t pattern_word(uint64_t seed, uint64_t place)
{
	uint64_t z = seed + (place + 1) * 0x9e3779b97f4a7c15ULL;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static inline size_t pattern_page_size(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

static inline int pattern_hole(size_t page, unsigned int hole_every)
{
	return hole_every && page % hole_every == hole_every - 1;
}

/* Fills pages [from, to) of base, where page 0 is base itself. */
static inline void pattern_fill(void *base, size_t from, size_t to, uint64_t seed,
				unsigned int hole_every)
{
	size_t words = pattern_page_size() / sizeof(uint64_t);
	uint64_t *w = base;
	size_t page, i;

	for (page = from; page < to; page++) {
		if (pattern_hole(page, hole_every))
			continue;
		for (i = 0; i < words; i++)
			w[page * words + i] = pattern_word(seed, page * words + i);
	}
}

/*
 * How many of pages [from, to) of base differ from what pattern_fill put
 * there (holes: zeros); the first such page in *first_bad.
 */
static inline size_t pattern_check(const void *base, size_t from, size_t to, uint64_t seed,
				   unsigned int hole_every, size_t *first_bad)
{
	size_t words = pattern_page_size() / sizeof(uint64_t);
	const uint64_t *w = base;
	size_t page, i, bad = 0;

	for (page = from; page < to; page++) {
		int hole = pattern_hole(page, hole_every);

		for (i = 0; i < words; i++) {
			uint64_t want = hole ? 0 : pattern_word(seed, page * words + i);

			if (w[page * words + i] != want) {
				if (!bad)
					*first_bad = page;
				bad++;
				break;
			}
		}
	}
	return bad;
}

#endif
