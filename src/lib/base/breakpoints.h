/* SPDX-License-Identifier: MIT */
/* Do hardware breakpoints work here? CRIU's parasite injection waits for
 * one; in some VMs it never fires and CRIU hangs unless it runs in its
 * no-breakpoints mode (CRIU_FAULT=130). */
#ifndef STASIS_BREAKPOINTS_H
#define STASIS_BREAKPOINTS_H

#include <stdbool.h>

enum hw_breakpoints {
	HW_BREAKPOINTS_WORK,
	HW_BREAKPOINTS_BROKEN,
	HW_BREAKPOINTS_UNKNOWN, /* the probe itself could not run */
};

/* Probe once per boot; the answer is cached in the runtime directory. */
enum hw_breakpoints hw_breakpoints_probe(bool use_cache);

/* CRIU_FAULT for CRIU where they do not (criu-settings.h gives it) */
#define CRIU_FAULT_NO_BREAKPOINTS "130"

#endif
