/* The control-plane codec: one writer and one bounded reader. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/codec.h"

/* ---- writer ---- */

typedef struct writer {
	uint8_t *p;
	size_t len, cap;
	int err;
} writer_t;

static uint8_t *w_take(writer_t *w, size_t n)
{
	if (w->err)
		return NULL;
	if (n > LC__MSG_MAX || w->len + n > LC__MSG_MAX) {
		w->err = -EMSGSIZE;
		return NULL;
	}
	if (w->len + n > w->cap) {
		size_t cap = w->cap ? w->cap : 256;
		while (cap < w->len + n)
			cap *= 2;
		uint8_t *np = realloc(w->p, cap);
		if (!np) {
			w->err = -ENOMEM;
			return NULL;
		}
		w->p = np;
		w->cap = cap;
	}
	uint8_t *at = w->p + w->len;
	w->len += n;
	return at;
}

static void w_u8(writer_t *w, uint8_t v)
{
	uint8_t *p = w_take(w, 1);
	if (p)
		*p = v;
}
static void w_u16(writer_t *w, uint16_t v)
{
	uint8_t *p = w_take(w, 2);
	if (p)
		lc__put_u16(p, v);
}
static void w_u32(writer_t *w, uint32_t v)
{
	uint8_t *p = w_take(w, 4);
	if (p)
		lc__put_u32(p, v);
}
static void w_u64(writer_t *w, uint64_t v)
{
	uint8_t *p = w_take(w, 8);
	if (p)
		lc__put_u64(p, v);
}
static void w_bytes(writer_t *w, const void *src, size_t n)
{
	uint8_t *p = w_take(w, n);
	if (p && n)
		memcpy(p, src, n);
}
static void w_str(writer_t *w, const char *s, size_t cap)
{
	size_t n = strnlen(s, cap);
	if (n >= cap || n >= LC__MSG_STR_MAX) {
		if (!w->err)
			w->err = -EINVAL;
		return;
	}
	w_u16(w, (uint16_t)n);
	w_bytes(w, s, n);
}
static void w_i64s(writer_t *w, const int64_t *v, uint32_t n)
{
	w_u32(w, n);
	uint8_t *p = w_take(w, (size_t)n * 8);
	if (p)
		for (uint32_t i = 0; i < n; i++)
			lc__put_u64(p + 8 * (size_t)i, (uint64_t)v[i]);
}

/* ---- reader ---- */

typedef struct reader {
	const uint8_t *p;
	size_t len, off;
	char *why;
	size_t why_cap;
	int err;
} reader_t;

static void r_fail(reader_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void r_fail(reader_t *r, const char *fmt, ...)
{
	if (r->err)
		return;
	r->err = LC_ERR_PROTO;
	if (r->why && r->why_cap) {
		va_list ap;
		va_start(ap, fmt);
		lc__vreason(r->why, r->why_cap, fmt, ap);
		va_end(ap);
	}
}

static const uint8_t *r_take(reader_t *r, size_t n, const char *field)
{
	if (r->err)
		return NULL;
	if (n > r->len - r->off) {
		r_fail(r, "truncated at %s (offset %zu, need %zu, have %zu)", field, r->off, n,
		       r->len - r->off);
		return NULL;
	}
	const uint8_t *at = r->p + r->off;
	r->off += n;
	return at;
}
static uint8_t r_u8(reader_t *r, const char *f)
{
	const uint8_t *p = r_take(r, 1, f);
	return p ? *p : 0;
}
static uint16_t r_u16(reader_t *r, const char *f)
{
	const uint8_t *p = r_take(r, 2, f);
	return p ? lc__get_u16(p) : 0;
}
static uint32_t r_u32(reader_t *r, const char *f)
{
	const uint8_t *p = r_take(r, 4, f);
	return p ? lc__get_u32(p) : 0;
}
static uint64_t r_u64(reader_t *r, const char *f)
{
	const uint8_t *p = r_take(r, 8, f);
	return p ? lc__get_u64(p) : 0;
}
/* A string into dst[cap]; empty allowed only if allow_empty. */
static void r_str(reader_t *r, char *dst, size_t cap, bool allow_empty, const char *f)
{
	dst[0] = '\0';
	uint16_t n = r_u16(r, f);
	if (r->err)
		return;
	if (n >= cap) {
		r_fail(r, "%s too long (%u bytes, max %zu)", f, n, cap - 1);
		return;
	}
	if (!n && !allow_empty) {
		r_fail(r, "%s empty", f);
		return;
	}
	const uint8_t *p = r_take(r, n, f);
	if (!p)
		return;
	if (memchr(p, '\0', n)) {
		r_fail(r, "%s contains a NUL byte", f);
		return;
	}
	memcpy(dst, p, n);
	dst[n] = '\0';
}
/* An int64 array of at most max entries, each >= 0; *out NULL when empty. */
static int64_t *r_i64s(reader_t *r, uint32_t *count, uint32_t max, const char *f)
{
	uint32_t n = r_u32(r, f);
	*count = 0;
	if (r->err)
		return NULL;
	if (n > max) {
		r_fail(r, "%s count %u over %u", f, n, max);
		return NULL;
	}
	const uint8_t *p = r_take(r, (size_t)n * 8, f);
	if (!p || !n)
		return NULL;
	int64_t *v = malloc((size_t)n * sizeof *v);
	if (!v) {
		r_fail(r, "%s: out of memory", f);
		return NULL;
	}
	for (uint32_t i = 0; i < n; i++) {
		v[i] = (int64_t)lc__get_u64(p + 8 * (size_t)i);
		if (v[i] < 0) {
			r_fail(r, "%s[%u] negative (%lld)", f, i, (long long)v[i]);
			free(v);
			return NULL;
		}
	}
	*count = n;
	return v;
}

/* ---- shared validation (the encoder refuses what the decoder would) ---- */

/* A CURVE key in ZeroMQ's z85 text: exactly 40 characters of its alphabet. */
static bool z85_key(const char *k)
{
	static const char alphabet[] = "0123456789abcdefghijklmnopqrstuvwxyz"
				       "ABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
	size_t n = 0;
	for (; k[n]; n++)
		if (n >= LC__MSG_CURVE_KEY_LEN || !strchr(alphabet, k[n]))
			return false;
	return n == LC__MSG_CURVE_KEY_LEN;
}

static const char *check_buffer(const lc__msg_buffer_t *b, uint32_t nregions)
{
	if (b->layer < 0)
		return "negative layer";
	if (b->kind > LC_BUFFER_OTHER)
		return "buffer kind out of range";
	if (b->flags & ~(uint32_t)LC_BUFFER_DRAFT)
		return "unknown buffer flags";
	if (!b->item_len)
		return "zero item_len";
	if (b->region >= nregions)
		return "buffer region index out of range";
	return NULL;
}

static const char *check_status(const lc__msg_status_t *s)
{
	if (s->status != LC_ROOM_SUCCESS && s->status != LC_ROOM_FAILED &&
	    s->status != LC_ROOM_BOOTSTRAPPED)
		return "status neither Success, Failed nor Bootstrapped";
	if (s->status == LC_ROOM_BOOTSTRAPPED && (s->fail_reason || s->metadata_len || s->flags))
		return "Bootstrapped with a fail reason, metadata or flags";
	if (s->fail_reason >= LC_FAIL_REASON_COUNT)
		return "fail reason out of range";
	if (s->status == LC_ROOM_SUCCESS && s->fail_reason)
		return "Success with a fail reason";
	if (s->status == LC_ROOM_FAILED && s->metadata_len)
		return "Failed with metadata";
	if (s->metadata_len > LC_METADATA_MAX)
		return "metadata too long";
	if (s->flags & ~(uint32_t)LC__STATUS_HAS_CHECKSUM)
		return "unknown status flags";
	if ((s->flags & LC__STATUS_HAS_CHECKSUM) && s->status != LC_ROOM_SUCCESS)
		return "a checksum with Failed";
	if (s->checksum >= (1ull << 61) - 1)
		return "checksum out of range";
	return NULL;
}

static const char *check_info(const lc__msg_transfer_info_t *t)
{
	if (!t->required_dst || t->required_dst > LC__MSG_MAX_FANIN)
		return "required_dst_info_num out of range";
	if (t->flags & ~(uint32_t)LC__INFO_FLAGS)
		return "unknown transfer-info flags";
	if ((t->flags & LC__INFO_DUMMY) && (t->page_count || t->slot_count))
		return "dummy transfer info with pages";
	if ((t->flags & LC__INFO_DUMMY) && (t->flags & LC__INFO_WANTS_ACK))
		return "dummy transfer info asking for a confirmation";
	if ((t->flags & LC__INFO_HAS_PAIR) ? t->pair_len < LC_PAIR_MIN || t->pair_len > LC_PAIR_MAX
					   : t->pair_len != 0)
		return "pairing value length out of range";
	if (t->page_count > LC__MSG_MAX_PAGES)
		return "too many pages";
	if (t->slot_count > LC__MSG_MAX_SLOTS)
		return "too many state slots";
	if (t->aux_index < -1)
		return "aux index below -1";
	return NULL;
}

/* ---- encode ---- */

/* Each encoder checks its message, returning what is wrong (nothing is
 * written then) or NULL once it has written the body. */
static const char *encode_register(writer_t *w, const lc__msg_register_t *g)
{
	const char *bad = NULL;
	if (!g->session[0] || !g->status_ep[0] || !g->data_url[0])
		bad = "empty string";
	else if (!g->nbuffers || g->nbuffers > LC__MSG_MAX_BUFFERS)
		bad = "buffer count";
	else if (!g->nregions || g->nregions > LC__MSG_MAX_REGIONS)
		bad = "region count";
	else if (g->flags & ~(uint32_t)LC__REG_FLAGS)
		bad = "flags";
	else if ((g->flags & LC__REG_HAS_CURVE_KEY) && !z85_key(g->curve_key))
		bad = "curve key";
	else if ((g->flags & LC__REG_HAS_TP) &&
		 (!g->d_tp || g->d_tp > LC__MSG_MAX_TP || g->d_rank >= g->d_tp))
		bad = "tp size";
	else if ((g->flags & LC__REG_HAS_ROWS) && !(g->flags & LC__REG_HAS_TP))
		bad = "rows without tp size";
	for (uint32_t i = 0; !bad && i < g->nbuffers; i++)
		bad = check_buffer(&g->buffers[i], g->nregions);
	for (uint32_t i = 0; !bad && (g->flags & LC__REG_HAS_ROWS) && i < g->nbuffers; i++)
		if (g->buffers[i].rows > LC__MSG_MAX_ROWS)
			bad = "buffer rows";
	for (uint32_t i = 0; !bad && i < g->nregions; i++)
		if (!g->region_desc_lens[i] || g->region_desc_lens[i] > LC_REGION_DESC_MAX)
			bad = "region descriptor length";
	if (bad)
		return bad;
	w_str(w, g->session, sizeof g->session);
	w_str(w, g->status_ep, sizeof g->status_ep);
	w_str(w, g->data_url, sizeof g->data_url);
	w_u32(w, g->d_rank);
	w_u32(w, g->flags);
	w_bytes(w, g->token, LC_TOKEN_LEN);
	w_u64(w, g->fingerprint);
	if (g->flags & LC__REG_HAS_CURVE_KEY)
		w_bytes(w, g->curve_key, LC__MSG_CURVE_KEY_LEN);
	if (g->flags & LC__REG_HAS_TP)
		w_u32(w, g->d_tp);
	w_u32(w, g->nbuffers);
	for (uint32_t i = 0; i < g->nbuffers; i++) {
		const lc__msg_buffer_t *b = &g->buffers[i];
		w_u32(w, (uint32_t)b->layer);
		w_u32(w, b->kind);
		w_u32(w, b->flags);
		w_u32(w, b->region);
		w_u64(w, b->item_len);
		w_u64(w, b->offset);
	}
	for (uint32_t i = 0; (g->flags & LC__REG_HAS_ROWS) && i < g->nbuffers; i++)
		w_u32(w, g->buffers[i].rows);
	w_u32(w, g->nregions);
	for (uint32_t i = 0; i < g->nregions; i++) {
		w_u16(w, (uint16_t)g->region_desc_lens[i]);
		w_bytes(w, g->region_descs[i], g->region_desc_lens[i]);
	}
	return NULL;
}

static const char *encode_reply(writer_t *w, const lc__msg_register_reply_t *r)
{
	if (!r->session[0])
		return "empty session";
	if (r->result > 0)
		return "positive result";
	w_str(w, r->session, sizeof r->session);
	w_u32(w, r->p_rank);
	w_u32(w, (uint32_t)r->result);
	w_str(w, r->reason, sizeof r->reason);
	return NULL;
}

static const char *encode_info(writer_t *w, const lc__msg_transfer_info_t *t)
{
	const char *bad = NULL;
	if (!t->session[0] || !t->status_ep[0])
		bad = "empty string";
	else
		bad = check_info(t);
	for (uint32_t i = 0; !bad && i < t->page_count; i++)
		if (t->pages[i] < 0)
			bad = "negative page";
	for (uint32_t i = 0; !bad && i < t->slot_count; i++)
		if (t->slots[i] < 0)
			bad = "negative slot";
	if (bad)
		return bad;
	w_u64(w, t->room);
	w_str(w, t->session, sizeof t->session);
	w_str(w, t->status_ep, sizeof t->status_ep);
	w_u32(w, t->required_dst);
	w_u32(w, t->flags);
	w_u64(w, t->prefix_len);
	w_u64(w, (uint64_t)t->aux_index);
	w_i64s(w, t->pages, t->page_count);
	w_i64s(w, t->slots, t->slot_count);
	if (t->flags & LC__INFO_HAS_PAIR) {
		w_u8(w, t->pair_len);
		w_bytes(w, t->pair, t->pair_len);
	}
	return NULL;
}

static const char *encode_body(writer_t *w, const lc__msg_t *m)
{
	const char *bad;
	switch (m->type) {
	case LC__MSG_REGISTER:
		return encode_register(w, &m->reg);
	case LC__MSG_REGISTER_REPLY:
		return encode_reply(w, &m->reply);
	case LC__MSG_TRANSFER_INFO:
		return encode_info(w, &m->info);
	case LC__MSG_CANCEL:
		if (!m->cancel.session[0])
			return "empty session";
		w_u64(w, m->cancel.room);
		w_str(w, m->cancel.session, sizeof m->cancel.session);
		w_str(w, m->cancel.reason, sizeof m->cancel.reason);
		return NULL;
	case LC__MSG_STATUS:
		if ((bad = check_status(&m->status)))
			return bad;
		w_u64(w, m->status.room);
		w_u32(w, m->status.p_rank);
		w_u8(w, m->status.status);
		w_u32(w, m->status.fail_reason);
		w_str(w, m->status.reason, sizeof m->status.reason);
		w_u32(w, m->status.metadata_len);
		w_bytes(w, m->status.metadata, m->status.metadata_len);
		w_u32(w, m->status.flags);
		if (m->status.flags & LC__STATUS_HAS_CHECKSUM)
			w_u64(w, m->status.checksum);
		return NULL;
	case LC__MSG_LAYERS:
		if (!m->layers.layers || m->layers.layers > LC__MSG_MAX_LAYERS)
			return "layers out of range";
		w_u64(w, m->layers.room);
		w_u32(w, m->layers.p_rank);
		w_u32(w, m->layers.layers);
		return NULL;
	default:
		return "unknown type";
	}
}

int lc__msg_encode(const lc__msg_t *m, uint8_t **out, size_t *out_len)
{
	writer_t w = {0};
	if (!m || !out || !out_len)
		return -EINVAL;
	w_u32(&w, LC__MSG_MAGIC);
	w_u16(&w, LC__MSG_VERSION);
	w_u16(&w, (uint16_t)m->type);
	w_u32(&w, 0); /* length, patched below */
	const char *bad = encode_body(&w, m);
	if (!bad)
		w_bytes(&w, m->secret, LC__MSG_SECRET_LEN);
	if (bad && !w.err)
		w.err = -EINVAL;
	if (w.err) {
		lc__error_set(w.err, "encode %s refused: %s", lc__msg_type_name(m->type),
			      bad ? bad : "size");
		LC__DEBUG("%s", lc_last_error());
		free(w.p);
		return w.err;
	}
	lc__put_u32(w.p + 8, (uint32_t)w.len);
	*out = w.p;
	*out_len = w.len;
	return 0;
}

/* ---- decode ---- */

/* With LC__REG_HAS_ROWS: a u32 per buffer, tokens per token-major page. */
static void decode_rows(reader_t *r, lc__msg_register_t *g)
{
	if (!r->err && (g->flags & LC__REG_HAS_ROWS) && !(g->flags & LC__REG_HAS_TP))
		r_fail(r, "rows without a TP size");
	for (uint32_t i = 0; !r->err && (g->flags & LC__REG_HAS_ROWS) && i < g->nbuffers; i++) {
		g->buffers[i].rows = r_u32(r, "buffer rows");
		if (!r->err && g->buffers[i].rows > LC__MSG_MAX_ROWS)
			r_fail(r, "buffer %u: %u rows, more than %u", i, g->buffers[i].rows,
			       LC__MSG_MAX_ROWS);
	}
}

/* The registration's fixed fields, the optional curve key and TP size. */
static void decode_register_head(reader_t *r, lc__msg_register_t *g)
{
	r_str(r, g->session, sizeof g->session, false, "session");
	r_str(r, g->status_ep, sizeof g->status_ep, false, "status endpoint");
	r_str(r, g->data_url, sizeof g->data_url, false, "data-plane url");
	g->d_rank = r_u32(r, "d_rank");
	g->flags = r_u32(r, "flags");
	const uint8_t *tok = r_take(r, LC_TOKEN_LEN, "token");
	if (tok)
		memcpy(g->token, tok, LC_TOKEN_LEN);
	g->fingerprint = r_u64(r, "fingerprint");
	if (!r->err && (g->flags & ~(uint32_t)LC__REG_FLAGS))
		r_fail(r, "unknown registration flags 0x%x", g->flags);
	if (!r->err && (g->flags & LC__REG_HAS_CURVE_KEY)) {
		const uint8_t *key = r_take(r, LC__MSG_CURVE_KEY_LEN, "curve key");
		if (key) {
			memcpy(g->curve_key, key, LC__MSG_CURVE_KEY_LEN);
			g->curve_key[LC__MSG_CURVE_KEY_LEN] = '\0';
			if (!z85_key(g->curve_key))
				r_fail(r, "curve key is not 40 z85 characters");
		}
	}
	if (!r->err && (g->flags & LC__REG_HAS_TP)) {
		g->d_tp = r_u32(r, "tp size");
		if (!r->err && (!g->d_tp || g->d_tp > LC__MSG_MAX_TP || g->d_rank >= g->d_tp))
			r_fail(r, "D rank %u of TP size %u", g->d_rank, g->d_tp);
	}
}

/* The buffer table (and its rows). */
static void decode_buffers(reader_t *r, lc__msg_register_t *g)
{
	uint32_t nb = r_u32(r, "buffer count");
	if (r->err)
		return;
	if (!nb || nb > LC__MSG_MAX_BUFFERS) {
		r_fail(r, "buffer count %u out of range 1..%u", nb, LC__MSG_MAX_BUFFERS);
		return;
	}
	/* Check the size before allocating: 32 bytes per buffer. */
	if ((size_t)nb * 32 > r->len - r->off) {
		r_fail(r, "truncated in buffers (%u buffers)", nb);
		return;
	}
	g->buffers = calloc(nb, sizeof *g->buffers);
	if (!g->buffers) {
		r_fail(r, "out of memory");
		return;
	}
	g->nbuffers = nb;
	for (uint32_t i = 0; i < nb; i++) {
		lc__msg_buffer_t *b = &g->buffers[i];
		b->layer = (int32_t)r_u32(r, "buffer layer");
		b->kind = r_u32(r, "buffer kind");
		b->flags = r_u32(r, "buffer flags");
		b->region = r_u32(r, "buffer region");
		b->item_len = r_u64(r, "buffer item_len");
		b->offset = r_u64(r, "buffer offset");
	}
	decode_rows(r, g);
}

/* The region descriptors, after checking every buffer against their count. */
static void decode_regions(reader_t *r, lc__msg_register_t *g)
{
	uint32_t nr = r_u32(r, "region count");
	if (r->err)
		return;
	if (!nr || nr > LC__MSG_MAX_REGIONS) {
		r_fail(r, "region count %u out of range 1..%u", nr, LC__MSG_MAX_REGIONS);
		return;
	}
	for (uint32_t i = 0; i < g->nbuffers; i++) {
		const char *bad = check_buffer(&g->buffers[i], nr);
		if (bad) {
			r_fail(r, "buffer %u: %s", i, bad);
			return;
		}
	}
	if ((size_t)nr * 2 > r->len - r->off) {
		r_fail(r, "truncated in regions (%u regions)", nr);
		return;
	}
	g->region_descs = calloc(nr, sizeof *g->region_descs);
	g->region_desc_lens = calloc(nr, sizeof *g->region_desc_lens);
	g->region_blob = malloc(r->len - r->off ? r->len - r->off : 1);
	if (!g->region_descs || !g->region_desc_lens || !g->region_blob) {
		r_fail(r, "out of memory");
		return;
	}
	g->nregions = nr;
	size_t used = 0;
	for (uint32_t i = 0; i < nr; i++) {
		uint16_t n = r_u16(r, "region descriptor length");
		if (r->err)
			return;
		if (!n || n > LC_REGION_DESC_MAX) {
			r_fail(r, "region %u descriptor length %u out of range", i, n);
			return;
		}
		const uint8_t *d = r_take(r, n, "region descriptor");
		if (!d)
			return;
		memcpy(g->region_blob + used, d, n);
		g->region_descs[i] = g->region_blob + used;
		g->region_desc_lens[i] = n;
		used += n;
	}
}

static void decode_register(reader_t *r, lc__msg_register_t *g)
{
	decode_register_head(r, g);
	if (!r->err)
		decode_buffers(r, g);
	if (!r->err)
		decode_regions(r, g);
}

static void decode_info(reader_t *r, lc__msg_transfer_info_t *t)
{
	t->room = r_u64(r, "room");
	r_str(r, t->session, sizeof t->session, false, "session");
	r_str(r, t->status_ep, sizeof t->status_ep, false, "status endpoint");
	t->required_dst = r_u32(r, "required_dst_info_num");
	t->flags = r_u32(r, "flags");
	t->prefix_len = r_u64(r, "decode prefix length");
	t->aux_index = (int64_t)r_u64(r, "aux index");
	t->pages = r_i64s(r, &t->page_count, LC__MSG_MAX_PAGES, "pages");
	t->slots = r_i64s(r, &t->slot_count, LC__MSG_MAX_SLOTS, "state slots");
	if (!r->err && (t->flags & LC__INFO_HAS_PAIR)) {
		t->pair_len = r_u8(r, "pairing value length");
		const uint8_t *p = r->err || t->pair_len > LC_PAIR_MAX
					   ? NULL
					   : r_take(r, t->pair_len, "pairing value");
		if (p)
			memcpy(t->pair, p, t->pair_len);
	}
	if (!r->err) {
		const char *bad = check_info(t);
		if (bad)
			r_fail(r, "%s", bad);
	}
}

static void decode_status(reader_t *r, lc__msg_status_t *s)
{
	s->room = r_u64(r, "room");
	s->p_rank = r_u32(r, "p_rank");
	s->status = r_u8(r, "status");
	s->fail_reason = r_u32(r, "fail reason");
	r_str(r, s->reason, sizeof s->reason, true, "reason");
	s->metadata_len = r_u32(r, "metadata length");
	if (r->err)
		return;
	const char *bad = check_status(s); /* flags not read yet: 0 */
	if (bad) {
		r_fail(r, "%s (status %u, reason %u, metadata %u bytes)", bad, s->status,
		       s->fail_reason, s->metadata_len);
		return;
	}
	if (s->metadata_len) {
		const uint8_t *p = r_take(r, s->metadata_len, "metadata");
		if (!p)
			return;
		s->metadata = malloc(s->metadata_len);
		if (!s->metadata) {
			r_fail(r, "out of memory");
			return;
		}
		memcpy(s->metadata, p, s->metadata_len);
	}
	s->flags = r_u32(r, "flags");
	if (!r->err && (s->flags & LC__STATUS_HAS_CHECKSUM))
		s->checksum = r_u64(r, "checksum");
	if (!r->err && (bad = check_status(s)))
		r_fail(r, "%s (flags %#x)", bad, s->flags);
}

int lc__msg_decode(const void *buf, size_t len, lc__msg_t *msg, char *why, size_t why_cap)
{
	reader_t r = {.p = buf, .len = len, .why = why, .why_cap = why_cap};
	lc__msg_t m;
	memset(&m, 0, sizeof m);
	if (why && why_cap)
		why[0] = '\0';
	if (!buf && len) {
		r_fail(&r, "no buffer");
		return r.err;
	}
	if (len > LC__MSG_MAX) {
		r_fail(&r, "message of %zu bytes over the %u limit", len, LC__MSG_MAX);
		return r.err;
	}
	uint32_t magic = r_u32(&r, "magic");
	uint16_t version = r_u16(&r, "version");
	uint16_t type = r_u16(&r, "type");
	uint32_t total = r_u32(&r, "length");
	if (r.err)
		return r.err;
	if (magic != LC__MSG_MAGIC) {
		r_fail(&r, "bad magic 0x%08x", magic);
		return r.err;
	}
	if (version != LC__MSG_VERSION) {
		r_fail(&r, "unsupported message version %u (this side speaks %u)", version,
		       LC__MSG_VERSION);
		return r.err;
	}
	if (total != len) {
		r_fail(&r, "header length %u but message has %zu bytes", total, len);
		return r.err;
	}
	m.type = type;
	switch (type) {
	case LC__MSG_REGISTER:
		decode_register(&r, &m.reg);
		break;
	case LC__MSG_REGISTER_REPLY:
		r_str(&r, m.reply.session, sizeof m.reply.session, false, "session");
		m.reply.p_rank = r_u32(&r, "p_rank");
		m.reply.result = (int32_t)r_u32(&r, "result");
		r_str(&r, m.reply.reason, sizeof m.reply.reason, true, "reason");
		if (!r.err && m.reply.result > 0)
			r_fail(&r, "positive result %d", m.reply.result);
		break;
	case LC__MSG_TRANSFER_INFO:
		decode_info(&r, &m.info);
		break;
	case LC__MSG_CANCEL:
		m.cancel.room = r_u64(&r, "room");
		r_str(&r, m.cancel.session, sizeof m.cancel.session, false, "session");
		r_str(&r, m.cancel.reason, sizeof m.cancel.reason, true, "reason");
		break;
	case LC__MSG_STATUS:
		decode_status(&r, &m.status);
		break;
	case LC__MSG_LAYERS:
		m.layers.room = r_u64(&r, "room");
		m.layers.p_rank = r_u32(&r, "p_rank");
		m.layers.layers = r_u32(&r, "layers");
		if (!r.err && (!m.layers.layers || m.layers.layers > LC__MSG_MAX_LAYERS))
			r_fail(&r, "layers %u out of range", m.layers.layers);
		break;
	default:
		r_fail(&r, "unknown message type %u", type);
	}
	const uint8_t *secret = r_take(&r, LC__MSG_SECRET_LEN, "session secret");
	if (secret)
		memcpy(m.secret, secret, LC__MSG_SECRET_LEN);
	if (!r.err && r.off != len)
		r_fail(&r, "%zu trailing bytes after %s", len - r.off, lc__msg_type_name(type));
	if (r.err) {
		lc__msg_free(&m);
		return r.err;
	}
	*msg = m;
	return 0;
}

void lc__msg_free(lc__msg_t *m)
{
	if (!m)
		return;
	/* Only decoder-owned arrays: an encoder's input is the caller's. */
	free(m->reg.buffers);
	free(m->reg.region_descs);
	free(m->reg.region_desc_lens);
	free(m->reg.region_blob);
	free(m->info.pages);
	free(m->info.slots);
	free(m->status.metadata);
	m->reg.buffers = NULL;
	m->reg.region_descs = NULL;
	m->reg.region_desc_lens = NULL;
	m->reg.region_blob = NULL;
	m->info.pages = m->info.slots = NULL;
	m->status.metadata = NULL;
}

int lc__msg_peek_version(const void *buf, size_t len)
{
	if (!buf || len < LC__MSG_HEADER || lc__get_u32(buf) != LC__MSG_MAGIC)
		return -1;
	return lc__get_u16((const uint8_t *)buf + 4);
}

/* Version 1 (before session secrets): a REGISTER began with its session and
 * status endpoint; a REGISTER_REPLY was session, p_rank, result, reason. */
int lc__msg_refuse_v1_register(const void *buf, size_t len, uint32_t p_rank, int32_t result,
			       const char *reason, char *ep, size_t ep_cap, uint8_t **out,
			       size_t *out_len)
{
	reader_t r = {.p = buf, .len = len};
	char session[LC__MSG_STR_MAX];
	if (!out || !out_len || !ep || !ep_cap || result > 0 || !reason)
		return -EINVAL;
	if (lc__msg_peek_version(buf, len) != 1 || lc__get_u16((const uint8_t *)buf + 6) != 1 ||
	    lc__get_u32((const uint8_t *)buf + 8) != len)
		return LC_ERR_PROTO;
	r.off = LC__MSG_HEADER;
	r_str(&r, session, sizeof session, false, "session");
	r_str(&r, ep, ep_cap, false, "status endpoint");
	if (r.err)
		return r.err;
	writer_t w = {0};
	w_u32(&w, LC__MSG_MAGIC);
	w_u16(&w, 1);
	w_u16(&w, LC__MSG_REGISTER_REPLY);
	w_u32(&w, 0);
	w_str(&w, session, sizeof session);
	w_u32(&w, p_rank);
	w_u32(&w, (uint32_t)result);
	w_str(&w, reason, LC__MSG_STR_MAX);
	if (w.err) {
		free(w.p);
		return w.err;
	}
	lc__put_u32(w.p + 8, (uint32_t)w.len);
	*out = w.p;
	*out_len = w.len;
	return 0;
}

const char *lc__msg_type_name(int type)
{
	switch (type) {
	case LC__MSG_REGISTER:
		return "register";
	case LC__MSG_REGISTER_REPLY:
		return "register_reply";
	case LC__MSG_TRANSFER_INFO:
		return "transfer_info";
	case LC__MSG_CANCEL:
		return "cancel";
	case LC__MSG_STATUS:
		return "status";
	case LC__MSG_LAYERS:
		return "layers";
	default:
		return "unknown";
	}
}
