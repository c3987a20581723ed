/*
 * Two transports' keys in one packed descriptor: D listens on ucx (put
 * mode, which publishes an rkey) and on inproc (whose key is the region's
 * length), packs one region, and the descriptor carries both frames. P
 * imports that one descriptor over each transport and writes through both
 * (over ucx where the host has RMA hardware: put mode refuses emulation);
 * a descriptor missing one transport's frame is refused by that transport
 * only, and the frames' order does not matter. Skips (77) where ucx is not
 * built in or cannot start here.
 */
#include <string.h>

#include "testutil.h"
#include "transport/transport.h"

#define LEN (1u << 20)
#define ROOM 7

typedef struct side {
	lc_ctx_t *ctx;
	uint8_t *mem;
	lc_region_t *region;
} side_t;

static void side_init(side_t *s, const char *name)
{
	TU_OK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = name},
			    &s->ctx));
	TU_OK(lc_ctx_config_set(s->ctx, "ucx_data", "put"));
	TU_OK(lc_mem_alloc(LEN, LC_MEM_SHAREABLE, (void **)&s->mem));
	TU_OK(lc_region_register(s->ctx, s->mem, LEN, &s->region));
}

/* The frames of desc[0..n): their count, and which tags. */
static int frames(const uint8_t *desc, size_t n, bool *ucx, bool *inproc)
{
	int k = 0;
	*ucx = *inproc = false;
	for (size_t at = LC__DESC_HEADER; at + LC__KEY_FRAME <= n; k++) {
		uint16_t tag = lc__get_u16(desc + at), len = lc__get_u16(desc + at + 2);
		*ucx |= tag == LC__KEY_TAG_UCX;
		*inproc |= tag == LC__KEY_TAG_TEST;
		at += LC__KEY_FRAME + len;
	}
	return k;
}

/* desc without its frame of `tag` (or with its two frames swapped, tag 0)
 * into out; returns the new length. */
static size_t reframe(const uint8_t *desc, size_t n, uint16_t tag, uint8_t *out)
{
	const uint8_t *f[2];
	size_t fl[2], k = 0, at = LC__DESC_HEADER, o = LC__DESC_HEADER;
	for (; at < n && k < 2; k++) {
		f[k] = desc + at;
		fl[k] = LC__KEY_FRAME + lc__get_u16(desc + at + 2);
		at += fl[k];
	}
	TU_CHECK(k == 2 && at == n, "expected two frames");
	memcpy(out, desc, LC__DESC_HEADER);
	for (size_t i = 0; i < 2; i++) {
		size_t j = tag ? i : 1 - i;
		if (tag && lc__get_u16(f[j]) == tag)
			continue;
		memcpy(out + o, f[j], fl[j]);
		o += fl[j];
	}
	lc__put_u16(out + 6, (uint16_t)(o - LC__DESC_HEADER));
	return o;
}

/* Import desc over url and write 4096 bytes at `off`; they land. */
static void write_through(side_t *p, side_t *d, const char *url, lc_token_t tok,
			  const uint8_t *desc, size_t n, uint64_t off)
{
	lc_cq_t *cq;
	lc_conn_t *c;
	uint32_t rid;
	uint64_t id;
	TU_OK(lc_cq_create(p->ctx, &cq));
	lc_conn_params_t cp = {.size = sizeof cp, .cq = cq, .token = tok, .has_token = 1};
	TU_OK(lc_conn_create(p->ctx, url, &cp, &c));
	TU_OK(lc_conn_import_region(c, desc, n, &rid));
	tu_fill(p->mem + off, 4096, off + 1);
	lc_write_t w = {
		.local = p->mem + off, .remote_region = rid, .remote_offset = off, .length = 4096};
	lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM, .timeout_ms = 20000};
	TU_OK(lc_batch_post(c, &w, 1, &bp, &id));
	lc_completion_t done = tu_wait_one(cq, 25000);
	/* ucx put mode refuses a path without hardware RMA (LC_ENOTSUP, as on
	 * a host with tcp and shared memory only): the import, which read the
	 * key, is then all there is to check over ucx. */
	bool no_rma = done.status == LC_ENOTSUP && !strncmp(url, "ucx:", 4);
	TU_CHECK(done.status == 0 || no_rma, "%s: %s (%s)", url, lc_err_name(done.status),
		 done.reason);
	TU_CHECK(no_rma || tu_verify(d->mem + off, 4096, off + 1) < 0, "%s: the bytes differ", url);
	if (no_rma)
		fprintf(stderr, "%s: %s\n", url, done.reason);
	lc_conn_destroy(c);
	lc_cq_destroy(cq);
}

/* Whether url's transport imports desc[0..n). */
static int import_rc(side_t *p, const char *url, const uint8_t *desc, size_t n)
{
	lc_cq_t *cq;
	lc_conn_t *c;
	uint32_t rid;
	TU_OK(lc_cq_create(p->ctx, &cq));
	lc_conn_params_t cp = {.size = sizeof cp, .cq = cq};
	TU_OK(lc_conn_create(p->ctx, url, &cp, &c));
	int rc = lc_conn_import_region(c, desc, n, &rid);
	lc_conn_destroy(c);
	lc_cq_destroy(cq);
	return rc;
}

int main(void)
{
	side_t d, p;
	lc_listener_t *lu, *li;
	char uurl[256], iurl[256];
	lc_token_t tok;
	tu_watchdog(55);
	if (!tu_transport_built("ucx") || !tu_transport_built("inproc")) {
		fprintf(stderr, "skip: needs ucx and inproc (have %s)\n", lc_transports());
		return TU_SKIP;
	}
	side_init(&d, "d");
	side_init(&p, "p");
	TU_OK(lc_listener_create(d.ctx, tu_listen_url("ucx"), &lu));
	TU_OK(lc_listener_create(d.ctx, tu_listen_url("inproc"), &li));
	TU_OK(lc_listener_url(lu, uurl, sizeof uurl));
	TU_OK(lc_listener_url(li, iurl, sizeof iurl));
	TU_OK(lc_token_issue(d.ctx, &tok));
	TU_OK(lc_grant_issue(d.ctx, ROOM, d.region, 0, LEN));
	uint8_t desc[LC_REGION_DESC_MAX], alt[LC_REGION_DESC_MAX];
	int n = lc_region_pack(d.region, desc, sizeof desc);
	TU_OK(n);
	bool ucx, inproc;
	TU_CHECK(frames(desc, (size_t)n, &ucx, &inproc) == 2 && ucx && inproc,
		 "a descriptor of %d bytes without both keys", n);
	write_through(&p, &d, uurl, tok, desc, (size_t)n, 0);
	write_through(&p, &d, iurl, tok, desc, (size_t)n, 8192);
	size_t m = reframe(desc, (size_t)n, LC__KEY_TAG_TEST, alt);
	TU_OK(import_rc(&p, uurl, alt, m));
	TU_CHECK(import_rc(&p, iurl, alt, m) == LC_ERR_PROTO, "inproc imported without its key");
	m = reframe(desc, (size_t)n, LC__KEY_TAG_UCX, alt);
	TU_OK(import_rc(&p, iurl, alt, m));
	TU_CHECK(import_rc(&p, uurl, alt, m) == LC_ERR_PROTO,
		 "ucx put mode imported without a key");
	m = reframe(desc, (size_t)n, 0, alt);
	TU_CHECK(m == (size_t)n && memcmp(alt, desc, m), "the frames were not swapped");
	write_through(&p, &d, uurl, tok, alt, m, 16384);
	write_through(&p, &d, iurl, tok, alt, m, 24576);
	lc_listener_destroy(li);
	lc_listener_destroy(lu);
	lc_region_deregister(p.region);
	lc_region_deregister(d.region);
	lc_ctx_destroy(p.ctx);
	lc_ctx_destroy(d.ctx);
	lc_mem_free(p.mem);
	lc_mem_free(d.mem);
	printf("two keys in one descriptor: ok\n");
	return 0;
}
