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
	bool enabled, running, stop, shown;
	char what[160];
	uint64_t start;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	atomic_uint_fast64_t bytes; /* moved in this phase, when counted */
} progress = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

void progress_enable(bool on)
{
	progress.enabled = on;
}

/* "what... 1.2 s", with the bytes moved and their rate when counted. */
static void show_line(const char *sep)
{
	double secs = (double)(now_usec() - progress.start) / 1e6;
	uint64_t bytes = atomic_load(&progress.bytes);
	char moved[32], rate[32];

	if (!bytes) {
		fprintf(stderr, "\r\033[Kstasis: %s%s %.1f s", progress.what, sep, secs);
		return;
	}
	format_bytes(bytes, moved, sizeof(moved));
	format_bytes(secs > 0 ? (uint64_t)((double)bytes / secs) : 0, rate, sizeof(rate));
	fprintf(stderr, "\r\033[Kstasis: %s%s %s, %s/s, %.1f s", progress.what, sep, moved, rate,
		secs);
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
		wait_ms = TICK_MS;
	}
	pthread_mutex_unlock(&progress.lock);
	return NULL;
}

void progress_begin(const char *fmt, ...)
{
	va_list ap;

	if (!progress.enabled || progress.running)
		return;
	va_start(ap, fmt);
	vsnprintf(progress.what, sizeof(progress.what), fmt, ap);
	va_end(ap);
	progress.start = now_usec();
	atomic_store(&progress.bytes, 0);
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
	if (progress.shown) {
		show_line(":");
		fputc('\n', stderr);
	}
}
