/* The context's own state: configuration, counters and accepted tokens.
 * Creating and destroying a context, which also reaches the transports,
 * is src/transport/ctx.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"

static const char *const counter_names[] = {
#define LC__CNT_NAME(name) #name,
	LC__COUNTERS(LC__CNT_NAME)
#undef LC__CNT_NAME
};

int lc__ctx_init(lc_ctx_t *ctx, const char *name)
{
	int rc;
	snprintf(ctx->name, sizeof ctx->name, "%s", name ? name : "ctx");
	/* The owner id in every region descriptor: random or no context. */
	rc = lc__random_u64(&ctx->uid);
	if (rc)
		return rc;
	pthread_mutex_init(&ctx->cfg_lock, NULL);
	pthread_mutex_init(&ctx->token_lock, NULL);
	pthread_mutex_init(&ctx->objs_lock, NULL);
	pthread_mutex_init(&ctx->copy_lock, NULL);
	lc__config_load(&ctx->cfg);
	rc = lc__regions_init(&ctx->regions);
	if (rc)
		goto fail_locks;
	rc = lc__grant_table_create(&ctx->grants);
	if (rc)
		goto fail_regions;
	lc__grant_set_intervals_max(ctx->grants, (uint64_t)LC__CFG(&ctx->cfg, grant_intervals_max));
	return 0;

fail_regions:
	lc__regions_fini(&ctx->regions);
fail_locks:
	pthread_mutex_destroy(&ctx->copy_lock);
	pthread_mutex_destroy(&ctx->objs_lock);
	pthread_mutex_destroy(&ctx->token_lock);
	pthread_mutex_destroy(&ctx->cfg_lock);
	return rc;
}

void lc__ctx_fini(lc_ctx_t *ctx)
{
	pthread_mutex_destroy(&ctx->copy_lock); /* engines: lc__copiers_fini */
	lc__grant_table_destroy(ctx->grants);
	lc__regions_fini(&ctx->regions);
	free(ctx->tokens);
	pthread_mutex_destroy(&ctx->objs_lock);
	pthread_mutex_destroy(&ctx->token_lock);
	pthread_mutex_destroy(&ctx->cfg_lock);
}

int64_t lc__ctx_cfg(lc_ctx_t *ctx, enum lc__config_field field)
{
	pthread_mutex_lock(&ctx->cfg_lock);
	int64_t v = ctx->cfg.values[field];
	pthread_mutex_unlock(&ctx->cfg_lock);
	return v;
}

int lc_ctx_config_get_int(lc_ctx_t *ctx, const char *name, int64_t *out)
{
	if (!ctx || !out)
		return LC__FAIL(-EINVAL, "config get: %s is NULL", ctx ? "out" : "ctx");
	int i = lc__config_find(name);
	if (i < 0) {
		lc__error_set(i, "config: no knob named '%.100s'%s", name ? name : "(NULL)",
			      lc__config_find_str(name) >= 0 ? " with an integer value" : "");
		return i;
	}
	*out = lc__ctx_cfg(ctx, (enum lc__config_field)i);
	return 0;
}

int lc_ctx_config_get(lc_ctx_t *ctx, const char *name, char *buf, size_t cap)
{
	int64_t v;
	int s = lc__config_find_str(name);
	if (ctx && buf && s >= 0) {
		const char *text = lc__config_env_str((enum lc__config_str_field)s);
		if (text && s == LC__CFGS_shared_secret)
			text = "(set)"; /* never the secret itself: info --config prints it */
		int n = snprintf(buf, cap, "%s", text ? text : "");
		return n < 0 || (size_t)n >= cap ? -ENOSPC : n;
	}
	int rc = lc_ctx_config_get_int(ctx, name, &v);
	if (rc)
		return rc;
	if (!buf)
		return LC__FAIL(-EINVAL, "config get %s: buf is NULL", name);
	int n = snprintf(buf, cap, "%lld", (long long)v);
	return n < 0 || (size_t)n >= cap ? -ENOSPC : n;
}

int lc_ctx_config_set(lc_ctx_t *ctx, const char *name, const char *value)
{
	int64_t v;
	if (!ctx)
		return LC__FAIL(-EINVAL, "config set: ctx is NULL");
	if (lc__config_find_str(name) >= 0) /* process-wide: set through its variable */
		return LC__FAIL(-ENOTSUP,
				"config set %s: a process-wide text knob, set through "
				"its environment variable",
				name);
	int i = lc__config_find(name);
	if (i < 0)
		return LC__FAIL(i, "config set: no knob named '%.100s'", name ? name : "(NULL)");
	int rc = lc__config_parse(i, value, &v);
	if (rc) {
		lc_config_info_t const *info = lc_config_info(i);
		return LC__FAIL(rc, "config set %s=%.100s: %s (allowed %lld..%lld)", name,
				value ? value : "(NULL)",
				rc == -ERANGE ? "out of range" : "not a number",
				(long long)info->min, (long long)info->max);
	}
	pthread_mutex_lock(&ctx->cfg_lock);
	ctx->cfg.values[i] = v;
	pthread_mutex_unlock(&ctx->cfg_lock);
	if (i == LC__CFG_grant_intervals_max)
		lc__grant_set_intervals_max(ctx->grants, (uint64_t)v);
	return 0;
}

int lc_counter_count(void)
{
	return LC__CNT_COUNT;
}

const char *lc_counter_name(int index)
{
	return index >= 0 && index < LC__CNT_COUNT ? counter_names[index] : NULL;
}

int lc_ctx_counter(lc_ctx_t *ctx, int index, uint64_t *out)
{
	if (!ctx || !out)
		return LC__FAIL(-EINVAL, "lc_ctx_counter: %s is NULL", !ctx ? "ctx" : "out");
	if (index < 0 || index >= LC__CNT_COUNT)
		return LC__FAIL(-ERANGE, "lc_ctx_counter: index %d is not in 0..%d", index,
				LC__CNT_COUNT - 1);
	*out = atomic_load(&ctx->counters[index]);
	return 0;
}

int lc_ctx_counter_by_name(lc_ctx_t *ctx, const char *name, uint64_t *out)
{
	if (!ctx || !name || !out)
		return LC__FAIL(-EINVAL, "counter: %s is NULL",
				!ctx    ? "ctx"
				: !name ? "name"
					: "out");
	for (int i = 0; i < LC__CNT_COUNT; i++) {
		if (!strcmp(counter_names[i], name)) {
			*out = atomic_load(&ctx->counters[i]);
			return 0;
		}
	}
	lc__error_set(-ENOENT, "no counter named '%.100s'", name);
	return -ENOENT;
}

/* ---- tokens ---- */

int lc_token_issue(lc_ctx_t *ctx, lc_token_t *out)
{
	if (!ctx || !out)
		return LC__FAIL(-EINVAL, "lc_token_issue: %s is NULL", !ctx ? "ctx" : "out");
	lc_token_t t;
	int rc = lc__random_bytes(t.bytes, LC_TOKEN_LEN);
	if (rc) {
		LC__COUNT(ctx, random_failures);
		LC__ERROR("context %s: no token issued: the kernel gave no random bytes",
			  ctx->name);
		return rc;
	}
	pthread_mutex_lock(&ctx->token_lock);
	if (ctx->ntokens == ctx->token_cap) {
		size_t ncap = ctx->token_cap ? ctx->token_cap * 2 : 8;
		lc__token_slot_t *nt = realloc(ctx->tokens, ncap * sizeof *nt);
		if (!nt) {
			pthread_mutex_unlock(&ctx->token_lock);
			return -ENOMEM;
		}
		ctx->tokens = nt;
		ctx->token_cap = ncap;
	}
	ctx->tokens[ctx->ntokens++] = (lc__token_slot_t){.token = t, .id = ++ctx->token_ids};
	pthread_mutex_unlock(&ctx->token_lock);
	*out = t;
	return 0;
}

/* Constant-time comparison: the token is a secret. */
static bool token_equal(const uint8_t *a, const uint8_t *b)
{
	uint8_t diff = 0;
	for (int i = 0; i < LC_TOKEN_LEN; i++)
		diff |= (uint8_t)(a[i] ^ b[i]);
	return diff == 0;
}

/* Under token_lock: the slot of token, or NULL. Every slot is compared, so
 * the time taken says nothing of which one matched. */
static lc__token_slot_t *token_find(lc_ctx_t *ctx, const uint8_t *token)
{
	lc__token_slot_t *hit = NULL;
	for (size_t i = 0; i < ctx->ntokens; i++)
		if (token_equal(ctx->tokens[i].token.bytes, token))
			hit = &ctx->tokens[i];
	return hit;
}

int lc_token_revoke(lc_ctx_t *ctx, const lc_token_t *token)
{
	int rc = -ENOENT;
	if (!ctx || !token)
		return LC__FAIL(-EINVAL, "lc_token_revoke: %s is NULL", !ctx ? "ctx" : "token");
	pthread_mutex_lock(&ctx->token_lock);
	lc__token_slot_t *s = token_find(ctx, token->bytes);
	if (s) {
		*s = ctx->tokens[--ctx->ntokens];
		rc = 0;
	}
	pthread_mutex_unlock(&ctx->token_lock);
	return rc;
}

bool lc__ctx_token_accepted(lc_ctx_t *ctx, const uint8_t *token, bool has_token, uint64_t *who)
{
	bool open = lc__ctx_cfg(ctx, LC__CFG_require_token) == 0;
	uint64_t id = 0;
	if (has_token && token) {
		pthread_mutex_lock(&ctx->token_lock);
		const lc__token_slot_t *s = token_find(ctx, token);
		id = s ? s->id : 0;
		pthread_mutex_unlock(&ctx->token_lock);
	}
	if (who)
		*who = id;
	return open || id != 0;
}

int lc__ctx_token_id(lc_ctx_t *ctx, const lc_token_t *token, uint64_t *id)
{
	pthread_mutex_lock(&ctx->token_lock);
	const lc__token_slot_t *s = token_find(ctx, token->bytes);
	if (s)
		*id = s->id;
	pthread_mutex_unlock(&ctx->token_lock);
	return s ? 0 : -ENOENT;
}

/* ---- grants: what peers may write, per room ---- */

int lc_grant_issue(lc_ctx_t *ctx, uint64_t room, const lc_region_t *r, uint64_t offset,
		   uint64_t length)
{
	if (!ctx || !r || r->ctx != ctx)
		return LC__FAIL(-EINVAL, "lc_grant_issue: %s",
				!ctx ? "ctx is NULL"
				: !r ? "region is NULL"
				     : "the region belongs to another context");
	if (length == 0 || offset > r->len || length > r->len - offset)
		return LC__FAIL(LC_ERR_OUT_OF_REGION,
				"grant of room %llu: %llu bytes at %llu are not inside region %u "
				"(%zu bytes)",
				(unsigned long long)room, (unsigned long long)length,
				(unsigned long long)offset, r->id, r->len);
	int rc = lc__grant_issue(ctx->grants, room, r->id, offset, length);
	if (!rc)
		LC__COUNT(ctx, grants_added);
	return rc;
}

int lc_grant_bind(lc_ctx_t *ctx, uint64_t room, const lc_token_t *token)
{
	uint64_t id;
	if (!ctx || !token)
		return LC__FAIL(-EINVAL, "lc_grant_bind: %s is NULL", !ctx ? "ctx" : "token");
	if (lc__ctx_token_id(ctx, token, &id))
		return LC__FAIL(-ENOENT,
				"lc_grant_bind of room %llu: the token is not one this context "
				"issued, or it was revoked",
				(unsigned long long)room);
	return lc__grant_bind(ctx->grants, room, id);
}

int lc_grant_revoke(lc_ctx_t *ctx, uint64_t room)
{
	if (!ctx)
		return LC__FAIL(-EINVAL, "lc_grant_revoke: ctx is NULL");
	int n = lc__grant_revoke(ctx->grants, room);
	if (n > 0)
		LC__COUNT(ctx, grants_revoked);
	return n;
}
