/* Regions: in put mode D maps its regions and packs their keys into
 * descriptors, and P imports them and unpacks the keys on its endpoint; in
 * am mode D publishes nothing and P imports a region by id and length. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/ucx/ucx_int.h"

bool lc__ucx_ensure_rkey(uconn_t *uc, rregion_t *r, ucs_status_t *err)
{
	if (r->rkey && !r->stale)
		return true;
	pthread_mutex_lock(&uc->lock);
	if (r->rkey) {
		ucp_rkey_destroy(r->rkey);
		r->rkey = NULL;
	}
	ucs_status_t s = ucp_ep_rkey_unpack(uc->ep, r->rkey_buf, &r->rkey);
	r->stale = false;
	pthread_mutex_unlock(&uc->lock);
	if (s != UCS_OK) {
		r->rkey = NULL;
		*err = s;
		return false;
	}
	return true;
}

static void map_free(ustate_t *st, umap_t *m)
{
	ucp_rkey_buffer_release(m->rkey);
	ucp_mem_unmap(st->uctx, m->memh);
	free(m);
}

/* Unmap regions that were deregistered (their ids are never reused). */
void lc__ucx_prune_maps(ustate_t *st)
{
	for (umap_t **pp = &st->maps; *pp;) {
		umap_t *m = *pp;
		lc__region_info_t info;
		if (lc__regions_get(&st->ctx->regions, m->id, &info) || info.addr != m->addr ||
		    info.len != m->len) {
			*pp = m->next;
			LC__DEBUG("ucx: unmapping region %u", m->id);
			map_free(st, m);
		} else {
			pp = &m->next;
		}
	}
}

/* Under uc->lock. */
rregion_t *lc__ucx_region_find(uconn_t *uc, uint32_t id)
{
	size_t lo = 0, hi = uc->nregions;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (uc->regions[mid]->id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < uc->nregions && uc->regions[lo]->id == id ? uc->regions[lo] : NULL;
}

int lc__ucx_import_region(lc_conn_t *c, const lc_region_desc_t *desc, const uint8_t *key,
			  size_t key_len)
{
	uconn_t *uc = c->priv;
	uw_key_t k = {0};
	bool put = uc->st->put_mode;
	if (put && uw_key_decode(key, key_len, &k)) {
		LC__WARN_PEER(
			"ucx: put mode: region %u's descriptor carries no ucx key (the receiver "
			"runs in data mode am, or packed before creating its ucx listener)",
			desc->region_id);
		return LC_ERR_PROTO;
	}
	if (!put) /* am mode: D publishes no key, and P uses none */
		k = (uw_key_t){.length = desc->length};
	if (k.length < desc->length) {
		LC__WARN_PEER("ucx: region %u's key maps less than the region", desc->region_id);
		return LC_ERR_PROTO;
	}
	uint8_t *buf = malloc(k.rkey_len ? k.rkey_len : 1);
	if (!buf)
		return -ENOMEM;
	if (k.rkey_len)
		memcpy(buf, k.rkey, k.rkey_len);
	pthread_mutex_lock(&uc->lock);
	rregion_t *r = lc__ucx_region_find(uc, desc->region_id);
	if (!r) {
		if (uc->nregions == uc->rcap) {
			size_t ncap = uc->rcap ? uc->rcap * 2 : 16;
			rregion_t **nr = realloc(uc->regions, ncap * sizeof *nr);
			if (!nr)
				goto nomem;
			uc->regions = nr;
			uc->rcap = ncap;
		}
		r = calloc(1, sizeof *r);
		if (!r)
			goto nomem;
		size_t at = 0;
		while (at < uc->nregions && uc->regions[at]->id < desc->region_id)
			at++;
		memmove(&uc->regions[at + 1], &uc->regions[at],
			(uc->nregions - at) * sizeof *uc->regions);
		uc->regions[at] = r;
		uc->nregions++;
		r->id = desc->region_id;
	} else {
		free(r->rkey_buf);
		r->stale = true;
	}
	r->length = desc->length;
	r->base = k.base;
	r->rkey_buf = buf;
	r->rkey_len = k.rkey_len;
	pthread_mutex_unlock(&uc->lock);
	return 0;
nomem:
	pthread_mutex_unlock(&uc->lock);
	free(buf);
	return -ENOMEM;
}

typedef struct pack_arg {
	lc__region_info_t info;
	uint8_t *buf;
	size_t cap;
	int rc;
} pack_arg_t;

static void do_pack(ustate_t *st, void *arg)
{
	pack_arg_t *a = arg;
	lc__ucx_prune_maps(st);
	umap_t *m;
	for (m = st->maps; m; m = m->next)
		if (m->id == a->info.id && m->addr == a->info.addr && m->len == a->info.len)
			break;
	if (!m) {
		m = calloc(1, sizeof *m);
		if (!m) {
			a->rc = -ENOMEM;
			return;
		}
		ucp_mem_map_params_t mp = {
			.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
				      UCP_MEM_MAP_PARAM_FIELD_LENGTH,
			.address = a->info.addr,
			.length = a->info.len,
		};
		if (!LC__KIND_IS_HOST(a->info.kind)) { /* UCX with CUDA: no probing */
			mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
			mp.memory_type = lc__ucx_mem_type(a->info.kind);
		}
		ucs_status_t s = ucp_mem_map(st->uctx, &mp, &m->memh);
		if (s != UCS_OK) {
			LC__WARN("ucx: mapping region %u: %s", a->info.id, ucs_status_string(s));
			free(m);
			a->rc = lc__ucx_map_status(s, false);
			return;
		}
		s = ucp_rkey_pack(st->uctx, m->memh, &m->rkey, &m->rkey_len);
		if (s != UCS_OK) {
			LC__WARN("ucx: packing the key of region %u: %s", a->info.id,
				 ucs_status_string(s));
			ucp_mem_unmap(st->uctx, m->memh);
			free(m);
			a->rc = lc__ucx_map_status(s, false);
			return;
		}
		m->id = a->info.id;
		m->addr = a->info.addr;
		m->len = a->info.len;
		m->next = st->maps;
		st->maps = m;
	}
	size_t need = UW_KEY_HDR + m->rkey_len;
	if (m->rkey_len > 0xffff || need > a->cap) {
		a->rc = -ENOSPC;
		return;
	}
	uw_key_t k = {.base = (uint64_t)(uintptr_t)m->addr,
		      .length = m->len,
		      .rkey = m->rkey,
		      .rkey_len = m->rkey_len};
	uw_key_encode(a->buf, &k);
	a->rc = (int)need;
}

int lc__ucx_pack_region(ustate_t *st, lc_ctx_t *ctx, const lc_region_t *r, uint8_t *buf, size_t cap)
{
	pthread_mutex_lock(&st->life_lock);
	bool listening = st->nlisteners > 0;
	pthread_mutex_unlock(&st->life_lock);
	pack_arg_t a = {.buf = buf, .cap = cap};
	if (!st->put_mode) /* am mode: no map, no rkey, nothing published */
		return 0;
	if (!LC__KIND_IS_HOST(r->kind) && !lc__ucx_moves_kind(st->memory_types, r->kind)) {
		/* A put lands where UCX itself writes: device memory only with
		 * UCX's CUDA transports (detected at engine start; Debian's UCX
		 * has none); am mode stages it through the seam instead. */
		LC__COUNT(ctx, regions_rejected_kind);
		LC__WARN("ucx: put mode: region %u is device memory (kind %d), which UCX here "
			 "cannot write; use data mode am (ucx_data=0)",
			 r->id, r->kind);
		return LC_ENOTSUP;
	}
	if (listening && !lc__regions_get(&ctx->regions, r->id, &a.info))
		lc__ucx_run_sync(st, do_pack, &a);
	return a.rc;
}

void lc__ucx_maps_free(ustate_t *st)
{
	while (st->maps) {
		umap_t *m = st->maps;
		st->maps = m->next;
		map_free(st, m);
	}
}
