/* The demo's synthetic models: presets, the roofline, KV pools, and the
 * deterministic page pattern D verifies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "demo.h"

/*
 * Weights per layer are counted from the published configurations; FLOPs
 * are 2 per weight per token (one multiply-add) plus attention: per token
 * and per earlier token of the prompt, QK^T and AV over every query head
 * (4 x heads x head_dim; MLA in its absorbed form: 2 x (576 + 512) per
 * head). A causal prompt of n tokens attends to n/2 tokens on average.
 */
static const demo_model_t models[] = {
	{
		.name = "llama-3-8b",
		.layout_model = LC_LAYOUT_MHA,
		.layers = 32,
		.components = 2,
		.comp_bytes_per_token = 8 * 128 * 2, /* 8 KV heads x 128 x bf16 */
		/* q,o 4096^2; k,v 4096x1024; MLP 3 x 4096x14336 */
		.linear_flops = 2.0 * (2 * 4096.0 * 4096 + 2 * 4096.0 * 1024 + 3 * 4096.0 * 14336),
		.attn_flops = 4.0 * 32 * 128,
		.kv_flops = 2.0 * (4096.0 * 4096 + 2 * 4096.0 * 1024),
		.about = "MHA (GQA), 32 layers, K and V of 8 heads x 128 bf16",
	},
	{
		.name = "llama-3-70b",
		.layout_model = LC_LAYOUT_MHA,
		.layers = 80,
		.components = 2,
		.comp_bytes_per_token = 8 * 128 * 2,
		/* q,o 8192^2; k,v 8192x1024; MLP 3 x 8192x28672 */
		.linear_flops = 2.0 * (2 * 8192.0 * 8192 + 2 * 8192.0 * 1024 + 3 * 8192.0 * 28672),
		.attn_flops = 4.0 * 64 * 128,
		.kv_flops = 2.0 * (8192.0 * 8192 + 2 * 8192.0 * 1024),
		.about = "MHA (GQA), 80 layers, K and V of 8 heads x 128 bf16",
	},
	{
		.name = "deepseek-v3",
		.layout_model = LC_LAYOUT_MLA,
		.layers = 61,
		.components = 1,
		.comp_bytes_per_token = 576 * 2, /* latent 512 + rope 64, bf16 */
		/* MLA projections (q_a, q_b, kv_a, kv_b, o) and 9 active experts
		 * (8 routed + 1 shared) of 3 x 7168x2048, plus the router. */
		.linear_flops = 2.0 * (7168.0 * 1536 + 1536.0 * 128 * 192 + 7168.0 * 576 +
				       512.0 * 128 * 256 + 128.0 * 128 * 7168 +
				       9 * 3 * 7168.0 * 2048 + 7168.0 * 256),
		.attn_flops = 2.0 * 128 * (576 + 512),
		.kv_flops = 2.0 * (7168.0 * 1536 + 1536.0 * 128 * 192 + 7168.0 * 576),
		.about = "MLA, 61 layers, one 576-wide bf16 latent per token",
	},
};

const demo_model_t *lc__demo_model_find(const char *name)
{
	for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
		if (!strcmp(models[i].name, name))
			return &models[i];
	return NULL;
}

void lc__demo_model_list(char *buf, size_t cap)
{
	size_t off = 0;
	buf[0] = 0;
	for (size_t i = 0; i < sizeof models / sizeof models[0] && off < cap; i++)
		off += (size_t)snprintf(buf + off, cap - off, "%s%s", i ? "|" : "", models[i].name);
}

uint64_t lc__demo_pages_of(const demo_opts_t *o, uint64_t tokens)
{
	return (tokens + o->page_tokens - 1) / o->page_tokens;
}

int lc__demo_geometry(demo_opts_t *o)
{
	if (!o->model || !o->page_tokens || !o->nprompts || o->requests < 1 || o->concurrency < 1 ||
	    o->concurrency > DEMO_MAX_INFLIGHT)
		return -EINVAL;
	o->layers_total = o->model->layers + o->draft_layers;
	if (o->layers_total > DEMO_MAX_LAYERS)
		return -EINVAL;
	o->buffers = o->model->components * o->layers_total;
	o->item_len = (uint64_t)o->page_tokens * o->model->comp_bytes_per_token;
	/* P holds the `concurrency` largest requests at once. */
	uint64_t sizes[DEMO_MAX_INFLIGHT] = {0};
	for (int i = 0; i < o->requests; i++) {
		uint64_t n = lc__demo_pages_of(o, o->prompts[i % o->nprompts]);
		for (int k = 0; k < o->concurrency; k++)
			if (n > sizes[k]) {
				uint64_t t = sizes[k];
				sizes[k] = n;
				n = t;
			}
	}
	o->pool_pages = 0;
	for (int k = 0; k < o->concurrency; k++)
		o->pool_pages += sizes[k];
	return 0;
}

double lc__demo_layer_flops(const demo_opts_t *o, uint64_t tokens)
{
	double n = (double)tokens;
	return n * o->model->linear_flops + o->model->attn_flops * n * n / 2;
}

double lc__demo_layer_bytes(const demo_opts_t *o, uint64_t tokens)
{
	return (double)lc__demo_pages_of(o, tokens) * (double)o->item_len * o->model->components;
}

uint64_t lc__demo_layer_ns(const demo_opts_t *o, uint64_t tokens)
{
	if (o->layer_ms > 0)
		return (uint64_t)(o->layer_ms * 1e6);
	if (o->tflops <= 0)
		return 0;
	return (uint64_t)(lc__demo_layer_flops(o, tokens) / (o->tflops * 1e12) * 1e9);
}

double lc__demo_kv_frac(const demo_opts_t *o, uint64_t tokens)
{
	double all = lc__demo_layer_flops(o, tokens);
	return all > 0 ? o->model->kv_flops * (double)tokens / all : 0;
}

uint64_t lc__demo_now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

uint64_t lc__demo_cpu_ns(void)
{
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return (uint64_t)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000000000u +
	       (uint64_t)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1000u;
}

const char *lc__demo_mode_name(int interval, char *buf, size_t cap)
{
	if (interval <= 0)
		snprintf(buf, cap, "whole-request");
	else
		snprintf(buf, cap, "layer-wise-%d", interval);
	return buf;
}

int lc__demo_pool_create(const demo_opts_t *o, lc_ctx_t *ctx, uint64_t pages, bool shareable,
			 demo_pool_t *out)
{
	demo_pool_t p = {.pages = pages, .free_pages = pages};
	void *bases[DEMO_MAX_BUFFERS];
	int rc;
	p.len = (size_t)(o->buffers * pages * o->item_len);
	p.used = calloc(pages, 1);
	if (!p.used)
		return -ENOMEM;
	/* Allocated and touched here, long before anything is timed. */
	rc = lc_mem_alloc(p.len, shareable ? LC_MEM_SHAREABLE : 0, (void **)&p.mem);
	if (rc)
		goto free_used;
	for (uint32_t b = 0; b < o->buffers; b++)
		bases[b] = p.base[b] = p.mem + (size_t)b * pages * o->item_len;
	lc_layout_params_t lp = {
		.size = sizeof lp,
		.model = o->model->layout_model,
		.layers = o->model->layers,
		.draft_layers = o->draft_layers,
		.pages = pages,
		.item_len = {o->item_len, o->item_len},
		.bases = bases,
	};
	rc = lc_layout_build(&lp, &p.layout);
	if (rc)
		goto free_mem;
	if (lc_layout_buffer_count(p.layout) != (int)o->buffers) {
		rc = -EINVAL;
		goto destroy_layout;
	}
	rc = lc_region_register(ctx, p.mem, p.len, &p.region);
	if (rc)
		goto destroy_layout;
	*out = p;
	return 0;
destroy_layout:
	lc_layout_destroy(p.layout);
free_mem:
	lc_mem_free(p.mem);
free_used:
	free(p.used);
	return rc;
}

void lc__demo_pool_destroy(demo_pool_t *p)
{
	if (p->region)
		lc_region_deregister(p->region);
	lc_layout_destroy(p->layout);
	if (p->mem)
		lc_mem_free(p->mem);
	free(p->used);
	memset(p, 0, sizeof *p);
}

int lc__demo_pages_alloc(demo_pool_t *p, uint64_t n, int64_t *out)
{
	if (n > p->free_pages)
		return -ENOSPC;
	uint64_t got = 0;
	for (uint64_t i = 0; i < p->pages && got < n; i++)
		if (!p->used[i]) {
			p->used[i] = 1;
			out[got++] = (int64_t)i;
		}
	p->free_pages -= n;
	return 0;
}

void lc__demo_pages_free(demo_pool_t *p, const int64_t *ids, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (ids[i] >= 0 && (uint64_t)ids[i] < p->pages && p->used[ids[i]]) {
			p->used[ids[i]] = 0;
			p->free_pages++;
		}
}

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15u;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
	return x ^ (x >> 31);
}

uint64_t lc__demo_seed(uint64_t room, uint32_t buffer, uint64_t page_index)
{
	return mix64(mix64(room) ^ ((uint64_t)buffer << 40) ^ page_index);
}

#define STRIDE 0x9e3779b97f4a7c15u

void lc__demo_fill(void *page, size_t len, uint64_t seed)
{
	uint64_t *w = page;
	for (size_t k = 0; k < len / 8; k++)
		w[k] = seed + k * STRIDE;
}

bool lc__demo_check(const void *page, size_t len, uint64_t seed)
{
	const uint64_t *w = page;
	uint64_t diff = 0;
	for (size_t k = 0; k < len / 8; k++)
		diff |= w[k] ^ (seed + k * STRIDE);
	return diff == 0;
}

int lc__demo_first_token(uint64_t room, char *buf, size_t cap)
{
	return snprintf(buf, cap, "first_token=%llu room=%llu",
			(unsigned long long)(mix64(room) % 128256), (unsigned long long)room);
}
