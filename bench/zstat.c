/* SPDX-License-Identifier: MIT */
/* What compression could do to an image's pages: reads every SAMPLE-th
 * 1 MiB block of the files given and prints the share of all-zero 4 KiB
 * pages and the zstd size ratio of the blocks as they are and with their
 * bytes regrouped by position in a 4- or 2-byte word (the "shuffle" that
 * helps tables of floats).
 *   zstat SAMPLE FILE...                                                  */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define BLOCK (1u << 20)
#define PAGE 4096u

static void shuffle(const unsigned char *in, unsigned char *out, size_t n, size_t width)
{
	size_t words = n / width;
	for (size_t b = 0; b < width; b++)
		for (size_t i = 0; i < words; i++)
			out[b * words + i] = in[i * width + b];
}

static size_t packed(const unsigned char *in, size_t n, int level, void *dst, size_t cap)
{
	size_t r = ZSTD_compress(dst, cap, in, n, level);
	return ZSTD_isError(r) ? n : r;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: zstat SAMPLE FILE...\n");
		return 2;
	}
	unsigned long sample = strtoul(argv[1], NULL, 10);
	size_t cap = ZSTD_compressBound(BLOCK);
	unsigned char *buf = malloc(BLOCK), *nz = malloc(BLOCK), *sh = malloc(BLOCK);
	void *dst = malloc(cap);
	unsigned long long raw = 0, pages = 0, zero = 0, z1 = 0, z3 = 0, s4 = 0, s2 = 0;
	unsigned long blockno = 0;
	for (int i = 2; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");
		if (!f) {
			perror(argv[i]);
			return 1;
		}
		size_t n;
		while ((n = fread(buf, 1, BLOCK, f)) > 0) {
			if (sample > 1 && blockno++ % sample)
				continue;
			size_t kept = 0;
			for (size_t off = 0; off + PAGE <= n; off += PAGE) {
				static const unsigned char zeros[PAGE];
				pages++;
				if (!memcmp(buf + off, zeros, PAGE)) {
					zero++;
					continue;
				}
				memcpy(nz + kept, buf + off, PAGE);
				kept += PAGE;
			}
			raw += n;
			z1 += packed(buf, n, 1, dst, cap);
			z3 += packed(buf, n, 3, dst, cap);
			shuffle(nz, sh, kept, 4);
			s4 += packed(sh, kept, 1, dst, cap);
			shuffle(nz, sh, kept, 2);
			s2 += packed(sh, kept, 1, dst, cap);
		}
		fclose(f);
	}
	if (!raw)
		return 1;
	printf("sampled_bytes\t%llu\n", raw);
	printf("zero_page_share\t%.3f\n", (double)zero / (double)pages);
	printf("zstd1_block_ratio\t%.3f\n", (double)z1 / (double)raw);
	printf("zstd3_block_ratio\t%.3f\n", (double)z3 / (double)raw);
	printf("zstd1_shuffle4_ratio\t%.3f\n", (double)s4 / (double)raw);
	printf("zstd1_shuffle2_ratio\t%.3f\n", (double)s2 / (double)raw);
	free(buf), free(nz), free(sh), free(dst);
	return 0;
}
