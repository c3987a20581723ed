/* Creating and destroying contexts (the public lc_ctx_create/destroy). The
 * context's own state is core's (src/core/ctx.c); its lifetime is here, in
 * the lowest layer that reaches both that state and the transports, which
 * tear down their connections, listeners and per-context state here. */
#include <errno.h>
#include <stdlib.h>

#include "core/copier.h"
#include "core/ctx.h"
#include "core/params.h"
#include "transport/generic.h"
#include "transport/stage.h"

int lc_ctx_create(const lc_ctx_params_t *params, lc_ctx_t **out)
{
	lc_ctx_params_t p;
	int rc;
	lc_last_error_clear();
	if (!out)
		return LC__FAIL(-EINVAL, "lc_ctx_create: out is NULL");
	LC__PARAMS_COPY(&p, params);
	lc_ctx_t *ctx = calloc(1, sizeof *ctx);
	if (!ctx)
		return -ENOMEM;
	rc = lc__ctx_init(ctx, p.name);
	if (rc)
		goto fail_alloc;
	LC__DEBUG("context %s created (owner %016llx)", ctx->name, (unsigned long long)ctx->uid);
	*out = ctx;
	return 0;

fail_alloc:
	free(ctx);
	return rc;
}

void lc_ctx_destroy(lc_ctx_t *ctx)
{
	if (!ctx)
		return;
	while (ctx->conns)
		lc_conn_destroy(ctx->conns);
	while (ctx->listeners)
		lc_listener_destroy(ctx->listeners);
	lc__transports_fini(ctx);
	lc__stage_fini(ctx);
	lc__copiers_fini(ctx);
	lc__ctx_fini(ctx);
	free(ctx);
}
