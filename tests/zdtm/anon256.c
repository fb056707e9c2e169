/* SPDX-License-Identifier: MIT */
/*
 * One process with a 256 MiB private anonymous mapping: past the size from
 * which stasis's CRIU fills a mapping from several threads at restore
 * (64 MiB) and hands a task's pages to page writers, in chunks or parts
 * where it is told to. One page in eight is left untouched, so the image's
 * pagemap is fragmented, and a megabyte in the middle is made read-only,
 * so the mapping is three VMAs. Every page is checked after the restore.
 */
#include <sys/mman.h>

#include "zdtmtst.h"
#include "pattern.h"

const char *test_doc = "256 MiB of anonymous memory with holes comes back intact";
const char *test_author = "stasis developers";

#define MAP_BYTES (256UL << 20)
#define HOLE_EVERY 8
#define RO_OFFSET (100UL << 20)
#define RO_BYTES (1UL << 20)
#define SEED 0x5354415349533235ULL

int main(int argc, char **argv)
{
	size_t pages, bad, first_bad = 0;
	char *mem;

	test_init(argc, argv);

	mem = mmap(NULL, MAP_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		pr_perror("mmap of %lu bytes", MAP_BYTES);
		return 1;
	}
	pages = MAP_BYTES / pattern_page_size();
	pattern_fill(mem, 0, pages, SEED, HOLE_EVERY);
	if (mprotect(mem + RO_OFFSET, RO_BYTES, PROT_READ)) {
		pr_perror("mprotect");
		return 1;
	}

	test_daemon();
	test_waitsig();

	bad = pattern_check(mem, 0, pages, SEED, HOLE_EVERY, &first_bad);
	if (bad)
		fail("%zu of %zu pages differ, the first at offset %#zx", bad, pages,
		     first_bad * pattern_page_size());
	else
		pass();
	return 0;
}
