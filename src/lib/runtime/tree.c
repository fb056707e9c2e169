/* SPDX-License-Identifier: MIT */
/* A process tree, saved and restored by CRIU through its RPC interface.
 * CRIU notifies stasis while it holds the tree: at post-dump the image is
 * sealed before CRIU may kill the tree, and at post-restore the tree runs
 * only once the pages match their checksums. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "criu-rpc.h"
#include "shm-remap.h"
#include "fault.h"
#include "image.h"
#include "interrupt.h"
#include "proc.h"
#include "progress.h"
#include "steps.h"
#include "target.h"
#include "util.h"

#define TREE_GONE_WAIT_MS 5000

int checkpoint_preflight_tree(pid_t pid, bool shell_job, struct stasis_error **err)
{
	int r = proc_require(pid, err);

	if (r < 0)
		return r;
	if (proc_is_self_or_ancestor(pid)) {
		stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
				 "PID %d is stasis itself or one of its parents", (int)pid);
		return stasis_error_hint(err,
					 "checkpoint a process that stasis did not start from");
	}
	if (!shell_job && getsid(pid) != pid) {
		stasis_error_set(err, EINVAL, STASIS_DOMAIN_USAGE, 0,
				 "PID %d is not a session leader (its session is %d)", (int)pid,
				 (int)getsid(pid));
		return stasis_error_hint(err, "start it with setsid, or pass --shell-job");
	}
	return 0;
}

static int tree_find(struct target *t, struct stasis_error **err)
{
	int r = checkpoint_preflight_tree(t->checkpoint->pid, t->checkpoint->shell_job, err);

	if (r == 0)
		t->root = t->checkpoint->pid;
	return r;
}

static int tree_describe(struct target *t, struct manifest *m, struct stasis_error **err)
{
	int r;

	m->options.shell_job = t->checkpoint->shell_job;
	m->options.tcp_established = t->checkpoint->tcp_established;
	m->options.ext_unix_sk = t->checkpoint->ext_unix_sk;
	r = proc_tree_describe(t->root, m, err);
	/* The init of its own PID namespace: CRIU's image has the PIDs inside. */
	if (r == 0 && proc_ns_pid(t->root) == 1)
		for (size_t i = 0; i < m->nprocs; i++)
			m->procs[i].ns_pid = proc_ns_pid(m->procs[i].pid);
	return r;
}

/* What the post-dump notification needs. */
struct post_dump {
	const char *dir;
	struct manifest *m;
	struct stasis_error **err;
	struct image_follower *follower;
	struct image_packer *packer;
	uint64_t dump_start;
	int result;
	bool sealed;
};

/* The tree is still frozen here. Only once the image is on disk may CRIU
 * kill it; a non-zero answer makes CRIU resume the tree instead. With
 * leave_running the orchestration seals the image once the tree runs;
 * only the compression ends here, as CRIU's pipes hold references to the
 * tree's own pages until they are read. */
static int on_dump_notify(const char *action, void *ctx)
{
	struct post_dump *pd = ctx;

	if (strcmp(action, "post-dump") != 0)
		return 0;
	manifest_add_phase(pd->m, "criu_dump", now_usec() - pd->dump_start);
	progress_end();
	if (!pd->dir && !pd->packer)
		return 0;
	pd->result =
	    stasis_check_interrupted("sigterm-before-manifest", "writing the manifest", pd->err);
	if (pd->result == 0)
		pd->result = checkpoint_pack_finish(pd->packer, pd->m, pd->err);
	if (pd->result == 0 && pd->dir)
		pd->result = checkpoint_seal_image(pd->dir, pd->m, pd->follower, pd->err);
	pd->sealed = pd->result == 0 && pd->dir;
	return pd->result < 0 ? 1 : 0;
}

static int tree_dump(struct target *t, struct manifest *m, struct stasis_error **err)
{
	const struct stasis_checkpoint_options *o = t->checkpoint;
	struct post_dump state = {0}, *pd = &state;
	struct criu_dump_request req = {
	    .pid = t->root,
	    .images_dir = t->images,
	    .work_dir = t->work[0] ? t->work : NULL,
	    .log_file = "dump.log",
	    .log = &o->criu_log,
	    .leave_running = o->leave_running,
	    .shell_job = o->shell_job,
	    .tcp_established = o->tcp_established,
	    .ext_unix_sk = o->ext_unix_sk,
	    .link_remap = m->options.link_remap,
	    .link_remap_dir = m->options.link_remap_dir,
	    .settings = &t->criu,
	    .notify = on_dump_notify,
	    .notify_ctx = pd,
	};
	int r;

	pd->dir = o->leave_running ? NULL : t->dir;
	pd->m = m;
	pd->err = err;
	pd->result = 0;
	pd->sealed = false;
	pd->dump_start = now_usec();
	if (fault_at("criu-dump", 0))
		return stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, 0,
					"criu dump failed: injected fault");
	pd->follower = NULL;
	pd->packer = NULL;
	if (o->compress) {
		r = image_pack_start(t->dir, m->nprocs, &pd->packer, err);
		if (r < 0)
			return r;
		req.images_dir = image_pack_stage(pd->packer);
		req.work_dir = t->work[0] ? t->work : t->images;
	} else if (pd->dir) {
		/* Without the follower the seal hashes everything after the dump. */
		image_follow_start(t->dir, &pd->follower, NULL);
	}
	if (m->options.link_remap) {
		r = shm_remap_make(m->options.link_remap_dir, err);
		if (r < 0)
			return r;
	}
	progress_begin("CRIU dump of %zu process%s", m->nprocs, m->nprocs == 1 ? "" : "es");
	/* Compressed pages go through pipes: only their time is shown. */
	if (!o->compress)
		image_progress_pages(m, req.images_dir);
	/* Test-only: a dump long enough for its progress line. */
	if (fault_at("dump-slow", 0))
		usleep(1200000);
	r = criu_run_dump(&req, err);
	progress_end();
	/* A failed dump removed CRIU's links: the folder is empty then. */
	if (r < 0 && m->options.link_remap)
		shm_remap_remove(m->options.link_remap_dir);
	image_follow_free(pd->follower);
	image_pack_free(pd->packer);
	/* CRIU reports the refused notification; the cause is ours. */
	if (pd->result < 0)
		return pd->result;
	/* CRIU died once the image was sealed, before it could kill the tree. */
	if (r < 0 && pd->sealed)
		stasis_error_hint(err,
				  "the image in %s was sealed before: it is complete; the "
				  "tree runs on",
				  t->dir);
	return r;
}

/* Migration: CRIU holds the tree frozen in its post-dump notification
 * while the migration decides. */
struct held_dump {
	struct manifest *m;
	int (*held)(void *ctx);
	void *ctx;
	uint64_t dump_start;
	int result;
};

static int on_held_notify(const char *action, void *ctx)
{
	struct held_dump *hd = ctx;

	if (strcmp(action, "post-dump") != 0)
		return 0;
	progress_end();
	manifest_add_phase(hd->m, "criu_dump", now_usec() - hd->dump_start);
	hd->result = hd->held(hd->ctx);
	return hd->result < 0 ? 1 : 0;
}

static int tree_dump_held(struct target *t, struct manifest *m, int (*held)(void *ctx), void *ctx,
			  struct stasis_error **err)
{
	struct held_dump state = {0}, *hd = &state;
	struct criu_dump_request req = {
	    .pid = t->root,
	    .images_dir = t->images,
	    .work_dir = t->work[0] ? t->work : NULL,
	    .log_file = "dump.log",
	    .settings = &t->criu,
	    .notify = on_held_notify,
	    .notify_ctx = hd,
	};
	int r;

	hd->m = m;
	hd->held = held;
	hd->ctx = ctx;
	hd->result = 0;
	hd->dump_start = now_usec();
	if (fault_at("criu-dump", 0))
		return stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, 0,
					"criu dump failed: injected fault");
	progress_begin("CRIU dump of %zu process%s", m->nprocs, m->nprocs == 1 ? "" : "es");
	image_progress_pages(m, req.images_dir);
	r = criu_run_dump(&req, err);
	progress_end();
	/* CRIU reports the refused notification; the cause is ours. */
	return hd->result < 0 ? hd->result : r;
}

/* What the post-restore notification needs. */
struct post_restore {
	struct image_verifier *verifier;
	struct manifest *m;
	struct stasis_error **err;
	int result;
};

/* SIGINT and SIGTERM, which stop a restore. */
static void stop_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
}

/* Whether a signal to stop came: seen, or held back while CRIU restores. */
static bool stop_asked(void)
{
	sigset_t pending;

	return stasis_interrupted() ||
	       (sigpending(&pending) == 0 &&
		(sigismember(&pending, SIGINT) || sigismember(&pending, SIGTERM)));
}

/* The tree is restored but none of it runs yet: it may run only from an
 * image whose pages match their checksums, and not after a signal to
 * stop. Refused, CRIU kills it. */
static int on_restore_notify(const char *action, void *ctx)
{
	struct post_restore *pr = ctx;

	uint64_t start;

	if (strcmp(action, "post-restore") != 0)
		return 0;
	/* Test-only: time to kill or stop stasis while CRIU waits for it. */
	for (int i = 0; i < 300 && fault_at("restore-slow", 0) && !stop_asked(); i++)
		usleep(100000);
	if (stop_asked()) {
		stasis_error_set(pr->err, EINTR, STASIS_DOMAIN_SYSTEM, EINTR,
				 "interrupted by a signal during CRIU's restore");
		pr->result = stasis_error_hint(
		    pr->err, "the partly restored tree was killed; the image is intact");
		return 1;
	}
	start = now_usec();
	pr->result = image_verify_wait(pr->verifier, pr->err);
	manifest_add_phase(pr->m, "verify_wait", now_usec() - start);
	return pr->result < 0 ? 1 : 0;
}

/* CRIU fails when it cannot read a pages image, as when a compressed one
 * does not decompress: then the image is the cause to report. */
static int image_cause(struct image_verifier *v, int r, struct stasis_error **err)
{
	struct stasis_error *cause = NULL;

	if (image_verify_stop(v, &cause) == 0)
		return r;
	r = -cause->status;
	if (err) {
		stasis_error_free(*err);
		*err = cause;
	} else
		stasis_error_free(cause);
	return r;
}

/* The processes of a tree whose restore failed have their SIGKILL but
 * may still be tearing down their memory, and the root, restored as
 * stasis's child, waits to be reaped: a failed restore returns only once
 * none of them runs (bounded: a PID taken again meanwhile is not ours). */
static void tree_wait_gone(const struct manifest *m)
{
	pid_t root = manifest_root(m)->pid;

	for (int waited = 0; waited < TREE_GONE_WAIT_MS; waited += 10) {
		bool running = false;

		waitpid(root, NULL, WNOHANG);
		for (size_t i = 0; i < m->nprocs && !running; i++) {
			char state = proc_state(m->procs[i].pid);

			running = state && state != 'Z' && state != 'X';
		}
		if (!running)
			return;
		usleep(10000);
	}
}

static int tree_restore(struct target *t, struct manifest *m, struct image_verifier *verifier,
			pid_t *root, struct stasis_error **err)
{
	struct post_restore state = {0}, *pr = &state;
	struct criu_restore_request req = {
	    .images_dir = image_verifier_criu_dir(verifier),
	    .work_dir = t->work[0] ? t->work : t->dir,
	    .log_file = "restore.log",
	    .log = &t->restore->criu_log,
	    .detach = t->restore->detach,
	    .shell_job = m->options.shell_job,
	    .tcp_established = m->options.tcp_established,
	    .ext_unix_sk = m->options.ext_unix_sk,
	    .link_remap_dir = m->options.link_remap ? m->options.link_remap_dir : NULL,
	    .settings = &t->criu,
	    .notify = on_restore_notify,
	    .notify_ctx = pr,
	};
	sigset_t stop, before;
	int r;

	if (fault_at("criu-restore", 0))
		return stasis_error_set(err, EIO, STASIS_DOMAIN_CRIU, 0,
					"criu restore failed: injected fault");
	pr->verifier = verifier;
	pr->m = m;
	pr->err = err;
	pr->result = 0;
	progress_begin("CRIU restore of %zu process%s", m->nprocs, m->nprocs == 1 ? "" : "es");
	/* Ctrl-C reaches CRIU too (one process group), which would die of it
	 * halfway, its tree waiting for ever: held back meanwhile (CRIU
	 * inherits the mask), it is answered at the post-restore
	 * notification, and delivered after. */
	stop_signals(&stop);
	pthread_sigmask(SIG_BLOCK, &stop, &before);
	r = criu_run_restore(&req, root, err);
	pthread_sigmask(SIG_SETMASK, &before, NULL);
	progress_end();
	/* CRIU removed its links once the files were open again. */
	if (r == 0 && m->options.link_remap)
		shm_remap_remove(m->options.link_remap_dir);
	/* CRIU reports the refused notification; the cause is ours (its
	 * failure's hint, the log, is said by the restore's error). */
	if (pr->result == -EINTR)
		stasis_error_hint(err, "the partly restored tree was killed; the image is intact");
	if (pr->result < 0)
		r = pr->result;
	else if (r < 0)
		r = image_cause(verifier, r, err);
	image_verifier_record(verifier, m);
	/* Before the GPU restore, which needs the memory. */
	image_verifier_unstage(verifier);
	if (r < 0)
		tree_wait_gone(m);
	return r;
}

/* CRIU kills the tree after its own failure (tree_restore waits for it
 * to be gone); what is left to kill is a tree whose GPU restore failed. */
static void tree_destroy(struct target *t, struct manifest *m, pid_t root, bool restored,
			 struct stasis_error **err)
{
	if (!restored)
		return;
	for (size_t i = 0; i < m->nprocs; i++)
		if (m->procs[i].pid > 0)
			kill(m->procs[i].pid, SIGKILL);
	tree_wait_gone(m);
	if (err && *err && (*err)->status == EINTR) {
		stasis_error_hint(err, "the restored tree was killed; the image is intact");
		return;
	}
	stasis_error_wrap(err, "GPU restore failed");
	stasis_error_hint(err, "the half-restored tree was killed; the image is intact, restore "
			       "again once the cause is fixed");
}

const struct target_ops target_tree = {
    .compresses = true,
    .seals_in_dump = true,
    .same_pids = true,
    .verifies_in_restore = true,
    .restore_phase = "criu_restore",
    .find = tree_find,
    .describe = tree_describe,
    .dump = tree_dump,
    .dump_held = tree_dump_held,
    .restore = tree_restore,
    .destroy = tree_destroy,
};
