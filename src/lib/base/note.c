/* SPDX-License-Identifier: MIT */
#include "note.h"

#include <stdarg.h>
#include <stdio.h>

static stasis_note_fn handler;

void stasis_set_note_handler(stasis_note_fn fn)
{
	handler = fn;
}

void stasis_note(const char *fmt, ...)
{
	char text[1024];
	va_list ap;

	if (!handler)
		return;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	handler(text);
}
