/* P, the sender of writes: connections, and each batch as an operation
 * that takes a lease from D, puts or sends its writes, and reports DONE. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/ucx/ucx_int.h"

static void op_unlink(uop_t *op)
{
	op->prev->next = op->next;
	op->next->prev = op->prev;
	op->next = op->prev = op;
}

static void op_free(uop_t *op)
{
	free(op->hdrs);
	free(op->rr);
	free(op);
}

/* Detach an op from its connection and drop the batch reference; the memory
 * goes now, or with the flush callback that still points at it. */
static void op_release(uop_t *op)
{
	op_unlink(op);
	if (op->b) {
		lc__batch_unref(op->b);
		op->b = NULL;
	}
	if (op->pending) {
		ustate_t *st = op->st;
		op->orphan = true;
		op->next = st->orphans.next;
		op->prev = &st->orphans;
		st->orphans.next->prev = op;
		st->orphans.next = op;
		return;
	}
	op_free(op);
}

static uop_t *op_find(uconn_t *uc, uint64_t seq)
{
	for (uop_t *op = uc->ops.next; op != &uc->ops; op = op->next)
		if (op->seq == seq)
			return op;
	return NULL;
}

/* Move posted ops to the thread's list. */
static void uc_take_new(uconn_t *uc)
{
	pthread_mutex_lock(&uc->lock);
	uop_t *op = uc->in_head;
	uc->in_head = uc->in_tail = NULL;
	pthread_mutex_unlock(&uc->lock);
	while (op) {
		uop_t *next = op->next;
		op->prev = uc->ops.prev;
		op->next = &uc->ops;
		uc->ops.prev->next = op;
		uc->ops.prev = op;
		op = next;
	}
}

static void uc_mark_dead(uconn_t *uc, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void uc_mark_dead(uconn_t *uc, int code, const char *fmt, ...)
{
	char reason[LC_REASON_MAX];
	va_list ap;
	if (uc->state == UC_DEAD)
		return;
	uc->state = UC_DEAD;
	va_start(ap, fmt);
	lc__vreason(reason, sizeof reason, fmt, ap);
	va_end(ap);
	LC__WARN_PEER("ucx: %s", reason);
	pthread_mutex_lock(&uc->lock);
	uc->dead_code = code;
	snprintf(uc->dead_reason, sizeof uc->dead_reason, "%s", reason);
	pthread_mutex_unlock(&uc->lock);
	if (code == LC_ERR_STALLED)
		LC__COUNT(uc->conn->ctx, lanes_stalled);
}

static void uc_close_ep(uconn_t *uc)
{
	if (!uc->ep || uc->ep_closed)
		return;
	pthread_mutex_lock(&uc->lock);
	for (size_t i = 0; i < uc->nregions; i++) {
		if (uc->regions[i]->rkey) {
			ucp_rkey_destroy(uc->regions[i]->rkey);
			uc->regions[i]->rkey = NULL;
		}
	}
	pthread_mutex_unlock(&uc->lock);
	lc__ucx_ep_close_force(uc->st, uc->ep);
	uc->ep_closed = true;
}

static void send_lease(uconn_t *uc, uop_t *op)
{
	lc__batch_t *b = op->b;
	msg_t *m = lc__ucx_msg_new(uc->st, uw_lease_len(b->nwrites));
	if (!m) {
		lc__batch_fail(b, -ENOMEM, "ucx: no memory for the lease of %zu writes",
			       b->nwrites);
		op_release(op);
		return;
	}
	op->seq = ++uc->next_seq;
	op->am = !uc->st->put_mode;
	uw_lease_t h = {.seq = op->seq,
			.room = op->room,
			.n = (uint32_t)b->nwrites,
			.flags = op->am ? UW_LEASE_F_AM : 0};
	uw_lease_encode(m->data, &h);
	for (size_t i = 0; i < b->nwrites; i++) {
		uw_lease_entry_t e = {.region = b->writes[i].remote_region,
				      .offset = b->writes[i].remote_offset,
				      .length = b->writes[i].length};
		uw_lease_entry_encode(m->data, i, &e);
	}
	ucs_status_t s = lc__ucx_msg_send(uc->ep, UW_LEASE, m);
	if (s != UCS_OK) {
		lc__batch_fail(b, lc__ucx_map_status(s, true), "ucx: sending the lease to %s: %s",
			       uc->conn->url, ucs_status_string(s));
		op_release(op);
		return;
	}
	op->state = OP_LEASING;
}

static void send_done(uconn_t *uc, uop_t *op, int status)
{
	uw_done_t d = {.seq = op->seq, .writes = op->nput, .status = status};
	for (size_t i = 0; i < op->nput && op->b; i++)
		d.bytes += op->b->writes[i].length;
	msg_t *m = lc__ucx_msg_new(uc->st, UW_DONE_LEN);
	op->state = OP_DONE_SENT;
	if (!m)
		return; /* D keeps the lease until fence or close */
	uw_done_encode(m->data, &d);
	ucs_status_t s = lc__ucx_msg_send(uc->ep, UW_DONE, m);
	if (s != UCS_OK)
		LC__DEBUG("ucx: sending done to %s: %s", uc->conn->url, ucs_status_string(s));
}

static void op_flushed(uconn_t *uc, uop_t *op, ucs_status_t status)
{
	if (status != UCS_OK) {
		if (op->b)
			lc__batch_fail(op->b, lc__ucx_map_status(status, true),
				       "ucx: flushing writes to %s: %s", uc->conn->url,
				       ucs_status_string(status));
		op_release(op); /* the endpoint is broken: D releases on its error */
		return;
	}
	if (op->b && op->nput < op->b->nwrites && !op->revoked && !lc__batch_is_completed(op->b)) {
		op->state = OP_LEASED; /* the next round of puts */
		return;
	}
	send_done(uc, op, 0);
}

/* A request of the op's current round finished: the round is flushed when
 * the last one does. An orphaned op is freed by its last request. */
static void op_request_done(uop_t *op, ucs_status_t status)
{
	if (status != UCS_OK && op->flush_status == UCS_OK)
		op->flush_status = status;
	if (--op->pending > 0)
		return;
	if (op->orphan) {
		op_unlink(op);
		op_free(op);
		return;
	}
	op->state = OP_FLUSHED;
}

static void write_sent(void *req, ucs_status_t status, void *user)
{
	uop_t *op = user;
	op->st->reqs--;
	ucp_request_free(req);
	op_request_done(op, status);
}

static void flush_cb(void *req, ucs_status_t status, void *user)
{
	uop_t *op = user; /* op->st outlives every request; the connection may not */
	op->st->reqs--;
	ucp_request_free(req);
	op_request_done(op, status);
}

/* UCX with CUDA: a device source reaches this far only when UCX moves its
 * kind (stage.c asked ucx_moves_kind); tell UCX its memory type rather
 * than have it probe the pointer. */
static void set_mem_type(uconn_t *uc, const lc__batch_t *b, const lc_write_t *w,
			 ucp_request_param_t *p)
{
	lc__region_info_t r;
	if (!b->device_src || !uc->st->cuda_direct ||
	    lc__source_find(uc->conn->ctx, w->local, w->length, &r) || LC__KIND_IS_HOST(r.kind))
		return;
	p->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
	p->memory_type = lc__ucx_mem_type(r.kind);
}

static void start_puts(uconn_t *uc, uop_t *op)
{
	lc__batch_t *b = op->b;
	ucs_status_t err = UCS_OK;
	uint64_t round = 0;
	op->state = OP_PUTTING;
	op->flush_status = UCS_OK;
	if (op->am && !op->hdrs) {
		op->hdrs = malloc(b->nwrites * UW_WRITE_HDR);
		if (!op->hdrs) {
			lc__batch_fail(b, -ENOMEM, "ucx: no memory for %zu write headers",
				       b->nwrites);
			send_done(uc, op, -ENOMEM);
			return;
		}
	}
	for (size_t i = op->nput; i < b->nwrites && round < ROUND_BYTES; i++) {
		const lc_write_t *w = &b->writes[i];
		rregion_t *r = op->rr[i];
		if (lc__batch_is_completed(b) || op->revoked)
			break;
		if (!op->am && !lc__ucx_ensure_rkey(uc, r, &err)) {
			lc__batch_fail(b, lc__ucx_map_status(err, true),
				       "ucx: unpacking the key of region %u of %s: %s", r->id,
				       uc->conn->url, ucs_status_string(err));
			break;
		}
		ucs_status_ptr_t rq;
		if (op->am) {
			uint8_t *h = op->hdrs + i * UW_WRITE_HDR;
			ucp_request_param_t ap = {
				.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
						UCP_OP_ATTR_FIELD_USER_DATA |
						UCP_OP_ATTR_FIELD_FLAGS,
				.cb.send = write_sent,
				.user_data = op,
				.flags = UCP_AM_SEND_FLAG_REPLY,
			};
			uw_write_encode(h, op->seq, i);
			set_mem_type(uc, b, w, &ap);
			rq = ucp_am_send_nbx(uc->ep, UW_WRITE, h, UW_WRITE_HDR, w->local, w->length,
					     &ap);
			if (rq && !UCS_PTR_IS_ERR(rq)) {
				op->pending++;
				uc->st->reqs++;
				op->nput = i + 1;
				round += w->length;
				continue;
			}
		} else {
			ucp_request_param_t p = {.op_attr_mask = 0};
			set_mem_type(uc, b, w, &p);
			rq = ucp_put_nbx(uc->ep, w->local, w->length, r->base + w->remote_offset,
					 r->rkey, &p);
		}
		if (UCS_PTR_IS_ERR(rq)) {
			err = UCS_PTR_STATUS(rq);
			lc__batch_fail(b, lc__ucx_map_status(err, true),
				       "ucx: put of write %zu to %s: %s", i, uc->conn->url,
				       ucs_status_string(err));
			break;
		}
		if (rq)
			ucp_request_free(rq); /* completion is tracked by the flush */
		op->nput = i + 1;
		round += w->length;
	}
	ucp_request_param_t p = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
		.cb.send = flush_cb,
		.user_data = op,
	};
	op->pending++; /* held while this round is issued */
	ucs_status_ptr_t rq = op->am ? NULL : ucp_ep_flush_nbx(uc->ep, &p);
	if (rq == NULL || UCS_PTR_IS_ERR(rq)) {
		op_request_done(op, UCS_PTR_STATUS(rq));
	} else {
		uc->st->reqs++;
	}
}

/* Ops waiting for the connection to be ready, and for the lease. */
static void uc_pump(uconn_t *uc)
{
	uc_take_new(uc);
	if (uc->state != UC_READY)
		return;
	for (uop_t *op = uc->ops.next, *next; op != &uc->ops; op = next) {
		next = op->next;
		switch (op->state) {
		case OP_NEW:
			if (!op->b || lc__batch_is_completed(op->b))
				op_release(op);
			else
				send_lease(uc, op);
			break;
		case OP_LEASED:
			if (!op->b || lc__batch_is_completed(op->b) || op->revoked)
				send_done(uc, op, LC_ERR_CANCELLED); /* release, nothing written */
			else
				start_puts(uc, op);
			break;
		case OP_FLUSHED:
			op_flushed(uc, op, op->flush_status);
			break;
		default:
			break;
		}
	}
}

uconn_t *lc__ucx_uc_by_ep(ustate_t *st, ucp_ep_h ep)
{
	for (uconn_t *uc = st->conns; uc; uc = uc->next)
		if (uc->ep == ep && !uc->ep_closed)
			return uc;
	return NULL;
}

/* Put mode on P: its worker has RMA enabled too (UCX's software RMA then
 * exposes P's memory to D), and a put over emulated RMA is what D refuses;
 * P checks its own endpoint as well, against a D that does not. */
static bool uc_rma_allowed(uconn_t *uc)
{
	char lanes[128];
	if (lc__ucx_ep_hw_rma(uc->ep, lanes, sizeof lanes) || uc->st->allow_sw_rma)
		return true;
	LC__COUNT(uc->st->ctx, conns_refused_sw_rma);
	LC__WARN_PEER("ucx: put mode: RMA to %s is software-emulated (put lanes: %s); refusing it",
		      uc->conn->url, lanes);
	return false;
}

void lc__ucx_on_hello_reply(uconn_t *uc, const uint8_t *d, size_t len)
{
	int status;
	if (uw_status_decode(d, len, &status) || uc->state != UC_CONNECTING)
		return;
	if (status == 0 && uc->st->put_mode && !uc_rma_allowed(uc)) {
		uc_mark_dead(uc, LC_ENOTSUP,
			     "ucx: put mode: no hardware RMA to %s; refused (use data mode am)",
			     uc->conn->url);
		uc->need_close = true;
	} else if (status == 0) {
		uc->state = UC_READY;
		LC__DEBUG("ucx: connected to %s", uc->conn->url);
	} else if (status == LC_ENOTSUP) {
		uc_mark_dead(uc, LC_ENOTSUP,
			     "%s refused put mode: no hardware RMA on the path (use data mode am)",
			     uc->conn->url);
		uc->need_close = true;
	} else if (status == LC_ERR_AUTH) {
		uc_mark_dead(uc, LC_ERR_AUTH, "%s rejected the session token", uc->conn->url);
		uc->need_close = true;
	} else {
		uc_mark_dead(uc, status, "%s refused the connection: %s", uc->conn->url,
			     lc_strerror(status));
		uc->need_close = true;
	}
}

void lc__ucx_on_lease_reply(uconn_t *uc, const uint8_t *d, size_t len)
{
	uw_lease_reply_t r;
	if (uw_lease_reply_decode(d, len, &r))
		return;
	uop_t *op = op_find(uc, r.seq);
	int status = r.status;
	uint32_t index = r.index;
	if (!op || op->state != OP_LEASING)
		return;
	if (status) {
		if (op->b) {
			const lc_write_t *w = index < op->b->nwrites ? &op->b->writes[index] : NULL;
			lc__batch_fail(
				op->b, status,
				"ucx://%s:%d rejected write %u (region %u, offset %llu, %llu "
				"bytes, room %llu): %s",
				uc->host, uc->port, index, w ? w->remote_region : 0,
				(unsigned long long)(w ? w->remote_offset : 0),
				(unsigned long long)(w ? w->length : 0),
				(unsigned long long)op->room, lc_strerror(status));
		}
		op_release(op); /* D holds nothing for a refused lease */
		return;
	}
	op->state = OP_LEASED; /* the loop puts (or releases) */
}

/* D's word on what landed is what completes a batch: a write D did not
 * count (its receive failed, or the room was being revoked) fails it. */
void lc__ucx_on_ack(uconn_t *uc, const uint8_t *d, size_t len)
{
	uw_ack_t a;
	if (uw_ack_decode(d, len, &a))
		return;
	uop_t *op = op_find(uc, a.seq);
	uint64_t landed = a.landed;
	if (!op || op->state != OP_DONE_SENT)
		return;
	if (op->b && !op->revoked && op->nput == op->b->nwrites) {
		if (landed == op->b->nwrites)
			lc__batch_applied(op->b, op->b->nwrites - atomic_load(&op->b->applied));
		else
			lc__batch_fail(op->b, LC_ERR_GRANT,
				       "ucx: %s landed %llu of the %zu writes of room %llu",
				       uc->conn->url, (unsigned long long)landed, op->b->nwrites,
				       (unsigned long long)op->room);
	}
	op_release(op);
}

void lc__ucx_on_revoke(uconn_t *uc, const uint8_t *d, size_t len)
{
	uint64_t room;
	if (uw_revoke_decode(d, len, &room))
		return;
	uc_take_new(uc);
	for (uop_t *op = uc->ops.next, *next; op != &uc->ops; op = next) {
		next = op->next;
		if (op->room != room)
			continue;
		if (op->b)
			lc__batch_fail(op->b, LC_ERR_GRANT,
				       "ucx: %s revoked the grant of room %llu", uc->conn->url,
				       (unsigned long long)room);
		if (op->state == OP_NEW)
			op_release(op);
		else
			op->revoked = true; /* a leased op still sends its DONE */
	}
}

static void uc_err(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	uconn_t *uc = arg;
	if (uc->state == UC_DEAD)
		return; /* closed (maybe in the graveyard: uc->conn is gone) */
	bool connected = uc->state == UC_READY;
	int code = lc__ucx_map_status(status, connected);
	if (connected)
		uc_mark_dead(uc, code, "connection to %s broke: %s", uc->conn->url,
			     ucs_status_string(status));
	else
		uc_mark_dead(uc, code, "cannot connect to %s: %s", uc->conn->url,
			     ucs_status_string(status));
	uc->need_close = true; /* not from inside the callback */
}

static void do_connect(ustate_t *st, void *arg)
{
	uconn_t *uc = arg;
	struct sockaddr_storage sa;
	socklen_t salen;
	uc->next = st->conns;
	st->conns = uc;
	uc->started = true;
	uc->connect_deadline =
		lc__now_ns() +
		(uint64_t)lc__ctx_cfg(st->ctx, LC__CFG_connect_timeout_ms) * 1000000ull;
	int rc = lc__ucx_resolve(uc->host, uc->port, false, &sa, &salen);
	if (rc) {
		uc_mark_dead(uc, LC_ERR_UNREACHABLE, "cannot resolve %s", uc->host);
		return;
	}
	ucp_ep_params_t ep = {
		.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
			      UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
		.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
		.sockaddr = {.addr = (const struct sockaddr *)&sa, .addrlen = salen},
		.err_mode = lc__ucx_err_mode(st->ctx),
		.err_handler = {.cb = uc_err, .arg = uc},
	};
	/* The HELLO before the endpoint: an endpoint closed while UCX's
	 * sockcm still connects it can trip UCX 1.13's assertion in
	 * uct_tcp_sockcm_ep_progress_send (faults.alloc_fail.ucx found it). */
	msg_t *m = lc__ucx_msg_new(st, UW_HELLO_LEN);
	if (!m) {
		uc_mark_dead(uc, -ENOMEM, "no memory for the handshake");
		return;
	}
	ucs_status_t s = ucp_ep_create(st->worker, &ep, &uc->ep);
	if (s != UCS_OK) {
		free(m);
		uc->ep = NULL;
		uc_mark_dead(uc, LC_ERR_UNREACHABLE, "cannot connect to %s: %s", uc->conn->url,
			     ucs_status_string(s));
		return;
	}
	uw_hello_t h = {.version = UW_VERSION, .has_token = uc->conn->has_token};
	memcpy(h.token, uc->conn->token.bytes, LC_TOKEN_LEN);
	uw_hello_encode(m->data, &h);
	s = lc__ucx_msg_send(uc->ep, UW_HELLO, m);
	if (s != UCS_OK)
		uc_mark_dead(uc, lc__ucx_map_status(s, false), "handshake with %s: %s",
			     uc->conn->url, ucs_status_string(s));
}

int lc__ucx_conn_open(ustate_t *st, lc_conn_t *c, const char *url)
{
	uconn_t *uc = calloc(1, sizeof *uc);
	int rc;
	if (!uc)
		return -ENOMEM;
	rc = lc__url_host_port(url, "ucx", uc->host, sizeof uc->host, &uc->port);
	if (rc || uc->port == 0) {
		free(uc);
		if (!rc)
			lc__error_set(-EINVAL, "%s: port 0 (connect needs the listener's port)",
				      url);
		return rc ? rc : -EINVAL;
	}
	uc->conn = c;
	uc->st = st;
	uc->ops.next = uc->ops.prev = &uc->ops;
	pthread_mutex_init(&uc->lock, NULL);
	c->priv = uc;
	cmd_t *cmd = calloc(1, sizeof *cmd);
	if (!cmd) {
		pthread_mutex_destroy(&uc->lock);
		free(uc);
		c->priv = NULL;
		return -ENOMEM;
	}
	cmd->fn = do_connect;
	cmd->arg = uc;
	pthread_mutex_lock(&st->lock);
	lc__ucx_cmd_push(st, cmd);
	pthread_mutex_unlock(&st->lock);
	lc__ucx_wake(st);
	return 0;
}

/* Closing an endpoint while UCX is still wiring it up makes UCX 1.13's tcp
 * transport assert (tcp_ep.c: "!(ep->flags & UCT_TCP_EP_FLAG_CTX_TYPE_TX)")
 * when the peer's half of the wireup is then refused. Let a handshake under
 * way finish (or fail) first, for at most this long. */
#define CLOSE_HANDSHAKE_WAIT_NS 2000000000ull

static void do_conn_close(ustate_t *st, void *arg)
{
	uconn_t *uc = arg;
	uint64_t until = lc__now_ns() + CLOSE_HANDSHAKE_WAIT_NS;
	while (uc->started && uc->ep && uc->state == UC_CONNECTING && lc__now_ns() < until)
		ucp_worker_progress(st->worker);
	for (uconn_t **pp = &st->conns; *pp; pp = &(*pp)->next) {
		if (*pp == uc) {
			*pp = uc->next;
			break;
		}
	}
	uc_take_new(uc);
	while (uc->ops.next != &uc->ops)
		op_release(uc->ops.next); /* the generic layer completes them */
	uc_close_ep(uc);
	uc->state = UC_DEAD;
}

void lc__ucx_conn_close(lc_conn_t *c)
{
	uconn_t *uc = c->priv;
	ustate_t *st = uc->st;
	lc__ucx_run_sync(st, do_conn_close, uc);
	for (size_t i = 0; i < uc->nregions; i++) {
		free(uc->regions[i]->rkey_buf);
		free(uc->regions[i]);
	}
	free(uc->regions);
	uc->regions = NULL;
	uc->nregions = 0;
	uc->conn = NULL; /* dead: callbacks that still come return early */
	pthread_mutex_lock(&st->lock);
	uc->next = st->graveyard;
	st->graveyard = uc;
	pthread_mutex_unlock(&st->lock);
	c->priv = NULL;
}

int lc__ucx_post(lc_conn_t *c, lc__batch_t *b)
{
	uconn_t *uc = c->priv;
	uop_t *op = calloc(1, sizeof *op);
	if (!op)
		return -ENOMEM;
	op->rr = malloc(b->nwrites * sizeof *op->rr);
	if (!op->rr) {
		free(op);
		return -ENOMEM;
	}
	op->room = b->room;
	op->st = uc->st;
	/* One-sided writes are checked here against the imported descriptor,
	 * and again by D against its regions and grants before any put. */
	pthread_mutex_lock(&uc->lock);
	int code = uc->dead_code;
	for (size_t i = 0; i < b->nwrites && !code; i++) {
		const lc_write_t *w = &b->writes[i];
		rregion_t *r = lc__ucx_region_find(uc, w->remote_region);
		if (!r) {
			lc__batch_fail(
				b, LC_ERR_REGION,
				"ucx: write %zu names region %u, which was not imported from %s", i,
				w->remote_region, c->url);
			code = LC_ERR_REGION;
		} else if (w->remote_offset > r->length ||
			   w->length > r->length - w->remote_offset) {
			lc__batch_fail(
				b, LC_ERR_OUT_OF_REGION,
				"ucx: write %zu [%llu, +%llu) lies outside region %u of %llu bytes",
				i, (unsigned long long)w->remote_offset,
				(unsigned long long)w->length, r->id,
				(unsigned long long)r->length);
			code = LC_ERR_OUT_OF_REGION;
		}
		op->rr[i] = r;
	}
	if (code) {
		if (uc->dead_code)
			lc__batch_fail(b, uc->dead_code, "%s", uc->dead_reason);
		pthread_mutex_unlock(&uc->lock);
		free(op->rr);
		free(op);
		return 0; /* taken and completed with the failure */
	}
	lc__batch_ref(b);
	op->b = b;
	op->next = NULL;
	if (uc->in_tail)
		uc->in_tail->next = op;
	else
		uc->in_head = op;
	uc->in_tail = op;
	pthread_mutex_unlock(&uc->lock);
	if (!b->defer)
		lc__ucx_wake(uc->st);
	return 0;
}

void lc__ucx_flush(lc_conn_t *c)
{
	uconn_t *uc = c->priv;
	lc__ucx_wake(uc->st);
}

void lc__ucx_room_cancel(lc_conn_t *c, uint64_t room)
{
	/* Batches are completed by the generic layer; ops not yet leased are
	 * dropped by the thread when it sees them completed, and leased ones
	 * finish their flush and release the lease at D. */
	(void)c;
	(void)room;
	lc__ucx_wake(((uconn_t *)c->priv)->st);
}

/* Ops of a dead connection fail with its reason (at a safe point: see
 * uc_mark_dead). */
static void uc_fail_ops(uconn_t *uc)
{
	uc_take_new(uc);
	while (uc->ops.next != &uc->ops) {
		uop_t *op = uc->ops.next;
		pthread_mutex_lock(&uc->lock);
		int code = uc->dead_code;
		char reason[LC_REASON_MAX];
		snprintf(reason, sizeof reason, "%s", uc->dead_reason);
		pthread_mutex_unlock(&uc->lock);
		if (op->b)
			lc__batch_fail(op->b, code, "%s", reason);
		op_release(op);
	}
}

void lc__ucx_send_service(ustate_t *st, uint64_t now)
{
	for (uconn_t *uc = st->conns; uc; uc = uc->next) {
		if (!uc->started)
			continue;
		if (uc->state == UC_CONNECTING && now > uc->connect_deadline) {
			uc_mark_dead(uc, LC_ERR_UNREACHABLE, "no handshake with %s within %lld ms",
				     uc->conn->url,
				     (long long)lc__ctx_cfg(st->ctx, LC__CFG_connect_timeout_ms));
			uc_close_ep(uc);
		}
		uc_pump(uc);
		if (uc->need_close) {
			uc->need_close = false;
			uc_close_ep(uc);
		}
		if (uc->state == UC_DEAD)
			uc_fail_ops(uc);
	}
}

void lc__ucx_send_free(ustate_t *st)
{
	while (st->orphans.next != &st->orphans) {
		uop_t *op = st->orphans.next;
		op_unlink(op);
		op_free(op);
	}
	while (st->graveyard) {
		uconn_t *uc = st->graveyard;
		st->graveyard = uc->next;
		pthread_mutex_destroy(&uc->lock);
		free(uc);
	}
}
