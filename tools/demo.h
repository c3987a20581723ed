/*
 * `layercake demo`: three processes on one host (D optionally in another
 * network namespace: --d-netns). The orchestrator (the `layercake demo`
 * process) runs one bootstrap server per mode and drives
 * the workload; P (prefill) "computes" layers and streams them through
 * lc_prefill_t engines; D (decode) receives through lc_decode_t, verifies
 * every page and reports. They talk to the orchestrator over SOCK_SEQPACKET
 * socketpairs with one fixed message type (demo_msg_t); all timestamps are
 * CLOCK_MONOTONIC nanoseconds, comparable across the processes of a host.
 *
 * Files: demo.c (options, orchestrator, report), demo_model.c (presets,
 * roofline, pools, page pattern), demo_roles.c (P and D), demo_svg.c (the
 * timeline picture).
 */
#ifndef LC_DEMO_H
#define LC_DEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "layercake.h"

#define DEMO_MAX_LAYERS 256
#define DEMO_MAX_MODES 6
#define DEMO_MAX_PROMPTS 16
#define DEMO_MAX_INFLIGHT 64
#define DEMO_MAX_BUFFERS (3 * DEMO_MAX_LAYERS)
/* D polls its rooms (status, layers landed) this often while any is open. */
#define DEMO_POLL_US 100

/* A model preset: KV geometry and a roofline of its prefill compute. */
typedef struct demo_model {
	const char *name;
	uint32_t layout_model;         /* lc_layout_model_t */
	uint32_t layers;               /* target KV layers */
	uint32_t components;           /* per-layer buffers: MHA 2 (K, V), MLA 1 */
	uint64_t comp_bytes_per_token; /* bytes per token of one component */
	double linear_flops;           /* per token per layer: 2 x active weights */
	double attn_flops;             /* per (token, context token) per layer */
	/* per token per layer: the projections that precede the KV write (QKV,
	 * MLA's q/kv down-projections); the layer's KV is ready this far in */
	double kv_flops;
	const char *about;
} demo_model_t;

typedef struct demo_opts {
	const demo_model_t *model;
	uint32_t draft_layers;
	uint32_t page_tokens;
	uint64_t prompts[DEMO_MAX_PROMPTS];
	int nprompts;
	int requests;    /* measured requests per mode */
	int concurrency; /* requests in flight per mode */
	const char *transport;
	/* Multi-host runs (docs/demo.md): P's and D's addresses (default
	 * 127.0.0.1), and the network namespace D enters (NULL: this one). */
	const char *p_host;  /* bootstrap servers and P's control socket */
	const char *d_host;  /* D's data-plane listener and control socket */
	const char *d_netns; /* a name under /var/run/netns, or a path */
	double tflops;       /* 0: calibrate ("auto") */
	double balance;      /* auto: KV production = balance x measured link rate */
	double layer_ms;     /* > 0: fixed compute time per layer instead of the roofline */
	int intervals[DEMO_MAX_MODES];
	int nmodes;
	const char *svg; /* NULL: none */
	int svg_request; /* -1: the first request of the median prompt */
	bool json;
	bool same_process;     /* loop transport: P and D are threads of one child */
	bool tflops_auto_flag; /* the roofline was calibrated against the link */
	/* Derived geometry (demo_geometry). */
	uint32_t layers_total; /* target + draft */
	uint32_t buffers;      /* components x layers_total */
	uint64_t item_len;     /* bytes of one page of one buffer */
	uint64_t pool_pages;   /* P's pool; D has one more (page 0 reserved) */
} demo_opts_t;

/* What one side measured for one room. */
typedef struct demo_room_rec {
	uint64_t room;
	int32_t mode; /* index into intervals */
	int32_t req;  /* request index; -1 warm-up, -2 calibration */
	uint64_t tokens;
	uint64_t pages;
	uint64_t bytes;    /* KV bytes of the room (pages x item_len x buffers) */
	int32_t status;    /* final lc_room_status_t */
	int32_t layers;    /* entries of t_layer */
	uint64_t t_arrive; /* the request reached this side */
	uint64_t t_boot;   /* Bootstrapped seen */
	uint64_t t_start;  /* P: forward started; D: transfer info sent */
	uint64_t t_aux;    /* P: metadata published and aux step recorded */
	uint64_t t_final;  /* final status seen (D: Success with the first token) */
	/* P: layer l's KV written and its step recorded; D: first poll that saw
	 * layers_ready > l */
	uint64_t t_layer[DEMO_MAX_LAYERS];
	uint64_t t_layer_end[DEMO_MAX_LAYERS]; /* P: layer l's compute ended */
	uint64_t bad_pages;                    /* D: pages that differ from the pattern */
	uint64_t bytes_verified;               /* D */
	uint64_t t_verified;                   /* D */
	int32_t metadata_ok;                   /* D: the first token matched */
	int32_t reserved;
	char reason[LC_REASON_MAX];
} demo_room_rec_t;

typedef struct demo_engine_stats {
	double group_ack_p50_us; /* engine: layer group posted -> acknowledged */
	double group_ack_p99_us;
	double step_to_post_p50_us; /* engine: step recorded -> posted */
	uint64_t batches_posted, writes_posted, bytes_posted, rooms_failed;
} demo_engine_stats_t;

enum demo_msg_type {
	DEMO_SETUP = 1, /* O -> P, D: bootstrap addresses; answered by READY */
	DEMO_READY,
	DEMO_REQUEST, /* O -> P, D: a request arrives */
	DEMO_ROOM,    /* P, D -> O: what it measured (rec) */
	DEMO_SNAP,    /* O -> P, D: answered by SNAP with cpu_ns */
	DEMO_QUIT,    /* O -> P, D: answered by FINAL (P: engine stats) */
	DEMO_FINAL,
	DEMO_FAIL, /* P, D -> O: fatal error, text */
};

typedef struct demo_msg {
	uint32_t type;
	int32_t rc;
	int32_t mode;
	int32_t req;
	uint64_t room;
	uint64_t tokens;
	uint64_t layer_ns; /* REQUEST: compute time of each layer */
	uint64_t kv_ns;    /* REQUEST: when in the layer its KV is written */
	uint64_t cpu_ns;   /* SNAP, FINAL: process CPU time (user + system) */
	char boot[DEMO_MAX_MODES][64];
	demo_engine_stats_t engine[DEMO_MAX_MODES];
	demo_room_rec_t rec;
	char text[256];
} demo_msg_t;

/* demo_model.c */
const demo_model_t *lc__demo_model_find(const char *name);
void lc__demo_model_list(char *buf, size_t cap);
/* Fill layers_total, buffers, item_len, pool_pages. -EINVAL on bad input. */
int lc__demo_geometry(demo_opts_t *o);
uint64_t lc__demo_pages_of(const demo_opts_t *o, uint64_t tokens);
/* FLOPs of one layer for a prompt of `tokens` (one forward, no prefix). */
double lc__demo_layer_flops(const demo_opts_t *o, uint64_t tokens);
/* KV bytes of one layer for a prompt of `tokens` (whole pages). */
double lc__demo_layer_bytes(const demo_opts_t *o, uint64_t tokens);
uint64_t lc__demo_layer_ns(const demo_opts_t *o, uint64_t tokens);
/* Share of a layer's compute done when its KV is written (0..1). */
double lc__demo_kv_frac(const demo_opts_t *o, uint64_t tokens);
uint64_t lc__demo_now_ns(void);
uint64_t lc__demo_cpu_ns(void);
const char *lc__demo_mode_name(int interval, char *buf, size_t cap);

/* A KV pool: one lc_mem_alloc holding every buffer, a region, a layout,
 * and a page allocator (first fit over a byte map). */
typedef struct demo_pool {
	uint8_t *mem;
	size_t len;
	lc_region_t *region;
	lc_layout_t *layout;
	uint64_t pages;
	uint8_t *used; /* one byte per page */
	uint64_t free_pages;
	uint8_t *base[DEMO_MAX_BUFFERS];
} demo_pool_t;

int lc__demo_pool_create(const demo_opts_t *o, lc_ctx_t *ctx, uint64_t pages, bool shareable,
			 demo_pool_t *out);
void lc__demo_pool_destroy(demo_pool_t *p);
/* Allocate n pages (ids written to out), or -ENOSPC leaving nothing taken. */
int lc__demo_pages_alloc(demo_pool_t *p, uint64_t n, int64_t *out);
void lc__demo_pages_free(demo_pool_t *p, const int64_t *ids, uint64_t n);

/* The page pattern: word k of page j of buffer b of a room is
 * seed(room, b, j) + k * golden; D checks every word. */
uint64_t lc__demo_seed(uint64_t room, uint32_t buffer, uint64_t page_index);
void lc__demo_fill(void *page, size_t len, uint64_t seed);
bool lc__demo_check(const void *page, size_t len, uint64_t seed);
/* The fake first token of a room, as metadata text. */
int lc__demo_first_token(uint64_t room, char *buf, size_t cap);

/* demo_roles.c: enter network namespace `name` (a name under
 * /var/run/netns or a path) with a fresh mount namespace and /sys, as `ip
 * netns exec` does, so that UCX's device list matches the namespace. 0, or
 * -errno with `err` saying what failed. */
int lc__demo_enter_netns(const char *name, char *err, size_t cap);
/* demo_roles.c: each returns the process exit code. */
int lc__demo_prefill(const demo_opts_t *o, int fd);
int lc__demo_decode(const demo_opts_t *o, int fd);

/* demo_svg.c: one request in every mode. */
typedef struct demo_svg_row {
	const char *name;
	const demo_room_rec_t *p, *d;
	int interval;
} demo_svg_row_t;
int lc__demo_svg(const char *path, const demo_opts_t *o, const demo_svg_row_t *rows, int n);

#endif
