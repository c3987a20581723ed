/*
 * libFuzzer target: D's parsing of the bootstrap server's JSON replies
 * (lc__bootstrap_get_parallel, lc__bootstrap_get_rank), i.e. what a broken
 * or hostile bootstrap server can make a decode rank read. (The server's
 * own JSON parsing, PUT /route bodies, is fuzz_bootstrap.)
 *
 * The JSON parsing is not reachable apart from the HTTP client, so this
 * target replaces libcurl: the few curl_* functions bootstrap_client.c calls are
 * defined here (they win over the shared library at link time) and serve
 * the fuzz input as the reply. Everything from the reply bytes on is the
 * real code.
 *
 * Input: byte 0 picks the call (even: parallel layout, odd: rank), byte 1
 * the HTTP status (mostly 200), byte 2 how the body is split into write
 * callbacks; the rest is the body.
 *
 * Invariants beyond the sanitizers: a successful parse yields values
 * inside the documented bounds, and strings are NUL-terminated.
 */
#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "control/bootstrap.h"

static const uint8_t *reply;
static size_t reply_len, reply_piece;
static long reply_status;

typedef struct fake_curl {
	curl_write_callback write_cb;
	void *write_data;
} fake_curl_t;

CURLcode curl_global_init(long flags)
{
	(void)flags;
	return CURLE_OK;
}

CURL *curl_easy_init(void)
{
	return calloc(1, sizeof(fake_curl_t));
}

CURLcode curl_easy_setopt(CURL *c, CURLoption opt, ...)
{
	fake_curl_t *f = c;
	va_list ap;
	va_start(ap, opt);
	if (opt == CURLOPT_WRITEFUNCTION)
		f->write_cb = va_arg(ap, curl_write_callback);
	else if (opt == CURLOPT_WRITEDATA)
		f->write_data = va_arg(ap, void *);
	va_end(ap);
	return CURLE_OK;
}

CURLcode curl_easy_perform(CURL *c)
{
	fake_curl_t *f = c;
	for (size_t off = 0; off < reply_len;) {
		size_t n = reply_len - off < reply_piece ? reply_len - off : reply_piece;
		char buf[4096];
		memcpy(buf, reply + off, n);
		if (f->write_cb(buf, 1, n, f->write_data) != n)
			return CURLE_WRITE_ERROR;
		off += n;
	}
	return CURLE_OK;
}

CURLcode curl_easy_getinfo(CURL *c, CURLINFO info, ...)
{
	(void)c;
	va_list ap;
	va_start(ap, info);
	if (info == CURLINFO_RESPONSE_CODE)
		*va_arg(ap, long *) = reply_status;
	va_end(ap);
	return CURLE_OK;
}

void curl_easy_cleanup(CURL *c)
{
	free(c);
}

const char *curl_easy_strerror(CURLcode code)
{
	(void)code;
	return "fake curl";
}

struct curl_slist *curl_slist_append(struct curl_slist *list, const char *s)
{
	struct curl_slist *n = calloc(1, sizeof *n);
	n->data = strdup(s);
	if (!list)
		return n;
	struct curl_slist *t = list;
	while (t->next)
		t = t->next;
	t->next = n;
	return list;
}

void curl_slist_free_all(struct curl_slist *list)
{
	while (list) {
		struct curl_slist *n = list->next;
		free(list->data);
		free(list);
		list = n;
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	lc_log_set_level(LC_LOG_OFF);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const long codes[8] = {200, 200, 200, 200, 200, 404, 500, 401};
	if (size < 3 || size > (1u << 20))
		return 0;
	reply_status = codes[data[1] % 8];
	reply_piece = (size_t)data[2] * 16 + 1;
	reply = data + 3;
	reply_len = size - 3;
	char why[300];
	lc__http_opts_t o = {.timeout_ms = 100, .retries = 0};
	if (data[0] % 2 == 0) {
		static lc__parallel_info_t pi;
		if (lc__bootstrap_get_parallel("127.0.0.1:1", &o, &pi, why, sizeof why) == 0) {
			if (pi.world_size < 1 || pi.world_size > LC__BS_MAX_WORLD ||
			    pi.dp_size < 1 || pi.world_size % pi.dp_size ||
			    pi.nlens > LC__BS_MAX_LENS)
				abort();
		}
	} else {
		lc__rank_info_t ri;
		if (lc__bootstrap_get_rank("127.0.0.1:1", 0, 0, &o, &ri, why, sizeof why) == 0) {
			if (ri.rank_port < 1 || ri.rank_port > 65535 ||
			    !memchr(ri.rank_ip, 0, sizeof ri.rank_ip) || !ri.rank_ip[0] ||
			    !memchr(ri.curve_key, 0, sizeof ri.curve_key))
				abort();
		}
	}
	return 0;
}
