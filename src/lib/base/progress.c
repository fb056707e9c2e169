/* SPDX-License-Identifier: MIT */
#include "progress.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "util.h"

#define TICK_MS 250

static struct {
	enum progress_mode mode;
	bool running, stop, shown;
	char what[160];
	uint64_t start;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	atomic_uint_fast64_t bytes; /* moved in this phase, when counted */
	/* Under lock: the phase's size, and who counts what it moved. */
	uint64_t total;
	uint64_t (*poll)(void *arg);
	void *poll_arg;
} progress = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

void progress_enable(bool on)
{
	progress.mode = on ? PROGRESS_TERMINAL : PROGRESS_OFF;
}

void progress_set_mode(enum progress_mode mode)
{
	progress.mode = mode;
}

void progress_format(char *buf, size_t size, const char *what, const char *sep, double secs,
		     uint64_t done, uint64_t total)
{
	char moved[32], all[32], rate[32];

	if (!done && !total) {
		snprintf(buf, size, "stasis: %s%s %.1f s", what, sep, secs);
		return;
	}
	if (total && done > total)
		total = done; /* an estimate fell short */
	format_bytes(done, moved, sizeof(moved));
	format_bytes(secs > 0 ? (uint64_t)((double)done / secs) : 0, rate, sizeof(rate));
	if (total)
		snprintf(buf, size, "stasis: %s%s %s of %s, %s/s, %.1f s", what, sep, moved,
			 format_bytes(total, all, sizeof(all)), rate, secs);
	else
		snprintf(buf, size, "stasis: %s%s %s, %s/s, %.1f s", what, sep, moved, rate, secs);
}

/* The line as it stands; the caller holds the lock. */
static void show_line(const char *sep)
{
	double secs = (double)(now_usec() - progress.start) / 1e6;
	uint64_t bytes = atomic_load(&progress.bytes);
	char line[320];

	if (progress.poll) {
		uint64_t polled = progress.poll(progress.poll_arg);

		bytes = polled > bytes ? polled : bytes;
	}
	progress_format(line, sizeof(line), progress.what, sep, secs, bytes, progress.total);
	if (progress.mode == PROGRESS_TERMINAL)
		fprintf(stderr, "\r\033[K%s", line);
	else
		fprintf(stderr, "%s\n", line);
}

void progress_set_total(uint64_t total)
{
	pthread_mutex_lock(&progress.lock);
	progress.total = total;
	pthread_mutex_unlock(&progress.lock);
}

void progress_poll_bytes(uint64_t (*done)(void *arg), void *arg)
{
	pthread_mutex_lock(&progress.lock);
	progress.poll = done;
	progress.poll_arg = arg;
	pthread_mutex_unlock(&progress.lock);
}

void progress_add_bytes(uint64_t n)
{
	atomic_fetch_add(&progress.bytes, n);
}

static void *show(void *arg)
{
	unsigned int wait_ms = PROGRESS_DELAY_MS;

	(void)arg;
	pthread_mutex_lock(&progress.lock);
	while (!progress.stop) {
		struct timespec ts;

		deadline_in_usec(&ts, (uint64_t)wait_ms * 1000u);
		if (pthread_cond_timedwait(&progress.wake, &progress.lock, &ts) == 0)
			continue; /* woken: stop is set, or spurious */
		show_line("...");
		fflush(stderr);
		progress.shown = true;
		wait_ms = progress.mode == PROGRESS_LINES ? PROGRESS_LINES_MS : TICK_MS;
	}
	pthread_mutex_unlock(&progress.lock);
	return NULL;
}

void progress_begin(const char *fmt, ...)
{
	va_list ap;

	if (progress.mode == PROGRESS_OFF || progress.running)
		return;
	va_start(ap, fmt);
	vsnprintf(progress.what, sizeof(progress.what), fmt, ap);
	va_end(ap);
	progress.start = now_usec();
	atomic_store(&progress.bytes, 0);
	progress.total = 0;
	progress.poll = NULL;
	progress.poll_arg = NULL;
	progress.stop = progress.shown = false;
	progress.running = pthread_create(&progress.thread, NULL, show, NULL) == 0;
}

void progress_end(void)
{
	if (!progress.running)
		return;
	pthread_mutex_lock(&progress.lock);
	progress.stop = true;
	pthread_cond_signal(&progress.wake);
	pthread_mutex_unlock(&progress.lock);
	pthread_join(progress.thread, NULL);
	progress.running = false;
	pthread_mutex_lock(&progress.lock);
	if (progress.shown) {
		show_line(":");
		if (progress.mode == PROGRESS_TERMINAL)
			fputc('\n', stderr);
	}
	progress.poll = NULL;
	progress.total = 0;
	pthread_mutex_unlock(&progress.lock);
}
