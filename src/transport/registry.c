/* Transports by URL scheme. The references are strong so that static links
 * pull every transport out of the archive; ucx exists only where the build
 * found UCX (LC_HAVE_UCX). */
#include <string.h>

#include "transport/generic.h"
#include "transport/io/io.h"

extern const lc__transport_ops_t lc__loop_ops;
extern const lc__transport_ops_t lc__tcp_ops;
extern const lc__transport_ops_t lc__shm_ops;
#ifdef LC_HAVE_UCX
extern const lc__transport_ops_t lc__ucx_ops;
#define UCX_OPS (&lc__ucx_ops)
#else
#define UCX_OPS NULL
#endif

#define NCANDIDATES 4

static const lc__transport_ops_t *candidates(int i)
{
	switch (i) {
	case 0:
		return &lc__loop_ops;
	case 1:
		return &lc__tcp_ops;
	case 2:
		return &lc__shm_ops;
	case 3:
		return UCX_OPS;
	default:
		return NULL;
	}
}

/* Required ops present? The registry refuses an incomplete table. */
static bool complete(const lc__transport_ops_t *ops)
{
	return ops && ops->scheme && ops->listen && ops->listener_close && ops->conn_open &&
	       ops->conn_close && ops->post;
}

const lc__transport_ops_t *lc__transport_find(const char *url)
{
	const char *sep = url ? strstr(url, "://") : NULL;
	if (!sep)
		return NULL;
	size_t n = (size_t)(sep - url);
	for (int i = 0; i < NCANDIDATES; i++) {
		const lc__transport_ops_t *ops = candidates(i);
		if (complete(ops) && strlen(ops->scheme) == n && !strncmp(ops->scheme, url, n))
			return ops;
	}
	return NULL;
}

static char transport_list[64];
static pthread_once_t transport_list_once = PTHREAD_ONCE_INIT;

static void build_transport_list(void)
{
	for (int i = 0; i < NCANDIDATES; i++) {
		const lc__transport_ops_t *ops = candidates(i);
		if (!complete(ops))
			continue;
		if (transport_list[0])
			strcat(transport_list, ",");
		strcat(transport_list, ops->scheme);
	}
}

const char *lc_transports(void)
{
	pthread_once(&transport_list_once, build_transport_list);
	return transport_list;
}

/* Index of ops in the registry: the slot of its per-context state. */
static int slot_of(const lc__transport_ops_t *ops)
{
	for (int i = 0; i < NCANDIDATES; i++)
		if (candidates(i) == ops)
			return i;
	return -1;
}

int lc__transport_state(lc_ctx_t *ctx, const lc__transport_ops_t *ops, void **out)
{
	int i = slot_of(ops), rc = 0;
	if (i < 0 || !ops->init)
		return -EINVAL;
	pthread_mutex_lock(&ctx->objs_lock);
	if (!ctx->tp_state[i])
		rc = ops->init(ctx, &ctx->tp_state[i]);
	if (!rc)
		*out = ctx->tp_state[i];
	pthread_mutex_unlock(&ctx->objs_lock);
	return rc;
}

void lc__transports_fini(lc_ctx_t *ctx)
{
	for (int i = 0; i < NCANDIDATES; i++) {
		const lc__transport_ops_t *ops = candidates(i);
		if (ctx->tp_state[i] && ops && ops->fini)
			ops->fini(ctx, ctx->tp_state[i]);
		ctx->tp_state[i] = NULL;
	}
	lc__io_destroy(ctx);
}

int lc__transports_pack_region(lc_ctx_t *ctx, const lc_region_t *r, uint8_t *buf, size_t cap)
{
	/* One transport may append keys today; the descriptor has one key
	 * blob, so a second one would need a tagged format. */
	for (int i = 0; i < NCANDIDATES; i++) {
		const lc__transport_ops_t *ops = candidates(i);
		if (complete(ops) && ops->pack_region) {
			pthread_mutex_lock(&ctx->objs_lock);
			void *state = ctx->tp_state[i];
			pthread_mutex_unlock(&ctx->objs_lock);
			return ops->pack_region(ctx, state, r, buf, cap);
		}
	}
	return 0;
}
