/* libFuzzer target: the bootstrap HTTP handlers (JSON bodies, query
 * strings, routes, methods) without sockets. Input: byte 0 picks the
 * request, then "query-or-auth\n" and the body. */
#include <stdlib.h>
#include <string.h>

#include "control/bootstrap.h"

static lc_bootstrap_t *server;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	lc_log_set_level(LC_LOG_OFF);
	lc_bootstrap_params_t p = {.size = sizeof p, .host = "127.0.0.1", .port = 0};
	if (lc_bootstrap_start(&p, &server))
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const method[] = {"PUT", "GET", "GET", "GET", "POST", "DELETE"};
	static const char *const path[] = {"/route",   "/route", "/health",
					   "/metrics", "/route", "/x"};
	if (!size)
		return 0;
	int k = data[0] % 6;
	const char *rest = (const char *)data + 1;
	size_t n = size - 1;
	const char *nl = memchr(rest, '\n', n);
	size_t head = nl ? (size_t)(nl - rest) : 0;
	char *line = malloc(head + 1);
	memcpy(line, rest, head);
	line[head] = '\0';
	const char *body = nl ? nl + 1 : rest;
	size_t body_len = nl ? n - head - 1 : n;
	char *resp = NULL;
	size_t resp_len = 0;
	int code = lc__bootstrap_handle(server, method[k], path[k], k == 0 ? NULL : line,
					k == 0 ? line : NULL, body, body_len, &resp, &resp_len);
	if (code < 200 || code > 599)
		abort();
	free(resp);
	free(line);
	return 0;
}
