/* The process-wide logger (level from LAYERCAKE_LOG, stderr by default),
 * the peer-triggered lines' rate limiter, reasons, and the thread-local
 * last error (lc_last_error). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#include "core/common.h"

_Atomic int lc__log_level = LC_LOG_WARN;

static pthread_mutex_t handler_lock = PTHREAD_MUTEX_INITIALIZER;
static lc_log_cb handler;
static void *handler_arg;

static const char *const level_names[] = {"off", "error", "warn", "info", "debug", "trace"};

int lc_log_level_parse(const char *text, lc_log_level_t *out)
{
	if (!text || !out)
		return LC__FAIL(-EINVAL, "lc_log_level_parse: %s is NULL", !text ? "text" : "out");
	for (int i = 0; i < (int)LC__ARRAY_SIZE(level_names); i++) {
		if (!strcasecmp(text, level_names[i]) || (text[0] == '0' + i && text[1] == '\0')) {
			*out = (lc_log_level_t)i;
			return 0;
		}
	}
	if (!strcasecmp(text, "warning")) {
		*out = LC_LOG_WARN;
		return 0;
	}
	lc__error_set(-EINVAL,
		      "log level '%.40s': expected off, error, warn, info, debug, trace "
		      "or 0..5",
		      text);
	return -EINVAL;
}

void lc_log_set_handler(lc_log_cb cb, void *arg)
{
	pthread_mutex_lock(&handler_lock);
	handler = cb;
	handler_arg = arg;
	pthread_mutex_unlock(&handler_lock);
}

void lc_log_set_level(lc_log_level_t level)
{
	if ((int)level < LC_LOG_OFF)
		level = LC_LOG_OFF;
	if (level > LC_LOG_TRACE)
		level = LC_LOG_TRACE;
	atomic_store(&lc__log_level, (int)level);
}

lc_log_level_t lc_log_get_level(void)
{
	return (lc_log_level_t)atomic_load(&lc__log_level);
}

void lc__vlog(lc_log_level_t level, const char *file, int line, uint64_t more, const char *fmt,
	      va_list ap)
{
	char msg[1024];
	const char *base = strrchr(file, '/');
	int n = snprintf(msg, sizeof msg,
			 "layercake %s [%d] %s:%d: ", level_names[level < 6 ? level : 5],
			 (int)getpid(), base ? base + 1 : file, line);
	if (n < 0)
		return;
	int m = vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
	if (more && m >= 0 && (size_t)n + (size_t)m < sizeof msg)
		snprintf(msg + n + m, sizeof msg - (size_t)n - (size_t)m, " (%llu more since last)",
			 (unsigned long long)more);

	pthread_mutex_lock(&handler_lock);
	lc_log_cb cb = handler;
	void *arg = handler_arg;
	pthread_mutex_unlock(&handler_lock);
	if (cb)
		cb(level, msg, arg);
	else
		fprintf(stderr, "%s\n", msg);
}

void lc__log(lc_log_level_t level, const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	lc__vlog(level, file, line, 0, fmt, ap);
	va_end(ap);
}

void lc__log_more(lc_log_level_t level, const char *file, int line, uint64_t more, const char *fmt,
		  ...)
{
	va_list ap;
	va_start(ap, fmt);
	lc__vlog(level, file, line, more, fmt, ap);
	va_end(ap);
}

bool lc__ratelimit_pass(lc__ratelimit_t *rl, uint64_t *more)
{
	uint64_t now = lc__now_ns();
	uint64_t next = atomic_load_explicit(&rl->next_ns, memory_order_relaxed);
	/* One thread wins the interval; the others count themselves held back. */
	if (now >= next &&
	    atomic_compare_exchange_strong(&rl->next_ns, &next, now + LC__LOG_PEER_INTERVAL_NS)) {
		*more = atomic_exchange(&rl->suppressed, 0);
		return true;
	}
	atomic_fetch_add_explicit(&rl->suppressed, 1, memory_order_relaxed);
	return false;
}

void lc__vreason(char *buf, size_t cap, const char *fmt, va_list ap)
{
	if (!buf || cap == 0)
		return;
	int n = vsnprintf(buf, cap, fmt, ap);
	if (n < 0 || (size_t)n < cap || cap < 16)
		return;
	/* Cut at the last word boundary that leaves room for "...": a space in
	 * the second half of the text; a single long token is cut where it is. */
	size_t keep = cap - 4, i = keep;
	while (i > keep / 2 && buf[i] != ' ')
		i--;
	if (i > keep / 2)
		keep = i;
	while (keep > 0 && (buf[keep - 1] == ' ' || buf[keep - 1] == ',' || buf[keep - 1] == ':'))
		keep--;
	memcpy(buf + keep, "...", 4);
}

void lc__reason(char *buf, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	lc__vreason(buf, cap, fmt, ap);
	va_end(ap);
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

static _Atomic uint64_t random_failures;

uint64_t lc__random_failures(void)
{
	return random_failures;
}

int lc__random_bytes(void *buf, size_t len)
{
	uint8_t *p = buf;
	size_t got = 0;
	while (got < len) {
		ssize_t n = getrandom(p + got, len - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = n < 0 && errno ? errno : EIO;
			random_failures++;
			LC__ERROR("getrandom failed (%s): no secret is made without it",
				  strerror(e));
			return -e;
		}
		got += (size_t)n;
	}
	return 0;
}

int lc__random_u64(uint64_t *out)
{
	uint64_t v;
	int rc = lc__random_bytes(&v, sizeof v);
	if (!rc)
		*out = v;
	return rc;
}
