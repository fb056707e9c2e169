/* SPDX-License-Identifier: MIT */
#include "run-work.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lock.h"
#include "util.h"

int run_work_make(const char *kind, char *out, size_t len, struct stasis_error **err)
{
	char stamp[32];
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	snprintf(out, len, "%s/%s-%s-%d", stasis_run_dir(), kind, stamp, (int)getpid());
	if (mkdir(out, 0700) < 0)
		return stasis_error_errno(err, errno, "making the %s's work folder %s: %s", kind,
					  out, strerror(errno));
	return 0;
}

void run_work_failed(const char *work, struct stasis_error **err)
{
	_cleanup_free_ char *hint = NULL;

	if (!work[0])
		return;
	if (dir_is_empty(work) == 0) {
		rmdir(work);
		return;
	}
	if (!err || !*err || ((*err)->hint && strstr((*err)->hint, work)))
		return;
	hint = (*err)->hint ? strdup((*err)->hint) : NULL;
	if (hint)
		stasis_error_hint(err, "%s; logs in %s", hint, work);
	else
		stasis_error_hint(err, "logs in %s", work);
}
