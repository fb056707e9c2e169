/* SPDX-License-Identifier: MIT */
/* The progress line: seconds alone, bytes with their rate, of a total. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "progress.h"

static void test_format(void **state)
{
	char line[256];

	(void)state;
	progress_format(line, sizeof(line), "GPU checkpoint of 2 CUDA processes", "...", 1.25, 0,
			0);
	assert_string_equal(line, "stasis: GPU checkpoint of 2 CUDA processes... 1.2 s");
	progress_format(line, sizeof(line), "CRIU dump of 1 process", ":", 2.0, 3ull << 30,
			4ull << 30);
	assert_string_equal(line,
			    "stasis: CRIU dump of 1 process: 3.0 GiB of 4.0 GiB, 1.5 GiB/s, 2.0 s");
	/* Nothing done yet of a known total. */
	progress_format(line, sizeof(line), "GPU restore", "...", 1.0, 0, 1u << 20);
	assert_string_equal(line, "stasis: GPU restore... 0 B of 1.0 MiB, 0 B/s, 1.0 s");
	/* An estimate that fell short: the total is what was done. */
	progress_format(line, sizeof(line), "CRIU dump", ":", 1.0, 2u << 20, 1u << 20);
	assert_string_equal(line, "stasis: CRIU dump: 2.0 MiB of 2.0 MiB, 2.0 MiB/s, 1.0 s");
	/* Counted without a total, as a migration's stream. */
	progress_format(line, sizeof(line), "receiving", "...", 0.5, 1u << 20, 0);
	assert_string_equal(line, "stasis: receiving... 1.0 MiB, 2.0 MiB/s, 0.5 s");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_format),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
