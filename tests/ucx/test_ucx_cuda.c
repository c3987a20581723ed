/*
 * UCX with CUDA (docs/gpu.md): the ucx transport asks its UCP context which
 * memory types it moves (UCP_ATTR_FIELD_MEMORY_TYPES) and lets UCX move
 * CUDA device memory itself only when UCS_MEMORY_TYPE_CUDA is among them;
 * everything else device-kind is staged through the host ring.
 *
 *   choice:  lc__ucx_moves_kind with forged memory_types masks: CUDA memory
 *            goes to UCX only with the CUDA bit; sim, host and pinned never.
 *   detect:  a running engine's detection agrees with the choice function
 *            on its own mask, which has the host bit. Where the UCX has no
 *            CUDA (Debian's), staging is chosen.
 *   staged:  so a sim source (never UCX's) and a sim destination go through
 *            the staging ring and the copy engine over ucx, byte-exact, and
 *            P's staging_bytes counts every byte of the batch.
 *
 * Exit 77 where ucx is not built in.
 */
#include <string.h>

#include "testutil.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_int.h"

#define LEN (6u << 20)
#define BLOCK (1u << 20)
#define ROOM 5

static void check_choice(void)
{
	uint64_t host = UCS_BIT(UCS_MEMORY_TYPE_HOST), cuda = UCS_BIT(UCS_MEMORY_TYPE_CUDA);
	uint64_t managed = UCS_BIT(UCS_MEMORY_TYPE_CUDA_MANAGED);
	TU_CHECK(!lc__ucx_moves_kind(host, LC_MEM_KIND_CUDA), "host-only UCX moves CUDA");
	TU_CHECK(!lc__ucx_moves_kind(host | managed, LC_MEM_KIND_CUDA), "managed is not CUDA");
	TU_CHECK(lc__ucx_moves_kind(host | cuda, LC_MEM_KIND_CUDA), "CUDA UCX stages CUDA");
	TU_CHECK(lc__ucx_moves_kind(cuda, LC_MEM_KIND_CUDA), "CUDA bit alone");
	TU_CHECK(!lc__ucx_moves_kind(host | cuda, LC_MEM_KIND_SIM), "UCX moves the sim");
	TU_CHECK(!lc__ucx_moves_kind(~0ull, LC_MEM_KIND_SIM), "UCX moves the sim (all bits)");
	TU_CHECK(!lc__ucx_moves_kind(host | cuda, LC_MEM_KIND_HOST), "host is no decision");
	TU_CHECK(!lc__ucx_moves_kind(host | cuda, LC_MEM_KIND_PINNED), "pinned is no decision");
	TU_CHECK(!lc__ucx_moves_kind(0, LC_MEM_KIND_CUDA), "empty mask");
	TU_CHECK(lc__ucx_mem_type(LC_MEM_KIND_CUDA) == UCS_MEMORY_TYPE_CUDA, "CUDA type");
	char buf[96];
	lc__ucx_mem_types_str(host | cuda, buf, sizeof buf);
	TU_CHECK(!strcmp(buf, "host,cuda"), "names: %s", buf);
	lc__ucx_mem_types_str(0, buf, sizeof buf);
	TU_CHECK(!strcmp(buf, "none"), "names of none: %s", buf);
}

static uint64_t counter(lc_ctx_t *ctx, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_ctx_counter_by_name(ctx, name, &v));
	return v;
}

int main(void)
{
	tu_watchdog(60);
	if (!tu_transport_built("ucx"))
		return TU_SKIP;
	check_choice();

	lc_ctx_t *d, *p;
	lc_listener_t *l;
	lc_region_t *dr, *pr;
	lc_cq_t *cq;
	lc_conn_t *c;
	lc_token_t tok;
	char url[256];
	uint8_t desc[LC_REGION_DESC_MAX], *src, *dst, *buf = malloc(LEN);
	uint32_t remote;
	TU_CHECK(buf, "malloc");
	TU_OK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = "d"}, &d));
	TU_OK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = "p"}, &p));
	TU_OK(lc_listener_create(d, tu_listen_url("ucx"), &l));

	void *state;
	uint64_t types = 0;
	bool direct = true;
	TU_OK(lc__transport_state(d, lc__transport_find("ucx://"), &state));
	TU_OK(lc__ucx_detected(state, &types, &direct));
	TU_CHECK(types & UCS_BIT(UCS_MEMORY_TYPE_HOST), "no host memory type: %#llx",
		 (unsigned long long)types);
	TU_CHECK(direct == lc__ucx_moves_kind(types, LC_MEM_KIND_CUDA),
		 "detection disagrees with the choice");
	printf("ucx memory types %#llx: CUDA %s\n", (unsigned long long)types,
	       direct ? "moved by UCX" : "staged");

	/* Sim to sim over ucx: staged at P, landed through the engine at D. */
	TU_OK(lc_sim_alloc(LEN, (void **)&src));
	TU_OK(lc_sim_alloc(LEN, (void **)&dst));
	tu_fill(buf, LEN, 7);
	TU_OK(lc_sim_write(src, buf, LEN));
	TU_OK(lc_region_register(d, dst, LEN, &dr));
	TU_OK(lc_region_register(p, src, LEN, &pr));
	TU_CHECK(lc_region_kind(dr) == LC_MEM_KIND_SIM, "sim kind");
	TU_OK(lc_grant_issue(d, ROOM, dr, 0, LEN));
	TU_OK(lc_token_issue(d, &tok));
	TU_OK(lc_listener_url(l, url, sizeof url));
	int dl = lc_region_pack(dr, desc, sizeof desc);
	TU_OK(dl);
	TU_OK(lc_cq_create(p, &cq));
	lc_conn_params_t cp = {.size = sizeof cp, .token = tok, .has_token = 1, .cq = cq};
	TU_OK(lc_conn_create(p, url, &cp, &c));
	TU_OK(lc_conn_import_region(c, desc, (size_t)dl, &remote));
	lc_write_t w[LEN / BLOCK];
	for (size_t i = 0; i < LEN / BLOCK; i++)
		w[i] = (lc_write_t){.local = src + i * BLOCK,
				    .remote_offset = i * BLOCK,
				    .length = BLOCK,
				    .remote_region = remote};
	uint64_t id;
	TU_OK(lc_batch_post(c, w, LEN / BLOCK,
			    &(lc_batch_params_t){.size = sizeof(lc_batch_params_t), .room = ROOM},
			    &id));
	lc_completion_t done = tu_wait_one(cq, 30000);
	TU_CHECK(done.status == 0, "batch: %s: %s", lc_err_name(done.status), done.reason);
	TU_CHECK(counter(p, "staging_bytes") == LEN, "staging_bytes %llu, not %u",
		 (unsigned long long)counter(p, "staging_bytes"), LEN);
	memset(buf, 0, LEN);
	TU_OK(lc_sim_read(dst, buf, LEN));
	long bad = tu_verify(buf, LEN, 7);
	TU_CHECK(bad < 0, "byte %ld differs", bad);
	TU_CHECK(counter(d, "device_copy_bytes") == LEN, "D's device copies: %llu",
		 (unsigned long long)counter(d, "device_copy_bytes"));

	lc_conn_destroy(c);
	lc_cq_destroy(cq);
	lc_ctx_destroy(p);
	lc_ctx_destroy(d);
	lc_sim_free(src);
	lc_sim_free(dst);
	free(buf);
	printf("ok\n");
	return 0;
}
