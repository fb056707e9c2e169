/* SPDX-License-Identifier: MIT */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "namespaces.h"
#include "peer-limit.h"
#include "preflight-checks.h"
#include "preflight.h"
#include "shm-remap.h"

#define GIB (1ull << 30)

static void host_memory_numbers(void **state)
{
	struct stasis_error *err = NULL;

	(void)state;
	assert_int_equal(preflight_host_memory_fits(16 * GIB, 100 * GIB, "the machine", &err), 0);
	assert_null(err);
	/* The reserve counts: exactly the GPU bytes free is not enough. */
	assert_int_equal(preflight_host_memory_fits(16 * GIB, 16 * GIB, "the machine", &err),
			 -ENOMEM);
	assert_non_null(strstr(err->message, "16.0 GiB of GPU memory to copy"));
	assert_non_null(strstr(err->message, "16.0 GiB available"));
	stasis_error_free(err);
	err = NULL;
	assert_true(preflight_host_memory_fits(8 * GIB, 6 * GIB, "cgroup /job", &err) < 0);
	assert_non_null(strstr(err->message, "in cgroup /job"));
	stasis_error_free(err);
}

/* vm.dirty_bytes wins over vm.dirty_ratio, as in the kernel. */
static void dirty_limit_numbers(void **state)
{
	(void)state;
	assert_int_equal(preflight_dirty_limit(0, 20, 100 * GIB), 20 * GIB);
	assert_int_equal(preflight_dirty_limit(3 * GIB, 20, 100 * GIB), 3 * GIB);
	assert_int_equal(preflight_dirty_limit(0, 0, 100 * GIB), 0);
	assert_int_equal(preflight_dirty_limit(0, 40, 0), 0);
}

/* Where a --leave-running image goes, by the numbers of a 128 GiB machine
 * and of a stasis confined to a small cgroup. */
static void stage_decisions(void **state)
{
	struct image_estimate w1 = {.gpu = 16 * GIB, .host = GIB, .total = 18 * GIB};
	struct image_estimate big = {.gpu = 40 * GIB, .host = GIB, .total = 43 * GIB};
	struct stage_facts f = {.available = 120 * GIB,
				.own_room = UINT64_MAX,
				.dirty_ratio = 20,
				.stage_room = 60 * GIB};
	const char *page_cache = "the page cache takes the image below the dirty limit";

	(void)state;
	/* 20% of 104 GiB is 20.8 GiB: the page cache takes 18 GiB. */
	assert_string_equal(preflight_stage_decide(&w1, &f, false), page_cache);
	assert_null(preflight_stage_decide(&w1, &f, true));
	/* 20% of 80 GiB is 16 GiB: 43 GiB is staged, with room for it. */
	assert_null(preflight_stage_decide(&big, &f, false));
	f.stage_room = 40 * GIB;
	assert_string_equal(preflight_stage_decide(&big, &f, false),
			    "not enough room in the staging folder");
	f.stage_room = 60 * GIB;
	f.available = 80 * GIB;
	assert_string_equal(preflight_stage_decide(&big, &f, false),
			    "not enough free host memory to hold the image");
	/* stasis in a cgroup with 8 GiB left: its page cache is held to the disk
	 * sooner, and tmpfs there would get CRIU killed. */
	f.available = 120 * GIB;
	f.own_room = 8 * GIB;
	assert_string_equal(preflight_stage_decide(&w1, &f, true),
			    "not enough room under the memory limit of stasis's cgroup");
	f.own_room = 200 * GIB;
	f.dirty_bytes = 1 * GIB;
	assert_null(preflight_stage_decide(&w1, &f, false));
	/* Below the dirty limit, a process whose pages go in parts (8 writers
	 * of 64 MiB) is staged; one smaller, or no parts, is not. */
	f.dirty_bytes = 0;
	w1.largest = 17 * GIB;
	f.part_bytes = 512ull << 20;
	assert_null(preflight_stage_decide(&w1, &f, false));
	w1.largest = 511ull << 20;
	assert_string_equal(preflight_stage_decide(&w1, &f, false), page_cache);
	w1.largest = 17 * GIB;
	f.part_bytes = 0;
	assert_string_equal(preflight_stage_decide(&w1, &f, false), page_cache);
}

/* Without CUDA processes there is nothing to check. */
static void no_cuda_no_refusal(void **state)
{
	struct manifest m;
	struct manifest_process *p;
	struct stasis_error *err = NULL;

	(void)state;
	manifest_init(&m);
	p = manifest_add_process(&m);
	p->pid = getpid();
	p->gpu_bytes = 1ull << 60;
	assert_int_equal(preflight_host_memory(&m, &err), 0);
	/* The same process as a CUDA one with an impossible amount is refused. */
	p->cuda = true;
	assert_true(preflight_host_memory(&m, &err) < 0);
	assert_non_null(strstr(err->message, "not enough free host memory"));
	stasis_error_free(err);
	err = NULL;
	/* Through the table: refused by its cause. */
	assert_true(
	    preflight_tree_run(&(struct preflight_tree){.m = &m, .same_machine = true}, &err) < 0);
	assert_string_equal(err->cause, "host-memory");
	stasis_error_free(err);
	manifest_free(&m);
}

/* The codes scripts and stasis ps read: each once, in the order the
 * checks run. */
static void cause_codes(void **state)
{
	static const char *const tree[] = {"criu",	  "namespaces",	  "gpu-mode", "host-memory",
					   "peer-access", "device-files", "mappings", "nccl",
					   "sockets",	  "image-room"};
	struct preflight_process self = {.pid = getpid(), .comm = "test", .device_fds = 2};
	char why[256];

	(void)state;
	assert_int_equal(preflight_tree_nchecks, sizeof(tree) / sizeof(tree[0]));
	for (size_t i = 0; i < preflight_tree_nchecks; i++)
		assert_string_equal(preflight_tree_checks[i].cause, tree[i]);
	/* A process that holds the device without a context, in ps; none of
	 * it at gpu suspend, which only takes CUDA processes. */
	assert_string_equal(preflight_process_blocker(&self, why, sizeof(why)), "device-files");
	assert_non_null(strstr(why, "(2 fds)"));
	self.device_fds = 0;
	assert_null(preflight_process_blocker(&self, why, sizeof(why)));
	assert_string_equal(why, "");
	assert_int_equal(preflight_process_refuse(&self, NULL), 0);
}

/* The figures measured on two H200s (driver 580.159.04, a bare context
 * 520 MiB): 128, 256 and 384 MiB on each GPU with peer access restored, a
 * single 512 MiB allocation did not. */
static void peer_limit_numbers(void **state)
{
	const uint64_t mib = 1ull << 20, context = 520 * mib;

	(void)state;
	assert_false(peer_limit_may_hold(context + 128 * mib, context));
	assert_false(peer_limit_may_hold(context + 384 * mib, context));
	assert_true(peer_limit_may_hold(context + 512 * mib, context));
	assert_true(peer_limit_may_hold(context + 1024 * mib, context));
	/* A workload that shrank its context by cudaDeviceSetLimit. */
	assert_true(peer_limit_may_hold(context - 60 * mib + 512 * mib, context));
	/* A context of unknown size refuses from 512 MiB of use. */
	assert_false(peer_limit_may_hold(511 * mib, 0));
	assert_true(peer_limit_may_hold(512 * mib, 0));
}

/* The link-remap folder: only names of stasis's form, only a folder of
 * root's alone, removed only when empty. */
static void shm_remap_folder(void **state)
{
	const char *bad[] = {
	    "../../etc", "stasis-remap-ab/x1", "stasis-remap-abc1234", "stasis-remap-ab.12c", "",
	    "x"};
	struct stasis_error *err = NULL;
	char name[SHM_REMAP_NAME_MAX], path[64];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_true(shm_remap_check(bad[i], &err) < 0);
		assert_non_null(strstr(err->message, "no valid link-remap folder"));
		stasis_error_free(err);
		err = NULL;
	}
	assert_int_equal(shm_remap_make(name, &err), 0);
	assert_int_equal(shm_remap_check(name, &err), 0);
	snprintf(path, sizeof(path), "/dev/shm/%s", name);
	assert_int_equal(chmod(path, 0755), 0);
	assert_true(shm_remap_check(name, &err) < 0);
	assert_non_null(strstr(err->message, "no folder of root's alone"));
	stasis_error_free(err);
	err = NULL;
	shm_remap_remove(name);
	assert_true(shm_remap_check(name, &err) < 0);
	assert_non_null(strstr(err->message, "are gone"));
	stasis_error_free(err);
}

/* Namespaces as unshare makes them, judged against stasis's own. */
static struct proc_namespaces host_namespaces(void)
{
	struct proc_namespaces ns = {.ns_pid = 4242};

	for (int k = 0; k < NS_KINDS; k++)
		ns.ino[k] = 4026531830ul + (unsigned long)k;
	ns.ino[NS_PID_FOR_CHILDREN] = ns.ino[NS_PID];
	ns.ino[NS_TIME_FOR_CHILDREN] = ns.ino[NS_TIME];
	return ns;
}

static void namespace_verdicts(void **state)
{
	const struct proc_namespaces self = host_namespaces();
	struct proc_namespaces root = self, child = self;
	struct ns_verdict v;

	(void)state;
	v = namespaces_judge(&self, &root, &root, true, true, false);
	assert_int_equal(v.why, NS_RESTORES);
	/* A network, IPC, UTS and time namespace of the root's own restore. */
	root.ino[NS_NET] = root.ino[NS_IPC] = root.ino[NS_UTS] = 7;
	root.ino[NS_TIME] = root.ino[NS_TIME_FOR_CHILDREN] = 8;
	child = root;
	assert_int_equal(namespaces_judge(&self, &root, &root, true, true, false).why, NS_RESTORES);
	assert_int_equal(namespaces_judge(&self, &root, &child, false, true, false).why,
			 NS_RESTORES);
	/* User, mount and cgroup namespaces of its own are refused. */
	for (size_t i = 0; i < 3; i++) {
		const enum ns_kind lost[] = {NS_USER, NS_MNT, NS_CGROUP};
		struct proc_namespaces own = root;

		own.ino[lost[i]] = 9;
		v = namespaces_judge(&self, &own, &own, true, false, false);
		assert_int_equal(v.why, NS_OWN);
		assert_int_equal(v.kind, lost[i]);
	}
	/* A child in another namespace than the root's, of any kind. */
	child.ino[NS_NET] = 10;
	v = namespaces_judge(&self, &root, &child, false, false, false);
	assert_int_equal(v.why, NS_NESTED);
	assert_string_equal(namespaces_kind_name(v.kind), "net");
	/* A process whose children go into a new PID or time namespace. */
	child = root;
	child.ino[NS_PID_FOR_CHILDREN] = 11;
	v = namespaces_judge(&self, &root, &child, false, false, false);
	assert_int_equal(v.why, NS_FOR_CHILDREN);
	assert_int_equal(v.kind, NS_PID_FOR_CHILDREN);
	child = root;
	child.ino[NS_TIME_FOR_CHILDREN] = 12;
	assert_int_equal(namespaces_judge(&self, &root, &child, true, false, false).why,
			 NS_FOR_CHILDREN);
	/* A PID namespace: only from its first process, and no CUDA process
	 * unless the restore finds it by its PID inside. */
	root.ino[NS_PID] = root.ino[NS_PID_FOR_CHILDREN] = 13;
	root.ns_pid = 1;
	child = root;
	child.ns_pid = 2;
	assert_int_equal(namespaces_judge(&self, &root, &root, true, false, false).why,
			 NS_RESTORES);
	assert_int_equal(namespaces_judge(&self, &root, &child, false, false, false).why,
			 NS_RESTORES);
	assert_int_equal(namespaces_judge(&self, &root, &child, false, true, false).why,
			 NS_PID_CUDA);
	assert_int_equal(namespaces_judge(&self, &root, &child, false, true, true).why,
			 NS_RESTORES);
	assert_int_equal(namespaces_judge(&self, &child, &child, true, false, false).why,
			 NS_PID_NOT_FIRST);
	/* A kind this kernel lacks (0) is no difference. */
	child = self;
	child.ino[NS_TIME] = child.ino[NS_TIME_FOR_CHILDREN] = 0;
	assert_int_equal(namespaces_judge(&self, &self, &child, false, false, false).why,
			 NS_RESTORES);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(host_memory_numbers), cmocka_unit_test(dirty_limit_numbers),
	    cmocka_unit_test(stage_decisions),	   cmocka_unit_test(no_cuda_no_refusal),
	    cmocka_unit_test(peer_limit_numbers),  cmocka_unit_test(shm_remap_folder),
	    cmocka_unit_test(namespace_verdicts),  cmocka_unit_test(cause_codes),
	};

	return cmocka_run_group_tests_name("preflight", tests, NULL, NULL);
}
