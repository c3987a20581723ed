/*
 * The bootstrap client (libcurl): PUT /route for P ranks, GET /route and
 * /health for D, each try bounded by its timeout, with bounded retries on
 * connection errors and 5xx. Synchronous and thread-safe.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control/bootstrap_internal.h"

#ifdef LC__BS_BUILT
#include <curl/curl.h>

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

typedef struct body_sink {
	lc__sbuf_t s;
	bool too_big;
} body_sink_t;

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
	body_sink_t *b = arg;
	size_t len = size * n;
	if (b->s.len + len > (1u << 20)) {
		b->too_big = true;
		return 0;
	}
	lc__sb_printf(&b->s, "%.*s", (int)len, data);
	return b->s.oom ? 0 : len;
}

/* What a failed curl call was, for D's early word on a wrong address. */
static int curl_kind(CURLcode cc, long os_errno)
{
	switch (cc) {
	case CURLE_COULDNT_CONNECT:
		return os_errno == ECONNREFUSED ? LC__BS_FAIL_REFUSED : LC__BS_FAIL_UNREACHABLE;
	case CURLE_OPERATION_TIMEDOUT:
		return LC__BS_FAIL_TIMEOUT;
	case CURLE_WEIRD_SERVER_REPLY:
	case CURLE_UNSUPPORTED_PROTOCOL: /* "HTTP/0.9": bytes that are not HTTP */
	case CURLE_HTTP2:
	case CURLE_BAD_CONTENT_ENCODING:
		return LC__BS_FAIL_NOT_SERVER;
	default: /* resolve errors, resets, nothing sent back: maybe a busy server */
		return LC__BS_FAIL_UNREACHABLE;
	}
}

/* One request: the HTTP status (> 0) with the body, or < 0 with *kind
 * (enum lc__bs_fail) and curl's words in detail. */
static int http_once(const char *method, const char *url, const char *body, size_t body_len,
		     const char *auth, int timeout_ms, char **resp, size_t *resp_len, int *kind,
		     char *detail, size_t detail_cap)
{
	pthread_once(&curl_once, curl_init_once);
	*kind = LC__BS_FAIL_NONE;
	CURL *c = curl_easy_init();
	if (!c)
		return -ENOMEM;
	body_sink_t sink = {0};
	struct curl_slist *hdr = NULL;
	char authbuf[LC__BS_SECRET_MAX + 32], errbuf[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(c, CURLOPT_PROXY, "");
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
		hdr = curl_slist_append(hdr, "Content-Type: application/json");
	}
	if (!strcmp(method, "HEAD"))
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	hdr = curl_slist_append(hdr, "Expect:");
	if (auth) {
		snprintf(authbuf, sizeof authbuf, "Authorization: Bearer %s", auth);
		hdr = curl_slist_append(hdr, authbuf);
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	CURLcode cc = curl_easy_perform(c);
	long status = 0, os_errno = 0;
	int rc;
	if (cc == CURLE_OK) {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
		rc = (int)status;
	} else {
		curl_easy_getinfo(c, CURLINFO_OS_ERRNO, &os_errno);
		*kind = curl_kind(cc, os_errno);
		if (detail && detail_cap)
			snprintf(detail, detail_cap, "%s",
				 errbuf[0] ? errbuf : curl_easy_strerror(cc));
		LC__DEBUG("http %s %s: %s", method, url,
			  errbuf[0] ? errbuf : curl_easy_strerror(cc));
		rc = cc == CURLE_OPERATION_TIMEDOUT ? LC_ETIMEDOUT : LC_ERR_UNREACHABLE;
	}
	curl_slist_free_all(hdr);
	curl_easy_cleanup(c);
	if (rc > 0 && resp) {
		if (!sink.s.p)
			lc__sb_printf(&sink.s, "%s", "");
		*resp = sink.s.p;
		*resp_len = sink.s.len;
	} else {
		free(sink.s.p);
	}
	return rc;
}

int lc__http_request(const char *method, const char *url, const char *body, size_t body_len,
		     const char *auth, int timeout_ms, char **resp, size_t *resp_len)
{
	int kind;
	return http_once(method, url, body, body_len, auth, timeout_ms, resp, resp_len, &kind, NULL,
			 0);
}

/* A call's outcome: the HTTP status or < 0, and for a failed connection
 * its kind and curl's words. */
typedef struct http_out {
	int kind;
	char detail[CURL_ERROR_SIZE];
} http_out_t;

/* One request with bounded retries (connection errors and 5xx; never an
 * answer that is not HTTP: it will not change). */
static int http_retry(const char *method, const char *addr, const char *path_query,
		      const char *body, const lc__http_opts_t *o, char **resp, size_t *resp_len,
		      http_out_t *out)
{
	char url[LC__BS_HOST_MAX + 256];
	const char *hostport = !strncmp(addr, "http://", 7) ? addr + 7 : addr;
	snprintf(url, sizeof url, "http://%s%s", hostport, path_query);
	int timeout = o && o->timeout_ms > 0 ? o->timeout_ms : 2000;
	int retries = o && o->retries >= 0 ? LC__MIN(o->retries, 20) : 2;
	unsigned pause_ms = 50;
	int rc = LC_ERR_UNREACHABLE;
	out->kind = LC__BS_FAIL_NONE;
	out->detail[0] = '\0';
	for (int attempt = 0; attempt <= retries; attempt++) {
		if (attempt) {
			usleep(pause_ms * 1000);
			pause_ms = LC__MIN(pause_ms * 2, 1000u);
		}
		*resp = NULL;
		rc = http_once(method, url, body, body ? strlen(body) : 0, o ? o->secret : NULL,
			       timeout, resp, resp_len, &out->kind, out->detail,
			       sizeof out->detail);
		if ((rc > 0 && rc < 500) || out->kind == LC__BS_FAIL_NOT_SERVER)
			break;
		if (rc > 0 && attempt < retries)
			free(*resp);
	}
	if (rc > 0 && rc != 200)
		out->kind = LC__BS_FAIL_HTTP;
	if (o && o->fail)
		*o->fail = out->kind;
	return rc;
}

/* The words for a failed connection, by kind. */
static const char *kind_text(int kind)
{
	switch (kind) {
	case LC__BS_FAIL_REFUSED:
		return "connection refused (nothing listens there yet)";
	case LC__BS_FAIL_TIMEOUT:
		return "no answer (timeout)";
	default:
		return "unreachable";
	}
}

static int http_error(int code, const char *what, const char *addr, const char *resp,
		      const http_out_t *out, char *why, size_t cap)
{
	if (why && cap) {
		if (code < 0 && out->kind == LC__BS_FAIL_NOT_SERVER)
			snprintf(why, cap,
				 "not a bootstrap server at %s (its answer to %s is not HTTP: %s)",
				 addr, what, out->detail);
		else if (code < 0 && out->kind != LC__BS_FAIL_NONE)
			snprintf(why, cap, "%s at %s: %s: %s", what, addr, kind_text(out->kind),
				 out->detail);
		else if (code < 0)
			snprintf(why, cap, "%s: %s", what, lc_strerror(code));
		else
			snprintf(why, cap, "%s: HTTP %d: %.200s", what, code, resp ? resp : "");
	}
	if (code < 0)
		return code == LC_ETIMEDOUT ? LC_ERR_UNREACHABLE : code;
	if (code == 401)
		return LC_ERR_AUTH;
	if (code == 404)
		return -ENOENT;
	return LC_ERR_BOOTSTRAP;
}

/* The first bytes of an answer, printable, for a reason. */
static void printable(const char *s, char *out, size_t cap)
{
	size_t n = 0;
	for (; s && *s && n + 1 < cap; s++)
		out[n++] = *s >= 0x20 && *s < 0x7f && *s != '"' ? *s : '.';
	out[n] = '\0';
}

/* An answer that is no bootstrap server's: final (fail NOT_SERVER). */
static void __attribute__((format(printf, 4, 5)))
not_server(const lc__http_opts_t *o, char *why, size_t cap, const char *fmt, ...)
{
	if (o && o->fail)
		*o->fail = LC__BS_FAIL_NOT_SERVER;
	if (why && cap) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(why, cap, fmt, ap);
		va_end(ap);
	}
}

/* GET /health answers 200 (one try). */
static bool health_ok(const char *addr, const lc__http_opts_t *o)
{
	char *resp = NULL;
	size_t len = 0;
	lc__http_opts_t once = {.timeout_ms = o && o->timeout_ms > 0 ? o->timeout_ms : 2000};
	http_out_t out;
	int code = http_retry("GET", addr, "/health", NULL, &once, &resp, &len, &out);
	free(resp);
	return code == 200;
}

int lc__bootstrap_register(const char *addr, const lc__prefill_info_t *info,
			   const lc__http_opts_t *o, char *why, size_t why_cap)
{
	char *body = lc__bs_route_body(info, NULL, false);
	if (!body)
		return -ENOMEM;
	char *resp = NULL;
	size_t len = 0;
	http_out_t out;
	int code = http_retry("PUT", addr, "/route", body, o, &resp, &len, &out);
	free(body);
	int rc = code == 200 ? 0 : http_error(code, "PUT /route", addr, resp, &out, why, why_cap);
	free(resp);
	return rc;
}

int lc__bootstrap_get_parallel(const char *addr, const lc__http_opts_t *o, lc__parallel_info_t *out,
			       char *why, size_t why_cap)
{
	char *resp = NULL, head[48];
	size_t len = 0;
	http_out_t ho;
	int code = http_retry("GET", addr, "/route?engine_rank=-1&target_dp_group=-1", NULL, o,
			      &resp, &len, &ho);
	if (code == 404 && !health_ok(addr, o)) {
		/* Any web server says 404; a bootstrap server without P yet
		 * also answers /health (D started before P: it waits). */
		printable(resp, head, sizeof head);
		not_server(o, why, why_cap,
			   "not a bootstrap server at %s (HTTP 404 \"%s\" to GET /route, and "
			   "GET /health is not 200)",
			   addr, head);
		free(resp);
		return LC_ERR_BOOTSTRAP;
	}
	if (code != 200) {
		int rc = http_error(code, "GET /route (parallel info)", addr, resp, &ho, why,
				    why_cap);
		free(resp);
		return rc;
	}
	printable(resp, head, sizeof head);
	int rc = lc__bs_parse_parallel(resp, len, out);
	free(resp);
	if (rc) /* a 200 that is not the parallel info: it will not change */
		not_server(o, why, why_cap,
			   "not a bootstrap server at %s (its 200 to GET /route is not the "
			   "parallel info: \"%s\")",
			   addr, head);
	return rc;
}

int lc__bootstrap_get_rank(const char *addr, int tp_rank, int dp_group, const lc__http_opts_t *o,
			   lc__rank_info_t *out, char *why, size_t why_cap)
{
	char path[96];
	snprintf(path, sizeof path, "/route?engine_rank=%d&target_dp_group=%d", tp_rank, dp_group);
	char *resp = NULL;
	size_t len = 0;
	http_out_t ho;
	int code = http_retry("GET", addr, path, NULL, o, &resp, &len, &ho);
	if (code != 200) {
		int rc = http_error(code, "GET /route (rank)", addr, resp, &ho, why, why_cap);
		free(resp);
		return rc;
	}
	int rc = lc__bs_parse_rank(resp, len, out);
	free(resp);
	if (rc && why && why_cap)
		snprintf(why, why_cap, "GET %s: malformed reply", path);
	return rc;
}

int lc__bootstrap_health(const char *addr, const lc__http_opts_t *o)
{
	char *resp = NULL;
	size_t len = 0;
	lc__http_opts_t once = {.timeout_ms = o ? o->timeout_ms : 2000, .retries = 0};
	http_out_t out;
	int code = http_retry("GET", addr, "/health", NULL, &once, &resp, &len, &out);
	free(resp);
	return code == 200 ? 0 : code < 0 ? code : LC_ERR_BOOTSTRAP;
}

#else /* built without libmicrohttpd, json-c or libcurl */

int lc__bootstrap_register(const char *addr, const lc__prefill_info_t *info,
			   const lc__http_opts_t *o, char *why, size_t why_cap)
{
	return LC_ENOTSUP;
}
int lc__bootstrap_get_parallel(const char *addr, const lc__http_opts_t *o, lc__parallel_info_t *out,
			       char *why, size_t why_cap)
{
	return LC_ENOTSUP;
}
int lc__bootstrap_get_rank(const char *addr, int tp_rank, int dp_group, const lc__http_opts_t *o,
			   lc__rank_info_t *out, char *why, size_t why_cap)
{
	return LC_ENOTSUP;
}
int lc__bootstrap_health(const char *addr, const lc__http_opts_t *o)
{
	return LC_ENOTSUP;
}
int lc__http_request(const char *method, const char *url, const char *body, size_t body_len,
		     const char *auth, int timeout_ms, char **resp, size_t *resp_len)
{
	return LC_ENOTSUP;
}
#endif
