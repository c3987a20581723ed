/* ZeroMQ inboxes (PULL), peer sockets (PUSH) and the CURVE/ZAP setup. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/addr.h"
#include "control/bootstrap.h"
#include "control/channel.h"
#include "control/codec.h"
#include "control/inbox_guard.h"
#include "control/shared_secret.h"
#include "core/config.h"

#ifdef LC_HAVE_ZMQ
#include <zmq.h>

#define MAX_KEYS 256

struct lc__zctx {
	void *zmq;
	bool curve;
	char public_key[LC__CHAN_KEY_LEN + 1];
	char secret_key[LC__CHAN_KEY_LEN + 1];
	char shared_key[LC__CHAN_KEY_LEN + 1]; /* the shared secret's public key, or "" */
	/* Authorized client keys (binary). Immutable once the ZAP thread runs. */
	uint8_t keys[MAX_KEYS][32];
	int nkeys;
	pthread_t zap_thread;
	bool zap_running;
	_Atomic bool zap_stop;
	_Atomic uint64_t auth_refused;
	int push_hb_ms; /* > 0: PUSH sockets are watched (lc__zctx_watch_pushes) */
	int push_hb_timeout_ms;
};

struct lc__pull {
	void *sock;
	lc__inbox_guard_t *guard; /* connection caps (control/inbox_guard.h) */
	/* Where the last message received came from, for lc__pull_vouch:
	 * libzmq's fd of its connection (-1: unknown) and Peer-Address. */
	int src_fd;
	char src_addr[64];
};

struct lc__push {
	pthread_mutex_t lock; /* serialises every use of sock, mon and up */
	void *sock;
	void *mon; /* watched: the PAIR end of sock's monitor, else NULL */
	bool up;   /* watched: handshake done and not dropped since */
};

/* Monitor endpoints are unique per process: a closed socket's inproc name
 * may still be bound for a moment after zmq_close. */
static _Atomic uint64_t mon_seq;

/* Read the first line of dir/name into out[cap]; 1 ok, 0 absent, < 0. */
static int read_line(const char *dir, const char *name, char *out, size_t cap)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "r");
	if (!f)
		return errno == ENOENT ? 0 : -errno;
	int rc = fgets(out, (int)cap, f) ? 1 : -EINVAL;
	fclose(f);
	if (rc == 1)
		out[strcspn(out, "\r\n")] = '\0';
	return rc;
}

static int add_key(lc__zctx_t *z, const char *z85)
{
	if (strlen(z85) != LC__CHAN_KEY_LEN || z->nkeys >= MAX_KEYS ||
	    !zmq_z85_decode(z->keys[z->nkeys], z85))
		return -EINVAL;
	z->nkeys++;
	return 0;
}

/* The keypair of the shared secret (shared_secret.h): this process's own
 * when $LAYERCAKE_SECRET_DIR holds none, and accepted as a peer's always. */
static int use_shared(lc__zctx_t *z, const lc__shared_t *shared)
{
	if (!zmq_has("curve")) {
		LC__ERROR("channel: a shared secret is set but libzmq lacks CURVE");
		return LC_ENOTSUP;
	}
	memcpy(z->shared_key, shared->curve_public, LC__CHAN_KEY_LEN + 1);
	if (!z->curve) {
		memcpy(z->public_key, shared->curve_public, LC__CHAN_KEY_LEN + 1);
		memcpy(z->secret_key, shared->curve_secret, LC__CHAN_KEY_LEN + 1);
	}
	if (add_key(z, shared->curve_public))
		return -EINVAL;
	z->curve = true;
	return 0;
}

static int load_curve(lc__zctx_t *z, const lc__shared_t *shared)
{
	const char *dir = lc__config_env_str(LC__CFGS_secret_dir);
	bool with_shared = shared && shared->set && shared->curve_public[0];
	if (!dir)
		return with_shared ? use_shared(z, shared) : 0;
	char line[128], pub[128], sec[128];
	int a = read_line(dir, "curve.public", pub, sizeof pub);
	int b = read_line(dir, "curve.secret", sec, sizeof sec);
	if (a < 0 || b < 0)
		return a < 0 ? a : b;
	if (!a || !b) {
		if (with_shared)
			return use_shared(z, shared);
		LC__INFO("channel: no CURVE keypair in %s, control plane unauthenticated", dir);
		return 0;
	}
	if (strlen(pub) != LC__CHAN_KEY_LEN || strlen(sec) != LC__CHAN_KEY_LEN) {
		LC__ERROR("channel: malformed CURVE key files in %s", dir);
		return -EINVAL;
	}
	memcpy(z->public_key, pub, LC__CHAN_KEY_LEN + 1);
	memcpy(z->secret_key, sec, LC__CHAN_KEY_LEN + 1);
	memset(sec, 0, sizeof sec);
	if (!zmq_has("curve")) {
		LC__ERROR("channel: CURVE keys configured but libzmq lacks CURVE");
		return LC_ENOTSUP;
	}
	if (add_key(z, z->public_key) || strlen(z->secret_key) != LC__CHAN_KEY_LEN) {
		LC__ERROR("channel: malformed CURVE key files in %s", dir);
		return -EINVAL;
	}
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/authorized_keys", dir);
	FILE *f = fopen(path, "r");
	if (f) {
		while (fgets(line, sizeof line, f)) {
			line[strcspn(line, "\r\n")] = '\0';
			if (line[0] && line[0] != '#' && add_key(z, line))
				LC__WARN("channel: ignoring malformed key in %s", path);
		}
		fclose(f);
	}
	z->curve = true;
	return with_shared ? use_shared(z, shared) : 0;
}

/* ZAP (RFC 27): accept CURVE clients whose key is authorized. */
static void *zap_main(void *arg)
{
	pthread_setname_np(pthread_self(), "lc-zap");
	lc__zctx_t *z = arg;
	void *rep = zmq_socket(z->zmq, ZMQ_REP);
	int linger = 0;
	zmq_setsockopt(rep, ZMQ_LINGER, &linger, sizeof linger);
	if (zmq_bind(rep, "inproc://zeromq.zap.01")) {
		LC__ERROR("channel: ZAP bind failed: %s", zmq_strerror(zmq_errno()));
		zmq_close(rep);
		return NULL;
	}
	while (!atomic_load(&z->zap_stop)) {
		zmq_pollitem_t it = {.socket = rep, .events = ZMQ_POLLIN};
		if (zmq_poll(&it, 1, 100) <= 0)
			continue;
		zmq_msg_t part[8];
		int n = 0, more = 1;
		while (more && n < 8) {
			zmq_msg_init(&part[n]);
			if (zmq_msg_recv(&part[n], rep, 0) < 0) {
				zmq_msg_close(&part[n]);
				break;
			}
			more = zmq_msg_more(&part[n]);
			n++;
		}
		while (more) { /* drain an over-long request */
			zmq_msg_t x;
			zmq_msg_init(&x);
			if (zmq_msg_recv(&x, rep, 0) < 0)
				more = 0;
			else
				more = zmq_msg_more(&x);
			zmq_msg_close(&x);
		}
		bool ok = false;
		if (n >= 7 && zmq_msg_size(&part[5]) == 5 &&
		    !memcmp(zmq_msg_data(&part[5]), "CURVE", 5) && zmq_msg_size(&part[6]) == 32) {
			for (int k = 0; k < z->nkeys && !ok; k++)
				ok = !memcmp(z->keys[k], zmq_msg_data(&part[6]), 32);
		}
		if (!ok) {
			atomic_fetch_add(&z->auth_refused, 1);
			LC__WARN_PEER("channel: refused a control-plane peer with an unknown key");
		}
		/* The user id is the client's key in z85: every message from it
		 * carries it ("User-Id"), so that what a peer declares about its
		 * key can be checked against what it authenticated with. */
		char user[LC__CHAN_KEY_LEN + 1] = "";
		if (ok && !zmq_z85_encode(user, zmq_msg_data(&part[6]), 32))
			user[0] = '\0';
		const char *code = ok ? "200" : "400";
		zmq_send(rep, "1.0", 3, ZMQ_SNDMORE);
		if (n >= 2)
			zmq_send(rep, zmq_msg_data(&part[1]), zmq_msg_size(&part[1]), ZMQ_SNDMORE);
		else
			zmq_send(rep, "", 0, ZMQ_SNDMORE);
		zmq_send(rep, code, 3, ZMQ_SNDMORE);
		zmq_send(rep, ok ? "OK" : "unknown key", ok ? 2 : 11, ZMQ_SNDMORE);
		zmq_send(rep, user, strlen(user), ZMQ_SNDMORE);
		zmq_send(rep, "", 0, 0);
		for (int i = 0; i < n; i++)
			zmq_msg_close(&part[i]);
	}
	zmq_close(rep);
	return NULL;
}

int lc__zctx_create(const lc__shared_t *shared, lc__zctx_t **out)
{
	lc__zctx_t *z = calloc(1, sizeof *z);
	if (!z)
		return -ENOMEM;
	int rc = load_curve(z, shared);
	if (rc)
		goto fail;
	z->zmq = zmq_ctx_new();
	if (!z->zmq) {
		rc = -ENOMEM;
		goto fail;
	}
	zmq_ctx_set(z->zmq, ZMQ_IO_THREADS, 1);
	zmq_ctx_set(z->zmq, ZMQ_BLOCKY, 0);
	if (z->curve) {
		if (pthread_create(&z->zap_thread, NULL, zap_main, z)) {
			rc = -EAGAIN;
			goto fail_ctx;
		}
		z->zap_running = true;
	}
	*out = z;
	return 0;
fail_ctx:
	zmq_ctx_term(z->zmq);
fail:
	memset(z->secret_key, 0, sizeof z->secret_key);
	free(z);
	return rc;
}

void lc__zctx_destroy(lc__zctx_t *z)
{
	if (!z)
		return;
	if (z->zap_running) {
		atomic_store(&z->zap_stop, true);
		pthread_join(z->zap_thread, NULL);
	}
	zmq_ctx_term(z->zmq);
	memset(z->secret_key, 0, sizeof z->secret_key);
	free(z);
}

const char *lc__zctx_public_key(const lc__zctx_t *z)
{
	return z->curve ? z->public_key : "";
}

bool lc__zctx_shared_key(const lc__zctx_t *z, const char *z85)
{
	return z->shared_key[0] && z85 && !strcmp(z85, z->shared_key);
}

uint64_t lc__zctx_auth_refused(const lc__zctx_t *z)
{
	return atomic_load(&((lc__zctx_t *)z)->auth_refused);
}

void lc__zctx_watch_pushes(lc__zctx_t *z, int ivl_ms, int timeout_ms)
{
	z->push_hb_ms = ivl_ms > 0 ? ivl_ms : 0;
	z->push_hb_timeout_ms = timeout_ms > ivl_ms ? timeout_ms : ivl_ms;
}

static void common_opts(void *s)
{
	int linger = LC__CHAN_LINGER_MS, one = 1;
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
	zmq_setsockopt(s, ZMQ_TCP_KEEPALIVE, &one, sizeof one);
	/* IPv6 literals connect and bind; a wildcard bind is dual-stack. */
	zmq_setsockopt(s, ZMQ_IPV6, &one, sizeof one);
}

int lc__pull_bind(lc__zctx_t *z, const char *host, lc__pull_t **out, char *endpoint, size_t cap)
{
	lc__pull_t *p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	p->src_fd = -1;
	p->sock = zmq_socket(z->zmq, ZMQ_PULL);
	if (!p->sock) {
		free(p);
		return -zmq_errno();
	}
	common_opts(p->sock);
	int hwm = LC__CHAN_RCVHWM;
	int64_t maxsize = LC__MSG_MAX;
	zmq_setsockopt(p->sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
	zmq_setsockopt(p->sock, ZMQ_MAXMSGSIZE, &maxsize, sizeof maxsize);
	/* A connection that has not finished its ZMTP handshake by then is
	 * dropped by libzmq (inbox_guard.h: why this and not ZAP). */
	int hs = (int)lc__config_env_int(LC__CFG_inbox_handshake_ms);
	zmq_setsockopt(p->sock, ZMQ_HANDSHAKE_IVL, &hs, sizeof hs);
	/* A short accept queue: what a flood gets accepted at once, before
	 * the guard refuses it, holds descriptors until libzmq closes it. */
	int backlog = LC__CHAN_BACKLOG;
	zmq_setsockopt(p->sock, ZMQ_BACKLOG, &backlog, sizeof backlog);
	int rc = lc__inbox_guard_start(z->zmq, p->sock, &p->guard);
	if (rc) {
		LC__ERROR("channel: cannot watch an inbox's connections: %s", zmq_strerror(-rc));
		zmq_close(p->sock);
		free(p);
		return rc;
	}
	if (z->curve) {
		int one = 1;
		zmq_setsockopt(p->sock, ZMQ_CURVE_SERVER, &one, sizeof one);
		zmq_setsockopt(p->sock, ZMQ_CURVE_SECRETKEY, z->secret_key, LC__CHAN_KEY_LEN);
		zmq_setsockopt(p->sock, ZMQ_ZAP_DOMAIN, "layercake", 9);
	}
	/* A wildcard (control/addr.h): "*", every address, IPv4 and IPv6. */
	char ep[300];
	bool v6 = host && strchr(host, ':') && !lc__addr_is_wildcard(host);
	snprintf(ep, sizeof ep, "tcp://%s%s%s:*", v6 ? "[" : "",
		 lc__addr_is_wildcard(host) ? "*" : host, v6 ? "]" : "");
	if (zmq_bind(p->sock, ep)) {
		int e = zmq_errno();
		LC__ERROR("channel: cannot bind %s: %s", ep, zmq_strerror(e));
		lc__pull_close(p);
		return -e;
	}
	char last[300];
	size_t n = sizeof last;
	zmq_getsockopt(p->sock, ZMQ_LAST_ENDPOINT, last, &n);
	if (strlen(last) >= cap) {
		lc__pull_close(p);
		return -ENOSPC;
	}
	/* With ZMQ_IPV6 an IPv4 bind reads back as [::ffff:a.b.c.d]. */
	if (!strncmp(last, "tcp://[::ffff:", 14) && strchr(last + 14, '.')) {
		char *rb = strchr(last, ']');
		if (rb) {
			memmove(last + 6, last + 14, (size_t)(rb - (last + 14)));
			memmove(last + 6 + (rb - (last + 14)), rb + 1, strlen(rb + 1) + 1);
		}
	}
	strcpy(endpoint, last);
	*out = p;
	return 0;
}

void *lc__pull_socket(lc__pull_t *p)
{
	return p->sock;
}

int lc__pull_recv(lc__pull_t *p, void **buf, size_t *len)
{
	return lc__pull_recv_from(p, buf, len, NULL, 0);
}

int lc__pull_recv_from(lc__pull_t *p, void **buf, size_t *len, char *peer_key, size_t cap)
{
	zmq_msg_t m;
	zmq_msg_init(&m);
	int rc = zmq_msg_recv(&m, p->sock, ZMQ_DONTWAIT);
	if (rc < 0) {
		int e = zmq_errno();
		zmq_msg_close(&m);
		return e == EAGAIN ? 0 : -e;
	}
	if (peer_key && cap) {
		const char *user = zmq_msg_gets(&m, "User-Id");
		snprintf(peer_key, cap, "%s", user ? user : "");
	}
	/* "__fd" is libzmq's own (ZMQ_SRCFD's, deprecated as an option, kept
	 * as a property): read here, with the address, for a vouch. */
	const char *fd = zmq_msg_gets(&m, "__fd");
	const char *addr = zmq_msg_gets(&m, "Peer-Address");
	p->src_fd = fd && addr ? atoi(fd) : -1;
	snprintf(p->src_addr, sizeof p->src_addr, "%s", addr ? addr : "");
	/* Multi-part messages are not ours: drain and report an empty one. */
	bool multi = zmq_msg_more(&m);
	while (zmq_msg_more(&m)) {
		zmq_msg_close(&m);
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, p->sock, ZMQ_DONTWAIT) < 0)
			break;
	}
	size_t n = multi ? 0 : zmq_msg_size(&m);
	void *copy = malloc(n ? n : 1);
	if (!copy) {
		zmq_msg_close(&m);
		return -ENOMEM;
	}
	if (n)
		memcpy(copy, zmq_msg_data(&m), n);
	zmq_msg_close(&m);
	*buf = copy;
	*len = n;
	return 1;
}

void lc__pull_vouch(lc__pull_t *p)
{
	if (p && p->src_fd >= 0)
		lc__inbox_guard_vouch(p->guard, p->src_fd, p->src_addr);
}

void lc__pull_close(lc__pull_t *p)
{
	if (!p)
		return;
	lc__inbox_guard_stop(p->guard, p->sock);
	zmq_close(p->sock);
	free(p);
}

bool lc__pull_counter(const lc__pull_t *p, int ctl, uint64_t *out)
{
	const lc__inbox_guard_t *g = p ? p->guard : NULL;
	switch (ctl) {
	case LC__CTL_inbox_conns_refused:
		*out = lc__inbox_guard_refused(g);
		return true;
	case LC__CTL_inbox_conns_evicted:
		*out = lc__inbox_guard_evicted(g);
		return true;
	case LC__CTL_inbox_door_shut:
		*out = lc__inbox_guard_door_shut(g);
		return true;
	default:
		return false;
	}
}

uint64_t lc__pull_conns_held(const lc__pull_t *p)
{
	return p ? lc__inbox_guard_held(p->guard) : 0;
}

uint64_t lc__pull_door_shut(const lc__pull_t *p)
{
	return p ? lc__inbox_guard_door_shut(p->guard) : 0;
}

/* Close a PUSH and its monitor. The monitor is stopped first (a no-op on
 * a socket without one): libzmq (4.3) closing a socket whose monitor still
 * runs, with events unread, reaps neither of them, nor gives back their
 * descriptors (a D opening and closing channels to P ranks ran out of
 * both). */
static void close_watched(lc__push_t *p)
{
	zmq_socket_monitor(p->sock, NULL, 0);
	zmq_close(p->sock);
	if (p->mon)
		zmq_close(p->mon);
}

/* Heartbeats on sock and a monitor of it on a new PAIR (before connect, so
 * that no event is missed). */
static int watch(lc__zctx_t *z, lc__push_t *p)
{
	int ivl = z->push_hb_ms, timeout = z->push_hb_timeout_ms;
	char name[64];
	zmq_setsockopt(p->sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
	zmq_setsockopt(p->sock, ZMQ_HEARTBEAT_TIMEOUT, &timeout, sizeof timeout);
	snprintf(name, sizeof name, "inproc://lc-push-mon-%llu",
		 (unsigned long long)atomic_fetch_add(&mon_seq, 1));
	int events = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED |
		     ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
		     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
	if (zmq_socket_monitor(p->sock, name, events))
		return -zmq_errno();
	p->mon = zmq_socket(z->zmq, ZMQ_PAIR);
	if (!p->mon)
		return -zmq_errno();
	int linger = 0;
	zmq_setsockopt(p->mon, ZMQ_LINGER, &linger, sizeof linger);
	if (zmq_connect(p->mon, name)) {
		int e = zmq_errno();
		zmq_close(p->mon);
		p->mon = NULL;
		return -e;
	}
	return 0;
}

int lc__push_connect(lc__zctx_t *z, const char *endpoint, const char *server_key, lc__push_t **out)
{
	lc__push_t *p = calloc(1, sizeof *p);
	int rc;
	if (!p)
		return -ENOMEM;
	p->sock = zmq_socket(z->zmq, ZMQ_PUSH);
	if (!p->sock) {
		free(p);
		return -zmq_errno();
	}
	common_opts(p->sock);
	int hwm = LC__CHAN_SNDHWM;
	zmq_setsockopt(p->sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
	if (z->curve) {
		const char *sk = server_key && *server_key ? server_key : z->public_key;
		if (strlen(sk) != LC__CHAN_KEY_LEN) {
			rc = -EINVAL;
			goto fail;
		}
		zmq_setsockopt(p->sock, ZMQ_CURVE_SERVERKEY, sk, LC__CHAN_KEY_LEN);
		zmq_setsockopt(p->sock, ZMQ_CURVE_PUBLICKEY, z->public_key, LC__CHAN_KEY_LEN);
		zmq_setsockopt(p->sock, ZMQ_CURVE_SECRETKEY, z->secret_key, LC__CHAN_KEY_LEN);
	}
	if (z->push_hb_ms && (rc = watch(z, p))) {
		LC__WARN_PEER("channel: cannot monitor the socket to %s: %s", endpoint,
			      zmq_strerror(-rc));
		goto fail;
	}
	if (zmq_connect(p->sock, endpoint)) {
		int e = zmq_errno();
		LC__WARN_PEER("channel: cannot connect to %s: %s", endpoint, zmq_strerror(e));
		rc = e == EINVAL ? -EINVAL : -e;
		goto fail;
	}
	pthread_mutex_init(&p->lock, NULL);
	*out = p;
	return 0;
fail:
	close_watched(p);
	free(p);
	return rc;
}

int lc__push_send(lc__push_t *p, const void *buf, size_t len, int timeout_ms)
{
	pthread_mutex_lock(&p->lock);
	zmq_setsockopt(p->sock, ZMQ_SNDTIMEO, &timeout_ms, sizeof timeout_ms);
	int rc = zmq_send(p->sock, buf, len, 0);
	int e = rc < 0 ? zmq_errno() : 0;
	pthread_mutex_unlock(&p->lock);
	return rc < 0 ? -e : 0;
}

/* Apply the monitor's queued events (two frames each: event and value,
 * then the endpoint). With p->lock held. */
static void read_events(lc__push_t *p)
{
	for (;;) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, p->mon, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&m);
			return;
		}
		uint16_t ev = 0;
		if (zmq_msg_size(&m) >= sizeof ev)
			memcpy(&ev, zmq_msg_data(&m), sizeof ev);
		while (zmq_msg_more(&m)) {
			zmq_msg_close(&m);
			zmq_msg_init(&m);
			if (zmq_msg_recv(&m, p->mon, ZMQ_DONTWAIT) < 0)
				break;
		}
		zmq_msg_close(&m);
		if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
			p->up = true;
		else if (ev)
			p->up = false;
	}
}

int lc__push_up(lc__push_t *p)
{
	if (!p->mon)
		return 1;
	pthread_mutex_lock(&p->lock);
	read_events(p);
	int up = p->up;
	pthread_mutex_unlock(&p->lock);
	return up;
}

void lc__push_close_now(lc__push_t *p)
{
	int linger = 0;
	if (p)
		zmq_setsockopt(p->sock, ZMQ_LINGER, &linger, sizeof linger);
	lc__push_close(p);
}

void lc__push_close(lc__push_t *p)
{
	if (!p)
		return;
	close_watched(p);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

#else /* no ZeroMQ */

int lc__zctx_create(const lc__shared_t *shared, lc__zctx_t **out)
{
	return LC_ENOTSUP;
}
bool lc__zctx_shared_key(const lc__zctx_t *z, const char *z85)
{
	return false;
}
void lc__zctx_destroy(lc__zctx_t *z)
{
}
const char *lc__zctx_public_key(const lc__zctx_t *z)
{
	return "";
}
uint64_t lc__zctx_auth_refused(const lc__zctx_t *z)
{
	return 0;
}
void lc__zctx_watch_pushes(lc__zctx_t *z, int ivl_ms, int timeout_ms)
{
}
int lc__pull_bind(lc__zctx_t *z, const char *host, lc__pull_t **out, char *endpoint, size_t cap)
{
	return LC_ENOTSUP;
}
void *lc__pull_socket(lc__pull_t *p)
{
	return NULL;
}
int lc__pull_recv(lc__pull_t *p, void **buf, size_t *len)
{
	return LC_ENOTSUP;
}
int lc__pull_recv_from(lc__pull_t *p, void **buf, size_t *len, char *peer_key, size_t cap)
{
	return LC_ENOTSUP;
}
void lc__pull_vouch(lc__pull_t *p)
{
}
void lc__pull_close(lc__pull_t *p)
{
}
bool lc__pull_counter(const lc__pull_t *p, int ctl, uint64_t *out)
{
	return false;
}
uint64_t lc__pull_conns_held(const lc__pull_t *p)
{
	return 0;
}
int lc__push_connect(lc__zctx_t *z, const char *endpoint, const char *server_key, lc__push_t **out)
{
	return LC_ENOTSUP;
}
int lc__push_send(lc__push_t *p, const void *buf, size_t len, int timeout_ms)
{
	return LC_ENOTSUP;
}
int lc__push_up(lc__push_t *p)
{
	return 1;
}
void lc__push_close(lc__push_t *p)
{
}
void lc__push_close_now(lc__push_t *p)
{
}
#endif
