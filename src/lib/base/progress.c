/* SPDX-License-Identifier: MIT */
#include "progress.h"

#include <pthread.h>
#include <stdarg.h>
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
} progress = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

void progress_enable(bool on)
{
	progress.enabled = on;
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
		fprintf(stderr, "\r\033[Kstasis: %s... %.1f s", progress.what,
			(double)(now_usec() - progress.start) / 1e6);
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
	if (progress.shown)
		fprintf(stderr, "\r\033[Kstasis: %s: %.1f s\n", progress.what,
			(double)(now_usec() - progress.start) / 1e6);
}
