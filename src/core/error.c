/* Error table, version, the thread-local last error. */
#include <string.h>

#include "core/common.h"

const char *lc_version(void)
{
	return "0.1.0";
}

int lc_version_number(void)
{
	return LC_VERSION_MAJOR * 10000 + LC_VERSION_MINOR * 100 + LC_VERSION_PATCH;
}

const char *lc_strerror(int code)
{
	switch (code) {
#define LC__ERR_TEXT(name, value, text)                                                            \
	case value:                                                                                \
		return text;
		LC_ERROR_CODES(LC__ERR_TEXT)
#undef LC__ERR_TEXT
	default:
		break;
	}
	if (code < 0 && code > -4096)
		return strerror(-code); /* glibc: static text for known values */
	return "unknown error";
}

const char *lc_err_name(int code)
{
	switch (code) {
#define LC__ERR_NAME(name, value, text)                                                            \
	case value:                                                                                \
		return #name;
		LC_ERROR_CODES(LC__ERR_NAME)
#undef LC__ERR_NAME
	default:
		return "LC_UNKNOWN";
	}
}

/* The calling thread's last failure with a reason (lc_last_error). */
static _Thread_local struct {
	int code;
	char text[512];
} last;

const char *lc_last_error(void)
{
	return last.text;
}

int lc_last_error_code(void)
{
	return last.code;
}

void lc_last_error_clear(void)
{
	last.code = 0;
	last.text[0] = '\0';
}

/* Through a copy: the arguments may include lc__why()'s text itself. */
static void error_vset(int rc, const char *fmt, va_list ap)
{
	char text[sizeof last.text];
	lc__vreason(text, sizeof text, fmt, ap);
	memcpy(last.text, text, sizeof text);
	last.code = rc;
}

const char *lc__why(int rc)
{
	return last.code == rc && last.text[0] ? last.text : lc_strerror(rc);
}

void lc__error_set(int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	error_vset(rc, fmt, ap);
	va_end(ap);
}

int lc__fail(int rc, lc_log_level_t level, const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	error_vset(rc, fmt, ap);
	va_end(ap);
	if ((int)level <= atomic_load_explicit(&lc__log_level, memory_order_relaxed))
		lc__log(level, file, line, "%s", last.text);
	return rc;
}
