/* The registry: every transport a build has, one line each, with the build
 * switch that has it beside it (docs/architecture.md "Adding a
 * transport"). The references are strong so that static links pull every
 * transport out of the archive. A slot's index is also the slot of the
 * transport's per-context state (ctx->ctx_state). */
#include <string.h>

#include "transport/generic.h"
#include "transport/io/io.h"

extern const lc__transport_ops_t lc__loop_ops, lc__tcp_ops, lc__shm_ops;
#ifdef LC_HAVE_UCX
extern const lc__transport_ops_t lc__ucx_ops;
#endif
#ifdef LC_TEST_TRANSPORT /* a test build's transport (tests/transports/), never shipped */
extern const lc__transport_ops_t LC_TEST_TRANSPORT;
#endif

static const lc__transport_ops_t *const registry[] = {
	&lc__loop_ops, /* loop.c */
	&lc__tcp_ops,  /* tcp/ */
	&lc__shm_ops,  /* shm/ */
#ifdef LC_HAVE_UCX
	&lc__ucx_ops, /* ucx/ */
#endif
#ifdef LC_TEST_TRANSPORT
	&LC_TEST_TRANSPORT,
#endif
};

#define NREGISTERED LC__ARRAY_SIZE(registry)
_Static_assert(LC__ARRAY_SIZE(registry) <= LC__TRANSPORT_SLOTS, "more transports than slots");
_Static_assert(LC__ARRAY_SIZE(registry) <= LC__DESC_KEYS_MAX, "more transports than keys");

/* Required ops present? The registry refuses an incomplete table. */
static bool complete(const lc__transport_ops_t *ops)
{
	return ops->scheme && ops->listener.listen && ops->listener.close && ops->conn.open &&
	       ops->conn.close && ops->conn.post && (!ops->memory.pack_region || ops->key_tag);
}

const lc__transport_ops_t *lc__transport_find(const char *url)
{
	const char *sep = url ? strstr(url, "://") : NULL;
	if (!sep)
		return NULL;
	size_t n = (size_t)(sep - url);
	for (size_t i = 0; i < NREGISTERED; i++) {
		const lc__transport_ops_t *ops = registry[i];
		if (complete(ops) && strlen(ops->scheme) == n && !strncmp(ops->scheme, url, n))
			return ops;
	}
	return NULL;
}

static char transport_list[64];
static pthread_once_t transport_list_once = PTHREAD_ONCE_INIT;

static void build_transport_list(void)
{
	for (size_t i = 0; i < NREGISTERED; i++) {
		const lc__transport_ops_t *ops = registry[i];
		if (!complete(ops) ||
		    strlen(transport_list) + strlen(ops->scheme) + 2 > sizeof transport_list)
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
	for (size_t i = 0; i < NREGISTERED; i++)
		if (registry[i] == ops)
			return (int)i;
	return -1;
}

int lc__transport_state(lc_ctx_t *ctx, const lc__transport_ops_t *ops, void **out)
{
	int i = slot_of(ops), rc = 0;
	if (i < 0 || !ops->init)
		return -EINVAL;
	pthread_mutex_lock(&ctx->objs_lock);
	if (!ctx->ctx_state[i])
		rc = ops->init(ctx, &ctx->ctx_state[i]);
	if (!rc)
		*out = ctx->ctx_state[i];
	pthread_mutex_unlock(&ctx->objs_lock);
	return rc;
}

void lc__transports_fini(lc_ctx_t *ctx)
{
	for (size_t i = 0; i < NREGISTERED; i++) {
		const lc__transport_ops_t *ops = registry[i];
		if (ctx->ctx_state[i] && ops->fini)
			ops->fini(ctx, ctx->ctx_state[i]);
		ctx->ctx_state[i] = NULL;
	}
	lc__io_destroy(ctx);
}

/* One transport's key for r, framed by its tag: the frame's bytes, or 0
 * where it packs none for r. */
static int pack_one(lc_ctx_t *ctx, size_t i, const lc_region_t *r, uint8_t *buf, size_t cap)
{
	const lc__transport_ops_t *ops = registry[i];
	size_t kcap = cap >= LC__KEY_FRAME ? cap - LC__KEY_FRAME : 0; /* 0: packing none fits */
	pthread_mutex_lock(&ctx->objs_lock);
	void *state = ctx->ctx_state[i];
	pthread_mutex_unlock(&ctx->objs_lock);
	int n = ops->memory.pack_region(ctx, state, r, kcap ? buf + LC__KEY_FRAME : buf, kcap);
	if (n <= 0)
		return n;
	if ((size_t)n > kcap)
		return -ENOSPC;
	if (n > 0xffff)
		return -EMSGSIZE;
	lc__put_u16(buf, ops->key_tag);
	lc__put_u16(buf + 2, (uint16_t)n);
	return LC__KEY_FRAME + n;
}

int lc__transports_pack_region(lc_ctx_t *ctx, const lc_region_t *r, uint8_t *buf, size_t cap)
{
	size_t at = 0;
	for (size_t i = 0; i < NREGISTERED; i++) {
		if (!complete(registry[i]) || !registry[i]->memory.pack_region)
			continue;
		int n = pack_one(ctx, i, r, buf + at, cap - at);
		if (n < 0)
			return n;
		at += (size_t)n;
	}
	return (int)at;
}
