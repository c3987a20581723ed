/*
 * The bootstrap service (docs/protocol.md, "HTTP routes"): the server's
 * life (libmicrohttpd), its metrics sources, and the bootstrap secret.
 * The request logic lives in lc__bootstrap_handle (bootstrap_routes.c) so
 * that the fuzzer and the tests can drive it without sockets;
 * bootstrap_internal.h lists the other files.
 */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "control/addr.h"
#include "control/bootstrap_internal.h"
#include "core/ctx.h"
#include "core/config.h"
#include "core/params.h"

#ifdef LC__BS_BUILT
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#endif

int lc__bootstrap_secret(const char *secret, char *out, size_t cap)
{
	if (secret && *secret) {
		if (strlen(secret) >= cap)
			return -ENAMETOOLONG;
		strcpy(out, secret);
		return 1;
	}
	const char *dir = lc__config_env_str(LC__CFGS_secret_dir);
	if (!dir)
		return 0;
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/bootstrap.secret", dir);
	FILE *f = fopen(path, "r");
	if (!f)
		return errno == ENOENT ? 0 : -errno;
	char line[LC__BS_SECRET_MAX];
	int rc = 0;
	if (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\r\n")] = '\0';
		if (*line && strlen(line) < cap) {
			strcpy(out, line);
			rc = 1;
		}
	}
	fclose(f);
	return rc;
}

#ifdef LC__BS_BUILT

/* ---- libmicrohttpd glue ---- */

typedef struct conn_state {
	char *body;
	size_t len;
	bool too_big;
	const char *bad_header; /* why the request's framing is refused, or NULL */
} conn_state_t;

typedef struct header_count {
	int content_length, transfer_encoding;
} header_count_t;

static enum MHD_Result count_headers(void *cls, enum MHD_ValueKind kind, const char *key,
				     const char *value)
{
	header_count_t *h = cls;
	if (key && !strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH))
		h->content_length++;
	else if (key && !strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING))
		h->transfer_encoding++;
	return MHD_YES;
}

/* Framing two parsers could read differently (request smuggling behind a
 * proxy): libmicrohttpd takes the first of two Content-Lengths and lets
 * chunked win over one. Refused here whatever the values. */
static const char *framing_bad(struct MHD_Connection *c)
{
	header_count_t h = {0};
	MHD_get_connection_values(c, MHD_HEADER_KIND, count_headers, &h);
	if (h.content_length > 1)
		return "more than one Content-Length header";
	if (h.content_length && h.transfer_encoding)
		return "Content-Length together with Transfer-Encoding";
	return NULL;
}

/* The reply to a request refused for its headers: 400, counted, logged. */
static int refuse_headers(lc_bootstrap_t *b, const char *why, char **resp, size_t *resp_len)
{
	LC__WARN_PEER("bootstrap: request refused (400): %s", why);
	pthread_mutex_lock(&b->lock);
	b->headers_invalid++;
	b->requests[CODE_400]++;
	pthread_mutex_unlock(&b->lock);
	return lc__bs_reply_text(resp, resp_len, 400, "%s", why);
}

static enum MHD_Result collect_query(void *cls, enum MHD_ValueKind kind, const char *key,
				     const char *value)
{
	lc__sbuf_t *q = cls;
	lc__sb_printf(q, "%s%s=%s", q->len ? "&" : "", key, value ? value : "");
	return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	lc_bootstrap_t *b = cls;
	conn_state_t *st = *con_cls;
	if (!st) {
		st = calloc(1, sizeof *st);
		if (!st)
			return MHD_NO;
		*con_cls = st;
		/* Refuse a declared oversize body before reading it. */
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
							     MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl && strtoull(cl, NULL, 10) > LC__BS_BODY_MAX)
			st->too_big = true;
		st->bad_header = framing_bad(c);
		return MHD_YES;
	}
	if (*upload_size) {
		if (st->bad_header) {
			/* Not kept: the reply is a 400 whatever it holds. */
		} else if (!st->too_big && st->len + *upload_size <= LC__BS_BODY_MAX) {
			char *nb = realloc(st->body, st->len + *upload_size + 1);
			if (!nb)
				return MHD_NO;
			st->body = nb;
			memcpy(st->body + st->len, upload, *upload_size);
			st->len += *upload_size;
			st->body[st->len] = '\0';
		} else {
			st->too_big = true;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	char *resp = NULL;
	size_t resp_len = 0;
	int code;
	if (st->bad_header) {
		code = refuse_headers(b, st->bad_header, &resp, &resp_len);
	} else if (st->too_big) {
		code = lc__bs_reply_text(&resp, &resp_len, 413, "body over %u bytes",
					 LC__BS_BODY_MAX);
		pthread_mutex_lock(&b->lock);
		b->requests[CODE_413]++;
		pthread_mutex_unlock(&b->lock);
	} else {
		lc__sbuf_t q = {0};
		MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, collect_query, &q);
		const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
							       MHD_HTTP_HEADER_AUTHORIZATION);
		code = lc__bootstrap_handle(b, method, url, q.oom ? NULL : q.p, auth, st->body,
					    st->len, &resp, &resp_len);
		free(q.p);
	}
	struct MHD_Response *r = MHD_create_response_from_buffer(resp_len, resp ? resp : (char *)"",
								 resp ? MHD_RESPMEM_MUST_FREE
								      : MHD_RESPMEM_PERSISTENT);
	if (!r) {
		free(resp);
		return MHD_NO;
	}
	const char *ctype = "text/plain; charset=utf-8";
	if (resp && resp[0] == '{')
		ctype = "application/json";
	else if (!strcmp(url, "/metrics") && code == 200)
		ctype = "text/plain; version=0.0.4; charset=utf-8";
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	if (st->too_big || st->bad_header)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
	enum MHD_Result ret = MHD_queue_response(c, (unsigned)code, r);
	MHD_destroy_response(r);
	return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	conn_state_t *st = *con_cls;
	if (st) {
		free(st->body);
		free(st);
		*con_cls = NULL;
	}
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[256];
	vsnprintf(line, sizeof line, fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	LC__DEBUG("bootstrap http: %s", line);
}

int lc_bootstrap_start(const lc_bootstrap_params_t *params, lc_bootstrap_t **out)
{
	lc_bootstrap_params_t p;
	lc_last_error_clear();
	if (!out)
		return LC__FAIL(-EINVAL, "lc_bootstrap_start: out is NULL");
	LC__PARAMS_COPY(&p, params);
	/* NULL params, or a struct too short to hold the port: the knob. */
	if (!params ||
	    (params->size && params->size < offsetof(lc_bootstrap_params_t, port) + sizeof p.port))
		p.port = -1;
	if (p.port < -1 || p.port > 65535)
		return LC__FAIL(-EINVAL, "lc_bootstrap_start: port %d outside -1..65535", p.port);
	lc_bootstrap_t *b = calloc(1, sizeof *b);
	if (!b)
		return -ENOMEM;
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->cond, NULL);
	b->ctx = p.ctx;
	snprintf(b->host, sizeof b->host, "%s", p.host && *p.host ? p.host : "0.0.0.0");
	int rc = lc__bootstrap_secret(p.secret, b->secret, sizeof b->secret);
	if (rc < 0) {
		LC__FAIL_AT(LC_LOG_ERROR, rc, "bootstrap: cannot read the secret: %s",
			    strerror(-rc));
		goto fail;
	}
	b->has_secret = rc == 1;
	int port = p.port;
	if (port < 0) {
		int64_t v = p.ctx ? lc__ctx_cfg(p.ctx, LC__CFG_bootstrap_port)
				  : lc__config_env_int(LC__CFG_bootstrap_port);
		port = (int)v;
	}
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_POLL;
	struct sockaddr *bind_sa = (struct sockaddr *)&sa;
	if (!strcmp(b->host, "*"))
		snprintf(b->host, sizeof b->host, "0.0.0.0");
	if (inet_pton(AF_INET6, b->host, &sa6.sin6_addr) == 1) {
		flags |= MHD_USE_IPv6;
		bind_sa = (struct sockaddr *)&sa6;
	} else if (inet_pton(AF_INET, b->host, &sa.sin_addr) != 1) {
		rc = LC__FAIL_AT(
			LC_LOG_ERROR, -EINVAL,
			"bootstrap: bind address '%s' is not a numeric IPv4 or IPv6 address",
			b->host);
		goto fail;
	}
	b->daemon = MHD_start_daemon(
		flags, (uint16_t)port,
		NULL, NULL, on_request, b, MHD_OPTION_SOCK_ADDR, bind_sa,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, b, MHD_OPTION_CONNECTION_LIMIT,
		(unsigned)256, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(32 * 1024), MHD_OPTION_EXTERNAL_LOGGER,
		mhd_log, NULL, MHD_OPTION_END);
	if (!b->daemon) {
		rc = errno ? -errno : -EADDRINUSE;
		LC__FAIL_AT(LC_LOG_ERROR, rc, "bootstrap: cannot listen on %s:%d: %s", b->host,
			    port, strerror(-rc));
		goto fail;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(b->daemon, MHD_DAEMON_INFO_BIND_PORT);
	b->port = di ? di->port : port;
	LC__INFO("bootstrap: listening on %s:%d%s", b->host, b->port,
		 b->has_secret ? " (PUT needs the secret)" : "");
	*out = b;
	return 0;
fail:
	pthread_cond_destroy(&b->cond);
	pthread_mutex_destroy(&b->lock);
	free(b);
	return rc;
}

void lc_bootstrap_stop(lc_bootstrap_t *b)
{
	if (!b)
		return;
	MHD_stop_daemon(b->daemon);
	free(b->ranks);
	pthread_cond_destroy(&b->cond);
	pthread_mutex_destroy(&b->lock);
	free(b);
}

int lc__bootstrap_source_add(lc_bootstrap_t *b, lc__metrics_source_fn fn, void *arg)
{
	int id = -ENOSPC;
	pthread_mutex_lock(&b->lock);
	if (b->nsources < LC__BS_MAX_SOURCES) {
		id = ++b->next_source_id;
		b->sources[b->nsources++] = (lc__bs_source_t){.id = id, .fn = fn, .arg = arg};
	}
	pthread_mutex_unlock(&b->lock);
	return id;
}

void lc__bootstrap_source_remove(lc_bootstrap_t *b, int id)
{
	pthread_mutex_lock(&b->lock);
	for (int i = 0; i < b->nsources; i++)
		if (b->sources[i].id == id) {
			b->sources[i] = b->sources[--b->nsources];
			break;
		}
	while (b->sources_busy)
		pthread_cond_wait(&b->cond, &b->lock);
	pthread_mutex_unlock(&b->lock);
}

#else /* built without libmicrohttpd, json-c or libcurl */

int lc_bootstrap_start(const lc_bootstrap_params_t *params, lc_bootstrap_t **out)
{
	return LC_ENOTSUP;
}
void lc_bootstrap_stop(lc_bootstrap_t *b)
{
}
int lc__bootstrap_source_add(lc_bootstrap_t *b, lc__metrics_source_fn fn, void *arg)
{
	return LC_ENOTSUP;
}
void lc__bootstrap_source_remove(lc_bootstrap_t *b, int id)
{
}
#endif

int lc_bootstrap_port(const lc_bootstrap_t *b)
{
#ifdef LC__BS_BUILT
	return b ? b->port : -EINVAL;
#else
	return -EINVAL;
#endif
}

int lc_bootstrap_addr(const lc_bootstrap_t *b, char *buf, size_t cap)
{
#ifdef LC__BS_BUILT
	if (!b || !buf)
		return LC__FAIL(-EINVAL, "lc_bootstrap_addr: %s is NULL", !b ? "bootstrap" : "buf");
	/* control/addr.h: the public address, the bound one, else (a wildcard
	 * bind, no peer known yet) this host's primary address. */
	char h[LC__BS_HOST_MAX], hp[LC__BS_HOST_MAX + 16];
	const char *pub = lc__addr_public();
	if (pub && *pub)
		snprintf(h, sizeof h, "%s", pub);
	else if (!lc__addr_is_wildcard(b->host))
		snprintf(h, sizeof h, "%s", b->host);
	else
		lc__addr_host_primary(h, sizeof h);
	lc__addr_join(h, b->port, hp, sizeof hp);
	int n = snprintf(buf, cap, "%s", hp);
	return n < 0 || (size_t)n >= cap ? -ENOSPC : n;
#else
	return -EINVAL;
#endif
}
