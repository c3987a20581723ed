/* Layout table, the standard pool builders and the geometry fingerprint. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/layout.h"
#include "core/params.h"

static uint64_t fingerprint(const lc_layout_t *l)
{
	uint64_t h = lc__fnv1a(LC__FNV_INIT, "layercake-layout-1", 18);
	uint8_t rec[24];
	lc__put_u32(rec, l->nbuf);
	lc__put_u32(rec + 4, l->layers);
	h = lc__fnv1a(h, rec, 8);
	for (uint32_t i = 0; i < l->nbuf; i++) {
		const lc_buffer_t *b = &l->bufs[i];
		lc__put_u64(rec, b->item_len);
		lc__put_u32(rec + 8, (uint32_t)b->layer);
		lc__put_u32(rec + 12, b->kind);
		lc__put_u32(rec + 16, b->flags);
		lc__put_u32(rec + 20, 0);
		h = lc__fnv1a(h, rec, sizeof(rec));
	}
	return h;
}

void lc_layout_destroy(lc_layout_t *l)
{
	if (!l)
		return;
	free(l->bufs);
	free(l->layer_start);
	free(l->layer_buf);
	free(l->rows);
	free(l);
}

int lc_layout_create(const lc_buffer_t *buffers, size_t n, lc_layout_t **out)
{
	lc_layout_t *l;
	int32_t max_layer = -1;
	if (!buffers || !n || !out || n > UINT32_MAX / 2)
		return LC__FAIL(-EINVAL, "layout: %s",
				!buffers ? "buffers is NULL"
				: !out   ? "out is NULL"
				: !n     ? "no buffers"
					 : "too many buffers");
	for (size_t i = 0; i < n; i++) {
		const lc_buffer_t *b = &buffers[i];
		if (b->layer < 0 || b->item_len == 0 || b->length % b->item_len ||
		    b->kind > LC_BUFFER_OTHER || b->rows > LC_WRITE_MAX_COUNT ||
		    (b->rows > 1 && b->item_len % b->rows)) {
			return LC__FAIL(
				-EINVAL,
				"layout: buffer %zu is invalid (layer %d, item_len %llu, "
				"length %llu, kind %u, rows %u): %s",
				i, b->layer, (unsigned long long)b->item_len,
				(unsigned long long)b->length, b->kind, b->rows,
				b->layer < 0                   ? "layer < 0"
				: b->item_len == 0             ? "item_len 0"
				: b->length % b->item_len      ? "length not a multiple of item_len"
				: b->kind > LC_BUFFER_OTHER    ? "unknown kind"
				: b->rows > LC_WRITE_MAX_COUNT ? "too many rows"
							       : "item_len not a multiple of rows");
		}
		max_layer = LC__MAX(max_layer, b->layer);
	}
	if (max_layer >= (1 << 20))
		return LC__FAIL(-EINVAL, "layout: layer %d, at most %d", max_layer, (1 << 20) - 1);
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->nbuf = (uint32_t)n;
	l->layers = (uint32_t)max_layer + 1;
	l->bufs = malloc(n * sizeof(*l->bufs));
	l->layer_start = calloc(l->layers + 1, sizeof(uint32_t));
	l->layer_buf = malloc(n * sizeof(uint32_t));
	l->rows = malloc(n * sizeof(uint32_t));
	if (!l->bufs || !l->layer_start || !l->layer_buf || !l->rows) {
		lc_layout_destroy(l);
		return -ENOMEM;
	}
	memcpy(l->bufs, buffers, n * sizeof(*l->bufs));
	for (size_t i = 0; i < n; i++)
		l->rows[i] = buffers[i].rows;
	/* Counting sort by layer keeps buffer order within a layer. */
	for (size_t i = 0; i < n; i++)
		l->layer_start[buffers[i].layer + 1]++;
	for (uint32_t k = 0; k < l->layers; k++)
		l->layer_start[k + 1] += l->layer_start[k];
	{
		uint32_t *fill = calloc(l->layers, sizeof(uint32_t));
		if (!fill) {
			lc_layout_destroy(l);
			return -ENOMEM;
		}
		for (size_t i = 0; i < n; i++) {
			uint32_t k = (uint32_t)buffers[i].layer;
			l->layer_buf[l->layer_start[k] + fill[k]++] = (uint32_t)i;
		}
		free(fill);
	}
	l->fingerprint = fingerprint(l);
	*out = l;
	return 0;
}

int lc__layout_clone(const lc_layout_t *src, lc_layout_t **out)
{
	return lc_layout_create(src->bufs, src->nbuf, out);
}

/* Per-layer components of each model: kinds, and which item_len they use. */
static int model_components(uint32_t model, uint32_t kinds[3])
{
	switch (model) {
	case LC_LAYOUT_MHA:
		kinds[0] = LC_BUFFER_K;
		kinds[1] = LC_BUFFER_V;
		return 2;
	case LC_LAYOUT_MLA:
		kinds[0] = LC_BUFFER_LATENT;
		return 1;
	case LC_LAYOUT_MLA_PER_TOKEN_HEAD:
		kinds[0] = kinds[1] = kinds[2] = LC_BUFFER_QUANT;
		return 3;
	case LC_LAYOUT_DSA:
		kinds[0] = LC_BUFFER_LATENT;
		kinds[1] = LC_BUFFER_INDEX;
		return 2;
	default:
		return -EINVAL;
	}
}

int lc_layout_build(const lc_layout_params_t *params, lc_layout_t **out)
{
	uint32_t kinds[3];
	int ncomp;
	size_t n, i = 0;
	int32_t max_id = -1, draft_base;
	lc_buffer_t *bufs;
	int rc;

	lc_layout_params_t copy;

	/* The input is named before the output, as in lc_layout_create. */
	if (!params)
		return LC__FAIL(-EINVAL, "layout builder: params is NULL");
	LC__PARAMS_TAKE("layout builder", out, "out", &copy, params, "params", lc_layout_params_t,
			layers);
	const lc_layout_params_t *p = &copy;
	ncomp = model_components(p->model, kinds);
	if (ncomp < 0 || p->layers == 0 || !p->item_len[0] || !p->pages) {
		return LC__FAIL(-EINVAL, "layout: bad builder parameters (model %u, layers %u): %s",
				p->model, p->layers,
				ncomp < 0         ? "unknown model"
				: p->layers == 0  ? "no layers"
				: !p->item_len[0] ? "item_len[0] is 0"
						  : "no pages");
	}
	if (p->state_components &&
	    (!p->state_layers || !p->state_layer_ids || !p->state_item_len || !p->state_slots))
		return LC__FAIL(-EINVAL, "layout: state_components set but %s is not set",
				!p->state_layers      ? "state_layers"
				: !p->state_layer_ids ? "state_layer_ids"
				: !p->state_item_len  ? "state_item_len"
						      : "state_slots");
	n = (size_t)ncomp * (p->layers + p->draft_layers) +
	    (size_t)p->state_components * p->state_layers;
	bufs = calloc(n, sizeof(*bufs));
	if (!bufs)
		return -ENOMEM;

	for (uint32_t l = 0; l < p->layers; l++)
		max_id = LC__MAX(max_id, p->kv_layer_ids ? p->kv_layer_ids[l] : (int32_t)l);
	for (uint32_t s = 0; s < p->state_layers && p->state_components; s++)
		max_id = LC__MAX(max_id, p->state_layer_ids[s]);
	/* Draft ids follow every target id, KV and state alike (fixes the
	 * collision of spec 9.2.2). */
	draft_base = max_id + 1;

	for (int pass = 0; pass < 2; pass++) {
		uint32_t nl = pass ? p->draft_layers : p->layers;
		for (int c = 0; c < ncomp; c++) {
			uint64_t item = (c && p->item_len[c]) ? p->item_len[c] : p->item_len[0];
			for (uint32_t l = 0; l < nl; l++, i++) {
				bufs[i].item_len = item;
				bufs[i].length = item * p->pages;
				bufs[i].kind = kinds[c];
				bufs[i].flags = pass ? LC_BUFFER_DRAFT : 0;
				bufs[i].rows = p->rows;
				bufs[i].layer =
					pass ? draft_base + (int32_t)l
					     : (p->kv_layer_ids ? p->kv_layer_ids[l] : (int32_t)l);
				bufs[i].base = p->bases ? p->bases[i] : NULL;
			}
		}
	}
	for (uint32_t c = 0; c < p->state_components; c++)
		for (uint32_t s = 0; s < p->state_layers; s++, i++) {
			bufs[i].item_len = p->state_item_len;
			bufs[i].length = p->state_item_len * p->state_slots;
			bufs[i].kind = LC_BUFFER_STATE;
			bufs[i].layer = p->state_layer_ids[s];
			bufs[i].base = p->state_bases ? p->state_bases[c * p->state_layers + s]
						      : NULL;
		}
	rc = lc_layout_create(bufs, n, out);
	free(bufs);
	return rc;
}

int lc_layout_buffer_count(const lc_layout_t *l)
{
	return l ? (int)l->nbuf : -EINVAL;
}

int lc_layout_buffer(const lc_layout_t *l, int index, lc_buffer_t *out)
{
	if (!l || !out)
		return LC__FAIL(-EINVAL, "layout buffer: %s is NULL", l ? "out" : "layout");
	if (index < 0 || (uint32_t)index >= l->nbuf)
		return LC__FAIL(-ERANGE, "layout buffer %d: the layout has %u buffers", index, l->nbuf);
	*out = l->bufs[index];
	return 0;
}

int lc_layout_layer_count(const lc_layout_t *l)
{
	return l ? (int)l->layers : -EINVAL;
}

int lc_layout_layer_buffers(const lc_layout_t *l, int layer, uint32_t *out, size_t cap)
{
	if (!l || (!out && cap))
		return LC__FAIL(-EINVAL, "layer buffers: %s is NULL", l ? "out" : "layout");
	if (layer < 0 || (uint32_t)layer >= l->layers)
		return LC__FAIL(-ERANGE, "layer %d: the layout has %u layers", layer, l->layers);
	uint32_t b = l->layer_start[layer], e = l->layer_start[layer + 1];
	for (uint32_t i = b; i < e && i - b < cap; i++)
		out[i - b] = l->layer_buf[i];
	return (int)(e - b);
}

uint64_t lc_layout_fingerprint(const lc_layout_t *l)
{
	return l ? l->fingerprint : 0;
}
