/* Active messages: the dispatch of every message id to P's (send.c) and
 * D's (recv.c) handlers, registered on the worker when the engine starts. */
#include "transport/ucx/ucx_int.h"

static ucs_status_t am_cb(void *arg, const void *header, size_t header_length, void *data,
			  size_t length, const ucp_am_recv_param_t *param, unsigned id)
{
	ustate_t *st = arg;
	st->last_activity = lc__now_ns();
	if (id == UW_WRITE) {
		sconn_t *sc = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
				      ? lc__ucx_sc_by_ep(st, param->reply_ep)
				      : NULL;
		if (sc && !sc->authed) { /* dropped: a rendezvous is never pulled */
			lc__ucx_on_unauthed(st, sc, id);
			return UCS_OK;
		}
		lc__ucx_on_write(st, sc, header, header_length, data, length,
				 (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0);
		return UCS_OK;
	}
	if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
		LC__COUNT(st->ctx, frames_malformed);
		return UCS_OK;
	}
	if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
		LC__COUNT(st->ctx, frames_malformed);
		return UCS_OK;
	}
	ucp_ep_h ep = param->reply_ep;
	const uint8_t *d = data;
	switch (id) {
	case UW_HELLO:
	case UW_LEASE:
	case UW_DONE: {
		sconn_t *sc = lc__ucx_sc_by_ep(st, ep);
		if (!sc || sc->rejected)
			break;
		if (id != UW_HELLO && !sc->authed)
			lc__ucx_on_unauthed(st, sc, id);
		else if (id == UW_HELLO)
			lc__ucx_on_hello(st, sc, d, length);
		else if (id == UW_LEASE)
			lc__ucx_on_lease(st, sc, d, length);
		else
			lc__ucx_on_done(st, sc, d, length);
		break;
	}
	default: {
		uconn_t *uc = lc__ucx_uc_by_ep(st, ep);
		if (!uc)
			break;
		if (id == UW_HELLO_REPLY)
			lc__ucx_on_hello_reply(uc, d, length);
		else if (id == UW_LEASE_REPLY)
			lc__ucx_on_lease_reply(uc, d, length);
		else if (id == UW_ACK)
			lc__ucx_on_ack(uc, d, length);
		else if (id == UW_REVOKE)
			lc__ucx_on_revoke(uc, d, length);
		break;
	}
	}
	return UCS_OK;
}

#define AM_HANDLER(name, id)                                                                       \
	static ucs_status_t name(void *arg, const void *h, size_t hl, void *d, size_t l,           \
				 const ucp_am_recv_param_t *p)                                     \
	{                                                                                          \
		return am_cb(arg, h, hl, d, l, p, id);                                             \
	}
AM_HANDLER(am_hello, UW_HELLO)
AM_HANDLER(am_hello_reply, UW_HELLO_REPLY)
AM_HANDLER(am_lease, UW_LEASE)
AM_HANDLER(am_lease_reply, UW_LEASE_REPLY)
AM_HANDLER(am_done, UW_DONE)
AM_HANDLER(am_ack, UW_ACK)
AM_HANDLER(am_revoke, UW_REVOKE)
AM_HANDLER(am_write, UW_WRITE)

int lc__ucx_register_handlers(ustate_t *st, ucs_status_t *sp)
{
	static const struct {
		unsigned id;
		ucp_am_recv_callback_t cb;
	} handlers[] = {
		{UW_HELLO, am_hello},   {UW_HELLO_REPLY, am_hello_reply},
		{UW_LEASE, am_lease},   {UW_LEASE_REPLY, am_lease_reply},
		{UW_DONE, am_done},     {UW_ACK, am_ack},
		{UW_REVOKE, am_revoke}, {UW_WRITE, am_write},
	};
	for (size_t i = 0; i < LC__ARRAY_SIZE(handlers); i++) {
		ucp_am_handler_param_t hp = {
			.field_mask =
				UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
				UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
			.id = handlers[i].id,
			.flags = UCP_AM_FLAG_WHOLE_MSG,
			.cb = handlers[i].cb,
			.arg = st,
		};
		*sp = ucp_worker_set_am_recv_handler(st->worker, &hp);
		if (*sp != UCS_OK)
			return -1;
	}
	return 0;
}
