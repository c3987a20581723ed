/* Region table. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "core/ctx.h"
#include "core/region.h"

int lc__regions_init(lc__regions_t *t)
{
	memset(t, 0, sizeof *t);
	t->next_id = 1;
	return pthread_rwlock_init(&t->lock, NULL) ? -ENOMEM : 0;
}

void lc__regions_fini(lc__regions_t *t)
{
	for (size_t i = 0; i < t->id_cap; i++)
		free(t->by_id[i]);
	free(t->by_id);
	free(t->by_addr);
	pthread_rwlock_destroy(&t->lock);
	memset(t, 0, sizeof *t);
}

static void fill(const struct lc_region *r, lc__region_info_t *out)
{
	*out = (lc__region_info_t){r->id,           r->addr, r->len,   r->memfd,
				   r->memfd_offset, r->kind, r->device};
}

/* Under lock: index of the first region whose addr > p. */
static size_t upper_bound(const lc__regions_t *t, const uint8_t *p)
{
	size_t lo = 0, hi = t->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->by_addr[mid]->addr <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int lc__regions_add(lc__regions_t *t, lc_ctx_t *ctx, void *addr, size_t len, int memfd,
		    uint64_t memfd_offset, struct lc_region **out)
{
	return lc__regions_add_kind(t, ctx, addr, len, memfd, memfd_offset, LC_MEM_KIND_HOST, 0,
				    out);
}

int lc__regions_add_kind(lc__regions_t *t, lc_ctx_t *ctx, void *addr, size_t len, int memfd,
			 uint64_t memfd_offset, int kind, int device, struct lc_region **out)
{
	uint8_t *p = addr;
	int rc = 0;
	if (!addr || len == 0 || (uintptr_t)p + len < (uintptr_t)p) {
		lc__error_set(-EINVAL, "%s",
			      !addr      ? "address is NULL"
			      : len == 0 ? "length is 0"
					 : "range wraps past the end of the address space");
		return -EINVAL;
	}
	struct lc_region *r = calloc(1, sizeof *r);
	if (!r)
		return -ENOMEM;
	pthread_rwlock_wrlock(&t->lock);
	size_t pos = upper_bound(t, p);
	if ((pos > 0 && t->by_addr[pos - 1]->addr + t->by_addr[pos - 1]->len > p) ||
	    (pos < t->n && t->by_addr[pos]->addr < p + len)) {
		rc = -EEXIST;
		lc__error_set(rc, "the range overlaps a region already registered");
		goto fail;
	}
	if (t->next_id > t->id_cap) {
		size_t ncap = t->id_cap ? t->id_cap * 2 : 16;
		struct lc_region **nb = realloc(t->by_id, ncap * sizeof *nb);
		struct lc_region **na = realloc(t->by_addr, ncap * sizeof *na);
		if (nb)
			t->by_id = nb;
		if (na)
			t->by_addr = na;
		if (!nb || !na) {
			rc = -ENOMEM;
			goto fail;
		}
		memset(t->by_id + t->id_cap, 0, (ncap - t->id_cap) * sizeof *nb);
		t->id_cap = ncap;
	}
	*r = (struct lc_region){ctx, t->next_id++, p, len, memfd, memfd_offset, kind, device};
	t->by_id[r->id - 1] = r;
	memmove(&t->by_addr[pos + 1], &t->by_addr[pos], (t->n - pos) * sizeof *t->by_addr);
	t->by_addr[pos] = r;
	t->n++;
	atomic_fetch_add(&t->gen, 1);
	pthread_rwlock_unlock(&t->lock);
	*out = r;
	return 0;
fail:
	pthread_rwlock_unlock(&t->lock);
	free(r);
	return rc;
}

int lc__regions_remove(lc__regions_t *t, struct lc_region *r)
{
	pthread_rwlock_wrlock(&t->lock);
	if (r->id == 0 || r->id > t->id_cap || t->by_id[r->id - 1] != r) {
		pthread_rwlock_unlock(&t->lock);
		return -EINVAL;
	}
	t->by_id[r->id - 1] = NULL;
	for (size_t i = 0; i < t->n; i++) {
		if (t->by_addr[i] == r) {
			memmove(&t->by_addr[i], &t->by_addr[i + 1],
				(t->n - i - 1) * sizeof *t->by_addr);
			t->n--;
			break;
		}
	}
	atomic_fetch_add(&t->gen, 1);
	pthread_rwlock_unlock(&t->lock);
	free(r);
	return 0;
}

int lc__regions_get(lc__regions_t *t, uint32_t id, lc__region_info_t *out)
{
	int rc = LC_ERR_REGION;
	pthread_rwlock_rdlock(&t->lock);
	if (id >= 1 && id <= t->id_cap && t->by_id[id - 1]) {
		fill(t->by_id[id - 1], out);
		rc = 0;
	}
	pthread_rwlock_unlock(&t->lock);
	return rc;
}

int lc__regions_find(lc__regions_t *t, const void *addr, size_t len, lc__region_info_t *out)
{
	const uint8_t *p = addr;
	int rc = LC_ERR_REGION;
	pthread_rwlock_rdlock(&t->lock);
	size_t pos = upper_bound(t, p);
	if (pos > 0) {
		struct lc_region *r = t->by_addr[pos - 1];
		if (p >= r->addr && (size_t)(p - r->addr) <= r->len &&
		    len <= r->len - (size_t)(p - r->addr)) {
			fill(r, out);
			rc = 0;
		}
	}
	pthread_rwlock_unlock(&t->lock);
	return rc;
}

/* Descriptor layout (little-endian), version 2:
 *   0 u32 magic "LCRD"   4 u16 version   6 u16 key bytes that follow
 *   8 u64 owner         16 u32 region id 20 u32 flags   24 u64 length
 *  32 transport keys: frames of u16 tag, u16 length, key bytes (opaque to
 *     all but their transport, e.g. UCX rkeys). Version 1 had one untagged
 *     key blob. */
#define LC__DESC_MAGIC 0x4452434cu
#define LC__DESC_VERSION 2

int lc__region_keys_check(const uint8_t *keys, size_t len, const char **why)
{
	uint16_t seen[LC__DESC_KEYS_MAX];
	size_t n = 0;
	for (size_t at = 0; at < len;) {
		if (len - at < LC__KEY_FRAME) {
			*why = "a key frame is cut short";
			return LC_ERR_PROTO;
		}
		uint16_t tag = lc__get_u16(keys + at), klen = lc__get_u16(keys + at + 2);
		if (klen > len - at - LC__KEY_FRAME) {
			*why = "a key runs past the descriptor";
			return LC_ERR_PROTO;
		}
		if (tag == 0) {
			*why = "a key has tag 0";
			return LC_ERR_PROTO;
		}
		for (size_t i = 0; i < n; i++)
			if (seen[i] == tag) {
				*why = "two keys have the same tag";
				return LC_ERR_PROTO;
			}
		if (n == LC__DESC_KEYS_MAX) {
			*why = "more keys than any build packs";
			return LC_ERR_PROTO;
		}
		seen[n++] = tag;
		at += LC__KEY_FRAME + klen;
	}
	return 0;
}

int lc__region_key_find(const uint8_t *keys, size_t len, uint16_t tag, const uint8_t **key,
			size_t *key_len)
{
	for (size_t at = 0; at + LC__KEY_FRAME <= len;) {
		uint16_t t = lc__get_u16(keys + at), klen = lc__get_u16(keys + at + 2);
		if (klen > len - at - LC__KEY_FRAME)
			break; /* never in checked keys; a guard all the same */
		if (t == tag) {
			*key = keys + at + LC__KEY_FRAME;
			*key_len = klen;
			return 1;
		}
		at += LC__KEY_FRAME + klen;
	}
	*key = NULL;
	*key_len = 0;
	return 0;
}

void lc__region_desc_header(const struct lc_region *r, uint16_t keys, uint8_t *p)
{
	lc__put_u32(p, LC__DESC_MAGIC);
	lc__put_u16(p + 4, LC__DESC_VERSION);
	lc__put_u16(p + 6, keys);
	lc__put_u64(p + 8, r->ctx->uid);
	lc__put_u32(p + 16, r->id);
	lc__put_u32(p + 20, (r->memfd >= 0 ? LC__DESC_FLAG_MEMFD : 0) |
				    ((uint32_t)(r->kind & 0xff) << LC__DESC_KIND_SHIFT) |
				    ((uint32_t)(r->device & 0xff) << LC__DESC_DEVICE_SHIFT));
	lc__put_u64(p + 24, r->len);
}

int lc_region_unpack(const void *buf, size_t len, lc_region_desc_t *out)
{
	const uint8_t *p = buf;
	if (!buf || !out)
		return LC__FAIL(-EINVAL, "lc_region_unpack: %s is NULL", buf ? "out" : "buf");
	if (len < LC__DESC_HEADER || lc__get_u32(p) != LC__DESC_MAGIC ||
	    lc__get_u16(p + 4) != LC__DESC_VERSION ||
	    LC__DESC_HEADER + (size_t)lc__get_u16(p + 6) != len) {
		lc__error_set(LC_ERR_PROTO, "region descriptor of %zu bytes: %s", len,
			      len < LC__DESC_HEADER              ? "shorter than its header"
			      : lc__get_u32(p) != LC__DESC_MAGIC ? "bad magic"
			      : lc__get_u16(p + 4) != LC__DESC_VERSION
				      ? "unknown version"
				      : "length differs from what it says");
		return LC_ERR_PROTO;
	}
	const char *why = NULL;
	if (lc__region_keys_check(p + LC__DESC_HEADER, len - LC__DESC_HEADER, &why)) {
		lc__error_set(LC_ERR_PROTO, "region descriptor of %zu bytes: %s", len, why);
		return LC_ERR_PROTO;
	}
	out->owner = lc__get_u64(p + 8);
	out->region_id = lc__get_u32(p + 16);
	out->flags = lc__get_u32(p + 20);
	out->length = lc__get_u64(p + 24);
	out->mem_kind = (int32_t)((out->flags >> LC__DESC_KIND_SHIFT) & 0xff);
	out->device = (int32_t)((out->flags >> LC__DESC_DEVICE_SHIFT) & 0xff);
	if (out->region_id == 0 || out->mem_kind > LC_MEM_KIND_SIM)
		return LC_ERR_PROTO;
	return 0;
}

uint32_t lc_region_id(const lc_region_t *r)
{
	return r ? r->id : 0;
}

void *lc_region_addr(const lc_region_t *r)
{
	return r ? r->addr : NULL;
}

size_t lc_region_length(const lc_region_t *r)
{
	return r ? r->len : 0;
}

int lc_region_kind(const lc_region_t *r)
{
	return r ? r->kind : LC_MEM_KIND_HOST;
}
