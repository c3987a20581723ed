/* The ucx transport's ops table (src/transport/ucx/ucx_int.h has the design). */
#include "transport/ucx/ucx_int.h"

/* The entry points that start or stop the context's engine hold a
 * reference on it around the folder's own functions, so that none of
 * those calls back up into engine.c. */
static int ucx_listen(lc_listener_t *l, const char *url)
{
	ustate_t *st;
	int rc = lc__ucx_state_get(l->ctx_state, true, true, &st);
	if (rc)
		return rc;
	rc = lc__ucx_listen(st, l, url);
	if (rc)
		lc__ucx_state_put(st, true);
	return rc;
}

static void ucx_listener_close(lc_listener_t *l)
{
	ustate_t *st = ((ulistener_t *)l->priv)->st;
	lc__ucx_listener_close(l);
	lc__ucx_state_put(st, true);
}

static int ucx_conn_open(lc_conn_t *c, const char *url, const lc_conn_params_t *p)
{
	ustate_t *st;
	(void)p;
	int rc = lc__ucx_state_get(c->ctx_state, true, false, &st);
	if (rc)
		return rc;
	rc = lc__ucx_conn_open(st, c, url);
	if (rc)
		lc__ucx_state_put(st, false);
	return rc;
}

static void ucx_conn_close(lc_conn_t *c)
{
	ustate_t *st = ((uconn_t *)c->priv)->st;
	lc__ucx_conn_close(c);
	lc__ucx_state_put(st, false);
}

/* Only a context that receives over ucx in put mode maps its memory:
 * packing for tcp or shm must not start UCX. */
static int ucx_pack_region(lc_ctx_t *ctx, void *state, const lc_region_t *r, uint8_t *buf,
			   size_t cap)
{
	ustate_t *st;
	if (!state || lc__ucx_state_get(state, false, false, &st))
		return 0;
	int rc = lc__ucx_pack_region(st, ctx, r, buf, cap);
	lc__ucx_state_put(st, false);
	return rc;
}

/* UCX with CUDA: device sources go to UCX as they are, in am mode (put
 * mode refuses device regions at pack time unless UCX has CUDA too, and
 * puts read the source the same way). */
static bool ucx_moves_kind(lc_conn_t *c, int kind, int device)
{
	ustate_t *st = ((uconn_t *)c->priv)->st;
	(void)device;
	return st->cuda_direct && lc__ucx_moves_kind(st->memory_types, kind);
}

const lc__transport_ops_t lc__ucx_ops = {
	.scheme = "ucx",
	.caps = LC__TP_REMOTE | LC__TP_HOST_PORT | LC__TP_SENDER_BOUNDS | LC__TP_NEEDS_LIB,
	.key_tag = LC__KEY_TAG_UCX,
	.init = lc__ucx_init,
	.fini = lc__ucx_fini,
	.listener = {.listen = ucx_listen, .close = ucx_listener_close},
	.conn = {.open = ucx_conn_open,
		 .close = ucx_conn_close,
		 .post = lc__ucx_post,
		 .flush = lc__ucx_flush,
		 .room_cancel = lc__ucx_room_cancel,
		 .import_region = lc__ucx_import_region},
	.memory = {.pack_region = ucx_pack_region, .moves_kind = ucx_moves_kind},
};
