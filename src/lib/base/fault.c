/* SPDX-License-Identifier: MIT */
#include "fault.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

bool fault_at(const char *step, pid_t pid)
{
	const char *spec = getenv("STASIS_FAULT");
	_cleanup_free_ char *copy = NULL;
	char *save = NULL;

	if (!spec || !*spec)
		return false;
	copy = strdup(spec);
	for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		char *colon = strchr(item, ':');

		if (colon)
			*colon = '\0';
		if (strcmp(item, step) != 0)
			continue;
		if (!colon || atoi(colon + 1) == (int)pid)
			return true;
	}
	return false;
}
