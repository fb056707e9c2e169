/* SPDX-License-Identifier: MIT */
/*
 * A parent and a child with 128 MiB of anonymous memory each, and 64 MiB
 * mapped before the fork that they share copy-on-write until the child
 * rewrites its second half: two tasks past stasis's CRIU's thresholds,
 * whose pages two page writers write side by side, and an inherited
 * mapping that the child's restore fills partly from its parent's pages.
 * Each process checks all of its memory after the restore.
 */
#include <sys/mman.h>
#include <sys/wait.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "zdtmtst.h"
#include "pattern.h"

const char *test_doc = "A parent and a child with 128 MiB each come back intact";
const char *test_author = "stasis developers";

#define OWN_BYTES (128UL << 20)
#define COW_BYTES (64UL << 20)
#define SEED_COW 0x636f772d73686172ULL
#define SEED_PARENT 0x706172656e742d31ULL
#define SEED_CHILD 0x6368696c642d3132ULL
#define SEED_CHILD_COW 0x6368696c642d636fULL

static void *map_anon(size_t bytes)
{
	void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (mem == MAP_FAILED) {
		pr_perror("mmap of %zu bytes", bytes);
		exit(1);
	}
	return mem;
}

/* Pages of mem that differ from the pattern, with a message for each part. */
static size_t check_part(const char *who, const char *what, void *mem, size_t from, size_t to,
			 uint64_t seed)
{
	size_t first_bad = 0, bad = pattern_check(mem, from, to, seed, 0, &first_bad);

	if (bad)
		test_msg("%s: %zu pages of its %s differ, the first at offset %#zx\n", who, bad,
			 what, first_bad * pattern_page_size());
	return bad;
}

/*
 * The child: its own 128 MiB and the second half of the shared mapping
 * rewritten; once ready it closes ready_fd, and once the parent closes the
 * other end of go_fd it checks its memory and writes '0' (all intact) or
 * '1' to result_fd.
 */
static void child(void *cow, int ready_fd, int go_fd, int result_fd)
{
	size_t own_pages = OWN_BYTES / pattern_page_size();
	size_t cow_pages = COW_BYTES / pattern_page_size();
	void *own = map_anon(OWN_BYTES);
	char x, result;
	size_t bad;

	pattern_fill(own, 0, own_pages, SEED_CHILD, 0);
	pattern_fill(cow, cow_pages / 2, cow_pages, SEED_CHILD_COW, 0);
	close(ready_fd);

	/* EOF once the parent is restored and told to check. */
	if (read(go_fd, &x, 1) != 0) {
		pr_perror("child: read of the go pipe");
		_exit(1);
	}

	bad = check_part("child", "own mapping", own, 0, own_pages, SEED_CHILD);
	bad += check_part("child", "shared half", cow, 0, cow_pages / 2, SEED_COW);
	bad += check_part("child", "rewritten half", cow, cow_pages / 2, cow_pages, SEED_CHILD_COW);
	result = bad ? '1' : '0';
	if (write(result_fd, &result, 1) != 1) {
		pr_perror("child: write of the result");
		_exit(1);
	}
	_exit(0);
}

int main(int argc, char **argv)
{
	size_t own_pages = OWN_BYTES / pattern_page_size();
	size_t cow_pages = COW_BYTES / pattern_page_size();
	int ready[2], go[2], result[2], status;
	size_t bad;
	void *cow, *own;
	char x = 'X';
	pid_t pid;

	test_init(argc, argv);

	cow = map_anon(COW_BYTES);
	pattern_fill(cow, 0, cow_pages, SEED_COW, 0);
	if (pipe(ready) || pipe(go) || pipe(result)) {
		pr_perror("pipe");
		return 1;
	}

	pid = fork();
	if (pid < 0) {
		pr_perror("fork");
		return 1;
	}
	if (pid == 0) {
		close(ready[0]);
		close(go[1]);
		close(result[0]);
		child(cow, ready[1], go[0], result[1]);
	}
	close(ready[1]);
	close(go[0]);
	close(result[1]);

	own = map_anon(OWN_BYTES);
	pattern_fill(own, 0, own_pages, SEED_PARENT, 0);
	/* EOF once the child has made its memory (or died: caught below). */
	if (read(ready[0], &x, 1) != 0) {
		pr_perror("read of the ready pipe");
		return 1;
	}

	test_daemon();
	test_waitsig();

	bad = check_part("parent", "own mapping", own, 0, own_pages, SEED_PARENT);
	bad += check_part("parent", "shared mapping", cow, 0, cow_pages, SEED_COW);
	close(go[1]);
	if (read(result[0], &x, 1) != 1)
		x = 'X';
	if (waitpid(pid, &status, 0) != pid) {
		pr_perror("waitpid");
		return 1;
	}

	if (bad)
		fail("the parent's memory differs");
	else if (x == 'X' || !WIFEXITED(status) || WEXITSTATUS(status))
		fail("the child gave no result (status %#x)", status);
	else if (x != '0')
		fail("the child's memory differs");
	else
		pass();
	return 0;
}
