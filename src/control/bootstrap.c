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
#include "control/shared_secret.h"
#include "core/ctx.h"
#include "core/config.h"
#include "core/params.h"

#ifdef LC__BS_BUILT
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#define REAPER_IDLE_NS 5000000000ull
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
	/* A file that is there but gives no secret (an empty first line, a
	 * folder by that name) is an operator's mistake: never read as "no
	 * secret", which would leave PUT /route open to anyone. */
	int rc = -ENODATA;
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

/* ---- connections: per source address and an absolute deadline ---- */

/* The address bytes of sa (IPv4-mapped IPv6 as IPv4), 0 when not IP. */
static size_t addr_key(const struct sockaddr *sa, unsigned char out[16])
{
	if (sa->sa_family == AF_INET) {
		memcpy(out, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return 4;
	}
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		if (IN6_IS_ADDR_V4MAPPED(a)) {
			memcpy(out, a->s6_addr + 12, 4);
			return 4;
		}
		memcpy(out, a, 16);
		return 16;
	}
	return 0;
}

static void addr_text(const unsigned char *a, size_t n, char *buf, size_t cap)
{
	if (!inet_ntop(n == 4 ? AF_INET : AF_INET6, a, buf, (socklen_t)cap))
		snprintf(buf, cap, "?");
}

/* libmicrohttpd's accept policy: refuse an address that holds
 * per_addr_max connections already (MHD's own per-IP limit counts no
 * refusals). Runs on MHD's thread, like notify_connection. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *sa, socklen_t len)
{
	lc_bootstrap_t *b = cls;
	unsigned char a[16];
	size_t n = addr_key(sa, a);
	if (!n)
		return MHD_YES;
	unsigned held = 0;
	pthread_mutex_lock(&b->lock);
	for (lc__bs_conn_t *c = b->conns; c; c = c->next)
		held += c->addr_len == n && !memcmp(c->addr, a, n);
	bool ok = held < b->per_addr_max;
	if (!ok) {
		uint64_t total = ++b->conns_refused_addr;
		char t[64];
		addr_text(a, n, t, sizeof t);
		LC__LOG_PEER(LC_LOG_WARN,
			     "bootstrap: refused a connection from %s: it holds %u already "
			     "(bootstrap_conns_per_addr; %llu refused so far)",
			     t, held, (unsigned long long)total);
	}
	pthread_mutex_unlock(&b->lock);
	return ok ? MHD_YES : MHD_NO;
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	lc_bootstrap_t *b = cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		lc__bs_conn_t *c = calloc(1, sizeof *c);
		const union MHD_ConnectionInfo *ai =
			MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		const union MHD_ConnectionInfo *fi =
			MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
		if (!c)
			return; /* untracked: neither limited nor timed; MHD's timeout holds */
		c->mhd = mc;
		c->fd = fi ? fi->connect_fd : -1;
		c->started_ns = lc__now_ns();
		c->addr_len = ai && ai->client_addr ? addr_key(ai->client_addr, c->addr) : 0;
		pthread_mutex_lock(&b->lock);
		c->next = b->conns;
		b->conns = c;
		if (b->reaper_idle) /* any other deadline it sleeps toward comes first */
			pthread_cond_signal(&b->reaper_cond);
		pthread_mutex_unlock(&b->lock);
		*socket_context = c;
	} else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
		/* Before MHD closes the fd: the reaper, under the lock, never
		 * shuts down an fd that is not this connection's. */
		pthread_mutex_lock(&b->lock);
		for (lc__bs_conn_t **pp = &b->conns; *pp; pp = &(*pp)->next)
			if (*pp == *socket_context) {
				*pp = (*pp)->next;
				break;
			}
		pthread_mutex_unlock(&b->lock);
		free(*socket_context);
		*socket_context = NULL;
	}
}

/* Shut down (not close: the fd stays libmicrohttpd's) every connection past
 * its absolute deadline; MHD then sees the end of it and closes it. A
 * trickle that keeps MHD's idle timeout alive does not outlive this. */
static void *reaper_main(void *arg)
{
	lc_bootstrap_t *b = arg;
	pthread_setname_np(pthread_self(), "lc-bs-reaper");
	pthread_mutex_lock(&b->lock);
	while (!b->reaper_stop) {
		uint64_t now = lc__now_ns(), next = UINT64_MAX;
		for (lc__bs_conn_t *c = b->conns; c; c = c->next) {
			if (c->shut || c->fd < 0)
				continue;
			if (now - c->started_ns < b->request_ns) {
				next = LC__MIN(next, c->started_ns + b->request_ns);
				continue;
			}
			c->shut = true;
			shutdown(c->fd, SHUT_RDWR);
			uint64_t total = ++b->conns_deadline;
			char t[64];
			addr_text(c->addr, c->addr_len, t, sizeof t);
			LC__LOG_PEER(LC_LOG_WARN,
				     "bootstrap: closed a connection from %s after %llu ms "
				     "(bootstrap_request_ms; %llu so far)",
				     c->addr_len ? t : "?",
				     (unsigned long long)((now - c->started_ns) / 1000000),
				     (unsigned long long)total);
		}
		/* Asleep until the earliest deadline; with none, until a
		 * connection starts (on_connection signals), so that an idle
		 * server costs no wake-ups. REAPER_IDLE_NS only bounds a wait. */
		b->reaper_idle = next == UINT64_MAX;
		next = LC__MIN(next, lc__now_ns() + REAPER_IDLE_NS);
		struct timespec ts = lc__abs_ts(next);
		pthread_cond_timedwait(&b->reaper_cond, &b->lock, &ts);
		b->reaper_idle = false;
	}
	pthread_mutex_unlock(&b->lock);
	return NULL;
}

static int reaper_start(lc_bootstrap_t *b)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&b->reaper_cond, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&b->reaper, NULL, reaper_main, b)) {
		pthread_cond_destroy(&b->reaper_cond);
		return -EAGAIN;
	}
	b->reaper_running = true;
	return 0;
}

static void reaper_stop(lc_bootstrap_t *b)
{
	if (!b->reaper_running)
		return;
	pthread_mutex_lock(&b->lock);
	b->reaper_stop = true;
	pthread_cond_signal(&b->reaper_cond);
	pthread_mutex_unlock(&b->lock);
	pthread_join(b->reaper, NULL);
	pthread_cond_destroy(&b->reaper_cond);
	b->reaper_running = false;
}

/* A knob from the server's context, else the environment. */
static int64_t knob(lc_bootstrap_t *b, enum lc__config_field f)
{
	return b->ctx ? lc__ctx_cfg(b->ctx, f) : lc__config_env_int(f);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[256];
	vsnprintf(line, sizeof line, fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	LC__DEBUG("bootstrap http: %s", line);
}

/* The PUT secrets (params, else $LAYERCAKE_SECRET_DIR; the shared secret's
 * bearer): 0, or the error, reported. */
static int secret_load(lc_bootstrap_t *b, const char *secret, const char *shared_param)
{
	lc__shared_t shared;
	int rc = lc__shared_load(shared_param, "bootstrap", &shared);
	if (rc < 0)
		return rc;
	if (rc == 1) {
		snprintf(b->bearer, sizeof b->bearer, "%s", shared.bearer);
		b->has_bearer = true;
	}
	lc__shared_wipe(&shared);
	rc = lc__bootstrap_secret(secret, b->secret, sizeof b->secret);
	if (rc == -ENODATA)
		return LC__FAIL_AT(
			LC_LOG_ERROR, rc,
			"bootstrap: $LAYERCAKE_SECRET_DIR/bootstrap.secret holds no secret "
			"(its first line is empty or unreadable): write one, or remove the file");
	if (rc < 0)
		return LC__FAIL_AT(LC_LOG_ERROR, rc, "bootstrap: cannot read the secret: %s",
				   strerror(-rc));
	b->has_explicit = rc == 1;
	b->has_secret = b->has_explicit || b->has_bearer;
	return 0;
}

int lc_bootstrap_start(const lc_bootstrap_params_t *params, lc_bootstrap_t **out)
{
	lc_bootstrap_params_t p;
	lc_last_error_clear();
	if (!out)
		return LC__FAIL(-EINVAL, "lc_bootstrap_start: out is NULL");
	LC__PARAMS_COPY(&p, params);
	/* NULL params, or a struct too short to hold the port: the knob (size
	 * 0 is this library's size, as LC__PARAMS_COPY took it). */
	if (!params || (params->size && LC__PARAMS_SHORT(params, lc_bootstrap_params_t, port)))
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
	int rc = secret_load(b, p.secret, p.shared_secret);
	if (rc < 0)
		goto fail;
	int port = p.port < 0 ? (int)knob(b, LC__CFG_bootstrap_port) : p.port;
	b->route_ttl_ms = (uint64_t)knob(b, LC__CFG_route_ttl_ms);
	b->per_addr_max = (unsigned)knob(b, LC__CFG_bootstrap_conns_per_addr);
	b->request_ns = (uint64_t)knob(b, LC__CFG_bootstrap_request_ms) * 1000000ull;
	/* MHD's idle timeout: whole seconds, within the absolute deadline. */
	unsigned idle_s =
		(unsigned)LC__MAX(1, LC__MIN(10, (int64_t)(b->request_ns / 1000000000ull)));
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
	if ((rc = reaper_start(b)))
		goto fail;
	b->daemon = MHD_start_daemon(
		flags, (uint16_t)port, on_accept, b, on_request, b, MHD_OPTION_SOCK_ADDR, bind_sa,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, b, MHD_OPTION_NOTIFY_CONNECTION,
		on_connection, b, MHD_OPTION_CONNECTION_LIMIT, (unsigned)256,
		MHD_OPTION_CONNECTION_TIMEOUT, idle_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
		(size_t)(32 * 1024), MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
	if (!b->daemon) {
		rc = errno ? -errno : -EADDRINUSE;
		LC__FAIL_AT(LC_LOG_ERROR, rc, "bootstrap: cannot listen on %s:%d: %s", b->host,
			    port, strerror(-rc));
		reaper_stop(b);
		goto fail;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(b->daemon, MHD_DAEMON_INFO_BIND_PORT);
	b->port = di ? di->port : port;
	LC__INFO("bootstrap: listening on %s:%d%s", b->host, b->port,
		 b->has_secret ? " (PUT needs the secret)" : "");
	if (!b->has_secret)
		lc__shared_warn_open("bootstrap", b->host, "PUT /route (P ranks' routes)");
	*out = b;
	return 0;
fail:
	pthread_cond_destroy(&b->cond);
	pthread_mutex_destroy(&b->lock);
	memset(b->secret, 0, sizeof b->secret);
	memset(b->bearer, 0, sizeof b->bearer);
	free(b);
	return rc;
}

void lc_bootstrap_stop(lc_bootstrap_t *b)
{
	if (!b)
		return;
	MHD_stop_daemon(b->daemon); /* notifies every connection closed */
	reaper_stop(b);
	while (b->conns) { /* none, unless a notification was missed */
		lc__bs_conn_t *c = b->conns;
		b->conns = c->next;
		free(c);
	}
	free(b->ranks);
	pthread_cond_destroy(&b->cond);
	pthread_mutex_destroy(&b->lock);
	memset(b->secret, 0, sizeof b->secret);
	memset(b->bearer, 0, sizeof b->bearer);
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
