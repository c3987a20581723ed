/*
 * Prefill (P) and decode (D) as two processes, through the public C API
 * only: P runs the bootstrap server and one P rank, D discovers it, grants
 * its pages and receives one request's KV cache layer by layer, then checks
 * every byte and the metadata (the first token).
 *
 *     prefill_decode [tcp://127.0.0.1:0 | shm://auto]
 *
 * Exit status 0 when D received everything intact.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "layercake.h"

#define LAYERS 8
#define PAGES 32
#define ITEM 8192
#define ROOM 42
#define PROMPT_PAGES 16

#define CHECK(expr)                                                                                \
	do {                                                                                       \
		int rc_ = (expr);                                                                  \
		if (rc_ < 0) {                                                                     \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,              \
				lc_strerror(rc_));                                                 \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

typedef struct model {
	lc_ctx_t *ctx;
	uint8_t *mem;
	size_t len;
	lc_region_t *region;
	lc_layout_t *layout;
} model_t;

static uint8_t byte_at(int buffer, int page, size_t i)
{
	return (uint8_t)(buffer * 31 + page * 7 + i * 13);
}

static void model_init(model_t *m, const char *name, int fill)
{
	void *bases[2 * LAYERS];
	CHECK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = name},
			    &m->ctx));
	m->len = (size_t)2 * LAYERS * PAGES * ITEM;
	CHECK(lc_mem_alloc(m->len, LC_MEM_SHAREABLE, (void **)&m->mem));
	for (int b = 0; b < 2 * LAYERS; b++) {
		bases[b] = m->mem + (size_t)b * PAGES * ITEM;
		for (int p = 0; fill && p < PAGES; p++)
			for (size_t i = 0; i < ITEM; i++)
				((uint8_t *)bases[b])[(size_t)p * ITEM + i] = byte_at(b, p, i);
	}
	lc_layout_params_t lp = {.size = sizeof lp,
				 .model = LC_LAYOUT_MHA,
				 .layers = LAYERS,
				 .pages = PAGES,
				 .item_len = {ITEM, ITEM},
				 .bases = bases};
	CHECK(lc_layout_build(&lp, &m->layout));
	CHECK(lc_region_register(m->ctx, m->mem, m->len, &m->region));
}

static void model_fini(model_t *m)
{
	lc_region_deregister(m->region);
	lc_layout_destroy(m->layout);
	lc_ctx_destroy(m->ctx);
	lc_mem_free(m->mem);
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* P: bootstrap server, one rank, one room streamed layer by layer. */
static int prefill(int addr_fd, int done_fd)
{
	model_t m;
	lc_bootstrap_t *bs;
	lc_prefill_t *p;
	lc_engine_t *e;
	lc_sender_t *s;
	char addr[64];
	model_init(&m, "prefill", 1);
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
	CHECK(lc_bootstrap_start(&bp, &bs));
	CHECK(lc_bootstrap_addr(bs, addr, sizeof addr));
	lc_prefill_params_t pp = {.size = sizeof pp,
				  .layout = m.layout,
				  .bootstrap = addr,
				  .world_size = 1,
				  .dp_size = 1,
				  .engine_rank = 0,
				  .metrics_server = bs};
	CHECK(lc_prefill_create(m.ctx, &pp, &p));
	CHECK(lc_prefill_engine(p, &e));
	if (write(addr_fd, addr, sizeof addr) != (ssize_t)sizeof addr)
		return 1;

	CHECK(lc_sender_create(p, ROOM, &s));
	double t0 = now_s();
	while (lc_sender_poll(s, NULL) == LC_ROOM_BOOTSTRAPPING && now_s() - t0 < 30)
		usleep(1000);
	uint64_t prefix = 0;
	CHECK(lc_sender_prefix_len(s, &prefix)); /* tokens D already has (0 here) */

	/* One forward: add the chunk, then "compute" each layer. */
	int64_t pages[PROMPT_PAGES];
	for (int i = 0; i < PROMPT_PAGES; i++)
		pages[i] = i;
	lc_chunk_t c = {.size = sizeof c,
			.room = ROOM,
			.pages = pages,
			.page_count = PROMPT_PAGES,
			.dst_index = 0,
			.is_last = 1};
	CHECK(lc_engine_batch_begin(e, 0));
	CHECK(lc_engine_chunk_add(e, &c));
	CHECK(lc_engine_batch_end(e));
	for (int l = 0; l < LAYERS; l++) {
		usleep(2000); /* the layer's compute */
		CHECK(lc_engine_record_cache(e));
	}
	CHECK(lc_engine_record_aux(e));
	const char first_token[] = "token=1234";
	CHECK(lc_sender_metadata_set(s, first_token, sizeof first_token));

	lc_room_info_t info = {.size = sizeof info};
	int st;
	while ((st = lc_sender_poll(s, &info)) != LC_ROOM_SUCCESS && st != LC_ROOM_FAILED &&
	       now_s() - t0 < 30)
		usleep(1000);
	printf("P: room %d %s %s\n", ROOM, lc_room_status_name(st), info.reason);
	fflush(stdout);
	char x;
	if (read(done_fd, &x, 1) < 0) /* until D is done */
		st = LC_ROOM_FAILED;
	lc_sender_destroy(s);
	lc_prefill_destroy(p);
	lc_bootstrap_stop(bs);
	model_fini(&m);
	return st == LC_ROOM_SUCCESS ? 0 : 1;
}

/* D: discover P, grant pages, receive, verify. */
static int decode(const char *addr, const char *url)
{
	model_t m;
	lc_decode_t *d;
	lc_receiver_t *r;
	model_init(&m, "decode", 0);
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = m.layout,
				 .regions = &m.region,
				 .region_count = 1,
				 .listen_url = url,
				 .tp_size = 1};
	CHECK(lc_decode_create(m.ctx, &dp, &d));
	CHECK(lc_receiver_create(d, addr, ROOM, &r));
	double t0 = now_s();
	while (lc_receiver_poll(r, NULL) == LC_ROOM_BOOTSTRAPPING && now_s() - t0 < 30)
		usleep(1000);
	/* D's pages for the prompt: the top of its pool, in reverse. */
	int64_t pages[PROMPT_PAGES];
	for (int i = 0; i < PROMPT_PAGES; i++)
		pages[i] = PAGES - 1 - i;
	lc_receiver_pages_t pg = {.size = sizeof pg,
				  .pages = pages,
				  .page_count = PROMPT_PAGES,
				  .prefix_len = 0,
				  .aux_index = 0};
	CHECK(lc_receiver_send(r, &pg));
	int st, seen = 0;
	lc_room_info_t info = {.size = sizeof info};
	while ((st = lc_receiver_poll(r, &info)) != LC_ROOM_SUCCESS && st != LC_ROOM_FAILED &&
	       now_s() - t0 < 30) {
		int ready = lc_receiver_layers_ready(r);
		if (ready > seen) {
			printf("D: %d of %d layers landed\n", ready, LAYERS);
			seen = ready;
		}
		usleep(200);
	}
	printf("D: room %d %s %s (%.1f ms)\n", ROOM, lc_room_status_name(st), info.reason,
	       (now_s() - t0) * 1e3);
	int bad = st != LC_ROOM_SUCCESS;
	for (int b = 0; !bad && b < 2 * LAYERS; b++)
		for (int i = 0; i < PROMPT_PAGES; i++) {
			const uint8_t *pgp = m.mem + ((size_t)b * PAGES + (size_t)pages[i]) * ITEM;
			for (size_t k = 0; k < ITEM; k++)
				if (pgp[k] != byte_at(b, i, k)) {
					bad = 1;
					break;
				}
		}
	char meta[LC_METADATA_MAX];
	int n = lc_receiver_metadata(r, meta, sizeof meta);
	if (!bad && (n <= 0 || strcmp(meta, "token=1234")))
		bad = 1;
	printf("D: %s, metadata \"%s\"\n", bad ? "MISMATCH" : "every byte verified",
	       n > 0 ? meta : "");
	lc_receiver_destroy(r);
	lc_decode_destroy(d);
	model_fini(&m);
	return bad;
}

int main(int argc, char **argv)
{
	const char *url = argc > 1 ? argv[1] : "tcp://127.0.0.1:0";
	int a[2], done[2];
	char addr[64];
	if (pipe(a) || pipe(done))
		return 1;
	pid_t p = fork();
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(a[0]);
		close(done[1]);
		_exit(prefill(a[1], done[0]));
	}
	close(a[1]);
	close(done[0]);
	if (read(a[0], addr, sizeof addr) != (ssize_t)sizeof addr) {
		fprintf(stderr, "P did not start\n");
		return 1;
	}
	int d_rc = decode(addr, url);
	close(done[1]);
	int st = 0;
	waitpid(p, &st, 0);
	int p_rc = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
	printf("%s\n", !d_rc && !p_rc ? "OK" : "FAILED");
	return d_rc || p_rc;
}
