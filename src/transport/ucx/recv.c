/* D, the receiver of writes: listeners, accepted connections, and leases,
 * whose writes land through the memory seam. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/copier.h"
#include "transport/ucx/ucx_int.h"

sconn_t *lc__ucx_sc_by_ep(ustate_t *st, ucp_ep_h ep)
{
	for (sconn_t *sc = st->sconns; sc; sc = sc->next)
		if (sc->ep == ep && !sc->closed)
			return sc;
	return NULL;
}

/* Finish a leased write through the seam, once: counted when `landed`. */
static void write_done(lwrite_t *w, bool landed)
{
	if (w->done)
		return;
	w->done = true;
	lc__land_done(&w->land, landed);
	if (landed)
		w->ls->landed++;
}

/* Leave the room's bracket: only once no receive of the lease can land. */
static void lease_exit(lease_t *ls)
{
	if (ls->entered)
		lc__land_exit(&ls->bracket);
	ls->entered = false;
}

static void lease_free(lease_t *ls)
{
	lease_exit(ls);
	for (uint32_t i = 0; i < ls->nopen; i++) {
		write_done(&ls->w[i], false);
		free(ls->w[i].stage);
		free(ls->w[i].fin);
	}
	free(ls->w);
	free(ls);
}

/* Off its connection: finish every write that is neither counted nor being
 * received. While rendezvous receives still land, the lease keeps the
 * room's bracket (so a revoke waits for them) and its memory; the last
 * receive frees it (recv_done), or dead_leases_service gives the bracket
 * up CLOSE_WAIT_NS after the connection was closed. */
static void lease_release(lease_t *ls)
{
	for (uint32_t i = 0; i < ls->nopen; i++)
		if (!ls->w[i].busy)
			write_done(&ls->w[i], false);
	if (ls->recvs == 0) {
		lease_free(ls);
		return;
	}
	ls->released = true;
	ls->released_ns = lc__now_ns();
	ls->sc = NULL;
	ls->next = ls->st->dead_leases;
	ls->st->dead_leases = ls;
}

static void lease_reap(ustate_t *st, lease_t *ls)
{
	for (lease_t **pp = &st->dead_leases; *pp; pp = &(*pp)->next) {
		if (*pp == ls) {
			*pp = ls->next;
			lease_free(ls);
			return;
		}
	}
}

/* Released leases whose receives outlive their closed connection: the
 * endpoint is gone, so UCX has no path left to land them; stop holding up
 * the revoke after CLOSE_WAIT_NS (logged: this is not expected). */
static void dead_leases_service(ustate_t *st, uint64_t now)
{
	for (lease_t *ls = st->dead_leases; ls; ls = ls->next) {
		if (!ls->entered || now - ls->released_ns < CLOSE_WAIT_NS)
			continue;
		LC__WARN("ucx: %d receive(s) of room %llu still outstanding %llu ms after their "
			 "connection closed; leaving the room's bracket",
			 ls->recvs, (unsigned long long)ls->room,
			 (unsigned long long)(CLOSE_WAIT_NS / 1000000));
		lease_exit(ls);
	}
}

static void sc_release_leases(sconn_t *sc)
{
	while (sc->leases) {
		lease_t *ls = sc->leases;
		sc->leases = ls->next;
		lease_release(ls);
	}
}

/* Close an accepted endpoint; once closed no put from it can land (the
 * connection under it is gone), so its leases are released. */
static void sc_close(ustate_t *st, sconn_t *sc)
{
	if (sc->closed)
		return;
	sc->closed = true;
	lc__ucx_ep_close_force(st, sc->ep);
	sc_release_leases(sc);
}

static void reply_hello(ustate_t *st, ucp_ep_h ep, int status)
{
	msg_t *m = lc__ucx_msg_new(st, UW_STATUS_LEN);
	if (m)
		uw_status_encode(m->data, status);
	lc__ucx_msg_post(ep, UW_HELLO_REPLY, m);
}

static void reply_lease(ustate_t *st, ucp_ep_h ep, uint64_t seq, int status, uint32_t index)
{
	msg_t *m = lc__ucx_msg_new(st, UW_LEASE_REPLY_LEN);
	uw_lease_reply_t r = {.seq = seq, .status = status, .index = index};
	if (m)
		uw_lease_reply_encode(m->data, &r);
	lc__ucx_msg_post(ep, UW_LEASE_REPLY, m);
}

/* Put mode: D's worker has UCX's RMA enabled, and software-emulated RMA
 * lets a connected peer copy to and from any address of D. Allowed only
 * where UCX carries this connection's puts on hardware RMA, or by the
 * explicit ucx_allow_sw_rma (tests, benchmarks). */
static bool sc_rma_allowed(ustate_t *st, sconn_t *sc)
{
	char lanes[128];
	if (lc__ucx_ep_hw_rma(sc->ep, lanes, sizeof lanes))
		return true;
	if (st->allow_sw_rma) {
		LC__INFO("ucx: put mode over software-emulated RMA (put lanes: %s), allowed by "
			 "ucx_allow_sw_rma",
			 lanes);
		return true;
	}
	LC__COUNT(st->ctx, conns_refused_sw_rma);
	LC__WARN_PEER(
		"ucx: put mode: no hardware RMA to this sender (put lanes: %s): UCX would "
		"emulate it with CPU copies that check no key, letting any connected peer write "
		"D's memory; refusing the connection (use data mode am)",
		lanes);
	return false;
}

void lc__ucx_on_hello(ustate_t *st, sconn_t *sc, const uint8_t *d, size_t len)
{
	uw_hello_t h;
	if (uw_hello_decode(d, len, &h) || h.version != UW_VERSION) {
		LC__COUNT(st->ctx, frames_malformed);
		reply_hello(st, sc->ep, LC_ERR_PROTO);
		sc->rejected = true;
		sc->close_at = lc__now_ns() + REJECTED_LINGER_NS;
		return;
	}
	if (!lc__ctx_token_accepted(st->ctx, h.token, h.has_token, &sc->who)) {
		LC__COUNT(st->ctx, conns_rejected_auth);
		LC__WARN_PEER("ucx: rejected a connection with a bad session token");
		reply_hello(st, sc->ep, LC_ERR_AUTH);
		sc->rejected = true;
		sc->close_at = lc__now_ns() + REJECTED_LINGER_NS;
		return;
	}
	if (st->put_mode && !sc_rma_allowed(st, sc)) {
		reply_hello(st, sc->ep, LC_ENOTSUP);
		sc->rejected = true;
		sc->close_at = lc__now_ns() + REJECTED_LINGER_NS;
		return;
	}
	sc->authed = true;
	reply_hello(st, sc->ep, 0);
}

void lc__ucx_on_unauthed(ustate_t *st, sconn_t *sc, unsigned id)
{
	if (sc->rejected)
		return;
	LC__COUNT(st->ctx, conns_rejected_auth);
	LC__WARN_PEER("ucx: refused message %u from a connection that presented no accepted token; "
		      "closing it",
		      id);
	reply_hello(st, sc->ep, LC_ERR_AUTH);
	sc->rejected = true;
	sc->close_at = lc__now_ns() + REJECTED_LINGER_NS;
}

/* Open a landing per write (regions, ranges and the room's grant, checked
 * and counted by the seam exactly as for the copying transports); all must
 * share one grant entry, whose bracket the lease then holds until DONE.
 * *bad: the index of the rejected write. */
static int lease_open(ustate_t *st, sconn_t *sc, lease_t *ls, const uint8_t *d, uint32_t *bad)
{
	for (uint32_t i = 0; i < ls->n; i++) {
		uw_lease_entry_t e;
		lwrite_t *w = &ls->w[i];
		*bad = i;
		uw_lease_entry(d, i, &e);
		int rc = lc__land_open(st->ctx, sc->who, ls->room, e.region, e.offset, e.length,
				       &w->land);
		if (rc)
			return rc;
		w->ls = ls;
		ls->nopen = i + 1;
		if (w->land.g != ls->w[0].land.g) { /* revoked and granted again meanwhile */
			LC__COUNT(st->ctx, writes_rejected_grant);
			return LC_ERR_GRANT;
		}
	}
	ls->bracket = ls->w[0].land;
	if (!lc__land_enter(&ls->bracket)) {
		LC__COUNT(st->ctx, writes_rejected_grant);
		*bad = 0;
		return LC_ERR_GRANT;
	}
	ls->entered = true;
	return 0;
}

void lc__ucx_on_lease(ustate_t *st, sconn_t *sc, const uint8_t *d, size_t len)
{
	uw_lease_t h;
	uint32_t bad = 0;
	if (uw_lease_decode(d, len, &h)) {
		LC__COUNT(st->ctx, frames_malformed);
		return;
	}
	if (uw_lease_check(&h, len)) {
		LC__COUNT(st->ctx, frames_malformed);
		reply_lease(st, sc->ep, h.seq, LC_ERR_PROTO, 0);
		return;
	}
	if (!(h.flags & UW_LEASE_F_AM) && !st->put_mode) {
		LC__WARN_PEER(
			"ucx: refused a put lease for room %llu: this receiver runs in data mode "
			"am (no RMA enabled)",
			(unsigned long long)h.room);
		reply_lease(st, sc->ep, h.seq, LC_ENOTSUP, 0);
		return;
	}
	lease_t *ls = calloc(1, sizeof *ls);
	lwrite_t *w = calloc(h.n, sizeof *w);
	if (!ls || !w) {
		free(ls);
		free(w);
		reply_lease(st, sc->ep, h.seq, -ENOMEM, 0);
		return;
	}
	*ls = (lease_t){.st = st,
			.sc = sc,
			.seq = h.seq,
			.room = h.room,
			.n = h.n,
			.w = w,
			.am = (h.flags & UW_LEASE_F_AM) != 0};
	int rc = lease_open(st, sc, ls, d, &bad);
	if (rc) {
		lease_release(ls); /* finishes the opened landings, uncounted */
		reply_lease(st, sc->ep, h.seq, rc, bad);
		return;
	}
	ls->next = sc->leases;
	sc->leases = ls;
	reply_lease(st, sc->ep, h.seq, 0, 0);
}

/* Put mode: D cannot observe one-sided puts, so the first `writes` leased
 * writes count as landed on P's word that they were put and flushed (the
 * trust point of put mode, docs/transport-ucx.md); `bytes` must agree with
 * D's own lengths. In am mode D counted each write as it received it. */
static void lease_count_puts(ustate_t *st, lease_t *ls, uint64_t writes, uint64_t bytes)
{
	uint64_t sum = 0;
	if (ls->am || writes == 0)
		return;
	if (writes > ls->n) {
		LC__COUNT(st->ctx, frames_malformed);
		return;
	}
	for (uint64_t i = 0; i < writes; i++)
		sum += ls->w[i].land.length;
	if (sum != bytes) {
		LC__COUNT(st->ctx, frames_malformed);
		return;
	}
	for (uint64_t i = 0; i < writes; i++)
		write_done(&ls->w[i], true);
}

static void send_ack(ustate_t *st, sconn_t *sc, uint64_t seq, uint64_t landed)
{
	uw_ack_t a = {.seq = seq, .landed = landed};
	msg_t *m = lc__ucx_msg_new(st, UW_ACK_LEN);
	if (m)
		uw_ack_encode(m->data, &a);
	lc__ucx_msg_post(sc->ep, UW_ACK, m);
}

/* The lease is finished: off its connection, ACK with D's count, release. */
static void lease_finish(ustate_t *st, sconn_t *sc, lease_t *ls)
{
	for (lease_t **pp = &sc->leases; *pp; pp = &(*pp)->next) {
		if (*pp == ls) {
			*pp = ls->next;
			break;
		}
	}
	send_ack(st, sc, ls->seq, ls->landed);
	lease_release(ls);
}

void lc__ucx_on_done(ustate_t *st, sconn_t *sc, const uint8_t *d, size_t len)
{
	uw_done_t dn;
	if (uw_done_decode(d, len, &dn)) {
		LC__COUNT(st->ctx, frames_malformed);
		return;
	}
	for (lease_t *ls = sc->leases; ls; ls = ls->next) {
		if (ls->seq != dn.seq || ls->done_pending)
			continue;
		lease_count_puts(st, ls, dn.writes, dn.bytes);
		if (ls->recvs > 0)
			ls->done_pending = true; /* the last receive finishes it */
		else
			lease_finish(st, sc, ls);
		return;
	}
	send_ack(st, sc, dn.seq, 0);
}

/* A write's bytes are in place (or failed): count it through the seam. */
static void write_received(lwrite_t *w, ucs_status_t status)
{
	bool ok = status == UCS_OK;
	if (!ok)
		LC__DEBUG("ucx: receiving a write: %s", ucs_status_string(status));
	if (ok && w->stage && !w->done) {
		int rc = lc__land_copy(&w->land, 0, w->stage, w->land.length);
		if (rc)
			lc__land_revoked(&w->land);
		ok = rc == 0;
	}
	free(w->stage);
	w->stage = NULL;
	w->busy = false;
	write_done(w, ok); /* nothing once the lease was released */
}

/* One receive (with its device copies) of the lease is over. */
static void recv_over(ustate_t *st, lease_t *ls)
{
	if (--ls->recvs > 0)
		return;
	if (ls->released)
		lease_reap(st, ls);
	else if (ls->done_pending && !ls->sc->closed) /* closing: sc_close releases it */
		lease_finish(st, ls->sc, ls);
}

/* The thread: a staged write's device copies have all completed. */
static void copies_over(ustate_t *st, void *arg)
{
	lwrite_t *w = arg;
	lease_t *ls = w->ls;
	int status = atomic_load(&w->copy_status);
	w->fin = NULL; /* freed by lc__ucx_run_cmds */
	free(w->stage);
	w->stage = NULL;
	w->busy = false;
	if (status == LC_ERR_GRANT)
		lc__land_revoked(&w->land);
	else if (status)
		LC__WARN("ucx: room %llu: device copy into region %u failed",
			 (unsigned long long)w->land.room, w->land.region);
	write_done(w, status == 0);
	recv_over(st, ls);
}

/* The copy engine's thread (or the caller's): the copies completed. */
static void copies_done(void *arg, int status)
{
	lwrite_t *w = arg;
	ustate_t *st = w->ls->st;
	atomic_store(&w->copy_status, status);
	pthread_mutex_lock(&st->lock);
	lc__ucx_cmd_push(st, w->fin);
	pthread_mutex_unlock(&st->lock);
	lc__ucx_wake(st);
}

/* Pipelined landing (docs/gpu.md "Staging"): a write received into its
 * host stage is landed by the seam (the device's copy engine) while the
 * thread goes on receiving; the write stays busy and counted in the
 * lease's receives until copies_over. false: nothing started (the caller
 * lands it). */
static bool copy_start(lwrite_t *w)
{
	if (!(w->fin = malloc(sizeof *w->fin)))
		return false;
	*w->fin = (cmd_t){.fn = copies_over, .arg = w};
	int rc = lc__land_copy_async(&w->land, 0, w->stage, w->land.length, copies_done, w);
	if (rc)
		copies_done(w, rc); /* nothing queued: finished as failed */
	return true;
}

static void recv_done(void *req, ucs_status_t status, size_t length, void *user)
{
	lwrite_t *w = user;
	lease_t *ls = w->ls;
	ustate_t *st = ls->st;
	(void)length;
	st->reqs--;
	ucp_request_free(req);
	if (status == UCS_OK && w->stage && !w->done && copy_start(w))
		return; /* copies_over finishes it */
	write_received(w, status);
	recv_over(st, ls);
}

/* The write named by an UW_WRITE header: of an am lease of this
 * connection, of the right length, not received yet. */
static lwrite_t *write_find(ustate_t *st, sconn_t *sc, const uint8_t *h, size_t hlen, size_t length)
{
	uint64_t seq = 0, index = 0;
	if (uw_write_decode(h, hlen, &seq, &index))
		sc = NULL;
	for (lease_t *ls = sc ? sc->leases : NULL; ls; ls = ls->next) {
		if (ls->seq != seq)
			continue;
		if (!ls->am || index >= ls->n)
			break;
		lwrite_t *w = &ls->w[index];
		if (w->land.length != length || w->busy || w->done)
			break;
		return w;
	}
	LC__COUNT(st->ctx, frames_malformed);
	return NULL;
}

/* Data mode "am": a write of a granted lease, landed through the seam into
 * the destination D checked at lease time. Eager payloads are copied
 * (lc__land_copy); a rendezvous is received straight into the direct
 * destination, under the lease's bracket of the room, and counted when the
 * receive completes. */
void lc__ucx_on_write(ustate_t *st, sconn_t *sc, const uint8_t *h, size_t hlen, void *data,
		      size_t length, bool rndv)
{
	lwrite_t *w = write_find(st, sc, h, hlen, length);
	if (!w)
		return; /* dropped: a rendezvous is cancelled, nothing lands */
	if (w->ls->revoke_seen_ns || !rndv) {
		int rc = w->ls->revoke_seen_ns ? LC_ERR_GRANT
					       : lc__land_copy(&w->land, 0, data, length);
		if (rc)
			lc__land_revoked(&w->land);
		write_done(w, rc == 0);
		return;
	}
	ucp_request_param_t p = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
		.cb.recv_am = recv_done,
		.user_data = w,
	};
	void *into = w->land.dst;
	if (!into && w->land.dev && st->cuda_direct &&
	    lc__ucx_moves_kind(st->memory_types, w->land.cp->kind)) {
		/* UCX with CUDA: received straight into device memory, inside
		 * the lease's bracket like a direct host landing. */
		into = w->land.dev;
		p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
		p.memory_type = lc__ucx_mem_type(w->land.cp->kind);
	}
	if (!into && !(into = w->stage = malloc(length))) {
		write_done(w, false);
		return;
	}
	w->busy = true;
	ucs_status_ptr_t r = ucp_am_recv_data_nbx(st->worker, data, into, length, &p);
	if (UCS_PTR_IS_ERR(r)) {
		LC__WARN_PEER("ucx: receiving a write: %s", ucs_status_string(UCS_PTR_STATUS(r)));
		write_received(w, UCS_PTR_STATUS(r));
	} else if (r == NULL) {
		write_received(w, UCS_OK); /* completed in place */
	} else {
		st->reqs++;
		w->ls->recvs++;
	}
}

/* A closed connection's memory stays until the worker is destroyed: UCX may
 * still call the closed endpoint's error handler (sc_err sees `closed`). */
static void sc_bury(ustate_t *st, sconn_t *sc)
{
	sc->next = st->sc_graveyard;
	st->sc_graveyard = sc;
}

static void sc_err(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	sconn_t *sc = arg;
	if (sc->closed || sc->failed)
		return;
	LC__INFO("ucx: a sender's connection closed: %s", ucs_status_string(status));
	sc->failed = true; /* sc_service closes it and releases its leases */
}

static void conn_handler(ucp_conn_request_h req, void *arg)
{
	ulistener_t *ul = arg;
	connreq_t *cr = malloc(sizeof *cr);
	if (!cr) {
		ucp_listener_reject(ul->lh, req);
		return;
	}
	cr->ul = ul;
	cr->req = req;
	cr->next = ul->st->connreqs;
	ul->st->connreqs = cr;
}

static void accept_pending(ustate_t *st)
{
	while (st->connreqs) {
		connreq_t *cr = st->connreqs;
		st->connreqs = cr->next;
		sconn_t *sc = calloc(1, sizeof *sc);
		if (!sc) {
			ucp_listener_reject(cr->ul->lh, cr->req);
			free(cr);
			continue;
		}
		sc->ul = cr->ul;
		sc->hello_deadline =
			lc__now_ns() +
			(uint64_t)lc__ctx_cfg(st->ctx, LC__CFG_connect_timeout_ms) * 1000000ull;
		ucp_ep_params_t ep = {
			.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
				      UCP_EP_PARAM_FIELD_ERR_HANDLER |
				      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
			.conn_request = cr->req,
			.err_mode = lc__ucx_err_mode(st->ctx),
			.err_handler = {.cb = sc_err, .arg = sc},
		};
		ucs_status_t s = ucp_ep_create(st->worker, &ep, &sc->ep);
		free(cr);
		if (s != UCS_OK) {
			LC__INFO("ucx: accepting a connection: %s", ucs_status_string(s));
			free(sc);
			continue;
		}
		sc->next = st->sconns;
		st->sconns = sc;
	}
}

/* Revokes pending on leased rooms: ask P to stop, fence after fence_ns. */
static void sc_service(ustate_t *st, uint64_t now)
{
	for (sconn_t **pp = &st->sconns; *pp;) {
		sconn_t *sc = *pp;
		if (!sc->closed && !sc->authed && !sc->rejected && now >= sc->hello_deadline) {
			LC__WARN_PEER("ucx: no handshake within %llu ms; closing",
				      (unsigned long long)lc__ctx_cfg(st->ctx,
								      LC__CFG_connect_timeout_ms));
			sc_close(st, sc);
		}
		if (!sc->closed && (sc->failed || (sc->rejected && now >= sc->close_at)))
			sc_close(st, sc);
		bool fence = false;
		for (lease_t *ls = sc->closed ? NULL : sc->leases; ls; ls = ls->next) {
			if (!lc__land_is_revoked(&ls->bracket))
				continue;
			if (!ls->revoke_seen_ns) {
				ls->revoke_seen_ns = now;
				LC__DEBUG(
					"ucx: room %llu revoked with a lease out; asking the sender",
					(unsigned long long)ls->room);
				msg_t *m = lc__ucx_msg_new(st, UW_REVOKE_LEN);
				if (m)
					uw_revoke_encode(m->data, ls->room);
				lc__ucx_msg_post(sc->ep, UW_REVOKE, m);
			} else if (now - ls->revoke_seen_ns > sc->ul->fence_ns) {
				fence = true;
			}
		}
		if (fence) {
			LC__WARN_PEER(
				"ucx: a sender did not release a revoked room within %llu ms; "
				"closing its connection (fence)",
				(unsigned long long)(sc->ul->fence_ns / 1000000));
			sc_close(st, sc);
		}
		if (sc->closed) {
			*pp = sc->next;
			sc_bury(st, sc);
		} else {
			pp = &sc->next;
		}
	}
}

typedef struct listen_arg {
	ulistener_t *ul;
	struct sockaddr_storage sa;
	socklen_t salen;
	int rc;
	int port;
} listen_arg_t;

static void do_listen(ustate_t *st, void *arg)
{
	listen_arg_t *a = arg;
	ucp_listener_params_t lp = {
		.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
			      UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
		.sockaddr = {.addr = (const struct sockaddr *)&a->sa, .addrlen = a->salen},
		.conn_handler = {.cb = conn_handler, .arg = a->ul},
	};
	ucs_status_t s = ucp_listener_create(st->worker, &lp, &a->ul->lh);
	if (s != UCS_OK) {
		LC__WARN("ucx: listening: %s", ucs_status_string(s));
		a->rc = s == UCS_ERR_BUSY ? -EADDRINUSE
			: s == UCS_ERR_UNSUPPORTED || s == UCS_ERR_NO_DEVICE
				? LC_ERR_NO_TRANSPORT
				: lc__ucx_map_status(s, false);
		return;
	}
	ucp_listener_attr_t at = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
	s = ucp_listener_query(a->ul->lh, &at);
	if (s != UCS_OK) {
		ucp_listener_destroy(a->ul->lh);
		a->rc = LC_ERR_IO;
		return;
	}
	const struct sockaddr *sa = (const struct sockaddr *)&at.sockaddr;
	a->port = ntohs(sa->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
						  : ((const struct sockaddr_in *)sa)->sin_port);
	a->ul->next = st->listeners;
	st->listeners = a->ul;
	a->rc = 0;
}

int lc__ucx_listen(ustate_t *st, lc_listener_t *l, const char *url)
{
	char host[LC__URL_MAX];
	int port, rc;
	uint64_t fence_ms = FENCE_MS_DEFAULT;
	rc = lc__url_host_port(url, "ucx", host, sizeof host, &port);
	if (rc)
		return rc;
	if (lc__url_query_u64(url, "fence_ms", &fence_ms) < 0 || fence_ms == 0 ||
	    fence_ms > 3600000) {
		lc__error_set(-EINVAL, "%s: fence_ms must be 1..3600000", url);
		return -EINVAL;
	}
	ulistener_t *ul = calloc(1, sizeof *ul);
	if (!ul)
		return -ENOMEM;
	listen_arg_t a = {.ul = ul, .rc = 0};
	rc = lc__ucx_resolve(host, port, true, &a.sa, &a.salen);
	if (rc)
		goto fail_free;
	ul->l = l;
	ul->st = st;
	ul->fence_ns = fence_ms * 1000000ull;
	lc__ucx_run_sync(st, do_listen, &a);
	if (a.rc) {
		rc = a.rc;
		goto fail_free;
	}
	bool v6 = strchr(host, ':') != NULL;
	snprintf(l->url, sizeof l->url, "ucx://%s%.*s%s:%d", v6 ? "[" : "",
		 (int)(sizeof l->url - 20), host, v6 ? "]" : "", a.port);
	l->priv = ul;
	return 0;
fail_free:
	free(ul);
	return rc;
}

static void do_listener_close(ustate_t *st, void *arg)
{
	ulistener_t *ul = arg;
	for (ulistener_t **pp = &st->listeners; *pp; pp = &(*pp)->next) {
		if (*pp == ul) {
			*pp = ul->next;
			break;
		}
	}
	/* Requests not yet accepted, then the listener, then what it accepted. */
	for (connreq_t **pp = &st->connreqs; *pp;) {
		connreq_t *cr = *pp;
		if (cr->ul == ul) {
			*pp = cr->next;
			ucp_listener_reject(ul->lh, cr->req);
			free(cr);
		} else {
			pp = &cr->next;
		}
	}
	ucp_listener_destroy(ul->lh);
	for (sconn_t **pp = &st->sconns; *pp;) {
		sconn_t *sc = *pp;
		if (sc->ul == ul) {
			sc_close(st, sc);
			*pp = sc->next;
			sc_bury(st, sc);
		} else {
			pp = &sc->next;
		}
	}
}

void lc__ucx_listener_close(lc_listener_t *l)
{
	ulistener_t *ul = l->priv;
	ustate_t *st = ul->st;
	lc__ucx_run_sync(st, do_listener_close, ul);
	free(ul);
	l->priv = NULL;
}

void lc__ucx_recv_service(ustate_t *st, uint64_t now)
{
	accept_pending(st);
	sc_service(st, now);
	dead_leases_service(st, now);
}

void lc__ucx_recv_teardown(ustate_t *st)
{
	for (ulistener_t *ul = st->listeners; ul; ul = ul->next)
		ucp_listener_destroy(ul->lh);
	st->listeners = NULL;
	for (sconn_t *sc = st->sconns, *n; sc; sc = n) {
		n = sc->next;
		sc_close(st, sc);
		sc_bury(st, sc);
	}
	st->sconns = NULL;
}

/* Engine stop: wait (bounded) for staged writes' device copies, then run
 * their completions, which release the leases they hold; nothing else of
 * the command queue runs without a worker. */
static void copies_quiesce(ustate_t *st)
{
	if (lc__copiers_drain(st->ctx, lc__now_ns() + CLOSE_WAIT_NS))
		LC__WARN("ucx: device copies still in flight at engine stop");
	pthread_mutex_lock(&st->lock);
	cmd_t *mine = NULL, **tail = &mine, *keep = NULL, **ktail = &keep;
	for (cmd_t *c = st->cmd_head, *next; c; c = next) {
		next = c->next;
		c->next = NULL;
		if (c->fn == copies_over) {
			*tail = c;
			tail = &c->next;
		} else {
			*ktail = c;
			ktail = &c->next;
		}
	}
	st->cmd_head = keep;
	st->cmd_tail = keep ? LC__CONTAINER_OF(ktail, cmd_t, next) : NULL;
	pthread_mutex_unlock(&st->lock);
	for (cmd_t *c = mine, *next; c; c = next) {
		next = c->next;
		c->fn(st, c->arg);
		free(c);
	}
}

void lc__ucx_recv_free(ustate_t *st)
{
	copies_quiesce(st);
	while (st->sc_graveyard) {
		sconn_t *sc = st->sc_graveyard;
		st->sc_graveyard = sc->next;
		free(sc);
	}
	while (st->dead_leases) {
		lease_t *ls = st->dead_leases;
		st->dead_leases = ls->next;
		lease_free(ls);
	}
}
