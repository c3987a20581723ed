/* The control-plane codec: round trips, every truncation, fields out of
 * range, oversize and corrupted messages. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "control/codec.h"
#include "testutil.h"

static uint8_t *enc(const lc__msg_t *m, size_t *len)
{
	uint8_t *buf = NULL;
	assert_int_equal(lc__msg_encode(m, &buf, len), 0);
	assert_non_null(buf);
	return buf;
}

static void decode_fails(const void *buf, size_t len)
{
	lc__msg_t out;
	char why[200];
	assert_int_equal(lc__msg_decode(buf, len, &out, why, sizeof why), LC_ERR_PROTO);
	assert_true(why[0] != '\0');
}

/* Every strict prefix of a valid message fails, and so does one more byte. */
static void truncations_fail(const uint8_t *buf, size_t len)
{
	for (size_t n = 0; n < len; n++)
		decode_fails(buf, n);
	uint8_t *longer = malloc(len + 1);
	memcpy(longer, buf, len);
	longer[len] = 0;
	lc__put_u32(longer + 8, (uint32_t)len + 1);
	decode_fails(longer, len + 1); /* trailing byte */
	free(longer);
}

static lc__msg_t make_register(lc__msg_buffer_t *bufs, const void **descs, size_t *lens)
{
	static const uint8_t d0[40] = {1, 2, 3}, d1[24] = {9};
	lc__msg_t m;
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_REGISTER;
	strcpy(m.reg.session, "d0@127.0.0.1:7001");
	strcpy(m.reg.status_ep, "tcp://127.0.0.1:7001");
	strcpy(m.reg.data_url, "tcp://127.0.0.1:7002");
	m.reg.d_rank = 3;
	m.reg.flags = LC__REG_HAS_TOKEN;
	for (int i = 0; i < LC_TOKEN_LEN; i++)
		m.reg.token[i] = (uint8_t)(0xa0 + i);
	m.reg.fingerprint = 0x0123456789abcdefull;
	for (int i = 0; i < 3; i++)
		bufs[i] = (lc__msg_buffer_t){.layer = i,
					     .kind = LC_BUFFER_K,
					     .region = (uint32_t)i % 2,
					     .item_len = 4096,
					     .offset = (uint64_t)i << 20};
	bufs[2].flags = LC_BUFFER_DRAFT;
	m.reg.nbuffers = 3;
	m.reg.buffers = bufs;
	descs[0] = d0;
	descs[1] = d1;
	lens[0] = sizeof d0;
	lens[1] = sizeof d1;
	m.reg.nregions = 2;
	m.reg.region_descs = descs;
	m.reg.region_desc_lens = lens;
	return m;
}

static void test_register_round_trip(void **state)
{
	lc__msg_buffer_t bufs[3];
	const void *descs[2];
	size_t lens[2], len;
	lc__msg_t m = make_register(bufs, descs, lens), out;
	uint8_t *buf = enc(&m, &len);
	assert_int_equal(lc__msg_decode(buf, len, &out, NULL, 0), 0);
	assert_int_equal(out.type, LC__MSG_REGISTER);
	assert_string_equal(out.reg.session, m.reg.session);
	assert_string_equal(out.reg.status_ep, m.reg.status_ep);
	assert_string_equal(out.reg.data_url, m.reg.data_url);
	assert_int_equal(out.reg.d_rank, 3);
	assert_int_equal(out.reg.flags, LC__REG_HAS_TOKEN);
	assert_memory_equal(out.reg.token, m.reg.token, LC_TOKEN_LEN);
	assert_true(out.reg.fingerprint == m.reg.fingerprint);
	assert_int_equal(out.reg.nbuffers, 3);
	assert_memory_equal(out.reg.buffers, bufs, sizeof bufs);
	assert_int_equal(out.reg.nregions, 2);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(out.reg.region_desc_lens[i], lens[i]);
		assert_memory_equal(out.reg.region_descs[i], descs[i], lens[i]);
	}
	lc__msg_free(&out);
	truncations_fail(buf, len);
	free(buf);
}

/* REGISTER with an optional field: m (as make_register left it) encoded
 * with and without `flag` must differ by exactly `extra` bytes, and decode
 * into *out with the flag kept. The caller fills the field first. */
static uint8_t *enc_register_with(lc__msg_t *m, uint32_t flag, size_t extra, lc__msg_t *out,
				  size_t *len)
{
	size_t len_plain;
	uint8_t *plain = enc(m, &len_plain);
	free(plain);
	m->reg.flags |= flag;
	uint8_t *buf = enc(m, len);
	assert_int_equal(*len, len_plain + extra);
	assert_int_equal(lc__msg_decode(buf, *len, out, NULL, 0), 0);
	assert_int_equal(out->reg.flags, LC__REG_HAS_TOKEN | flag);
	return buf;
}

/* D's CURVE key travels with REGISTER (one keypair per rank); anything
 * but 40 z85 characters is refused by the encoder and by the decoder. */
static void test_register_carries_a_curve_key(void **state)
{
	static const char key[] = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
	lc__msg_buffer_t bufs[3];
	const void *descs[2];
	size_t lens[2], len;
	lc__msg_t m = make_register(bufs, descs, lens), out;
	strcpy(m.reg.curve_key, key);
	uint8_t *buf = enc_register_with(&m, LC__REG_HAS_CURVE_KEY, 40, &out, &len);
	assert_string_equal(out.reg.curve_key, key);
	assert_int_equal(out.reg.nbuffers, 3);
	lc__msg_free(&out);
	truncations_fail(buf, len);
	/* A key byte outside z85 (a space) on the wire is refused. */
	size_t off = (size_t)((uint8_t *)memmem(buf, len, key, 40) - buf);
	buf[off + 7] = ' ';
	decode_fails(buf, len);
	free(buf);
	/* The encoder refuses short or non-z85 keys. */
	uint8_t *none = NULL;
	strcpy(m.reg.curve_key, "short");
	assert_int_equal(lc__msg_encode(&m, &none, &len), -EINVAL);
	strcpy(m.reg.curve_key, key);
	m.reg.curve_key[3] = ' ';
	assert_int_equal(lc__msg_encode(&m, &none, &len), -EINVAL);
	assert_null(none);
}

/* Heterogeneous TP: D's TP size travels with REGISTER when its geometry
 * differs from P's; a rank outside it is refused both ways. */
static void test_register_carries_a_tp_size(void **state)
{
	lc__msg_buffer_t bufs[3];
	const void *descs[2];
	size_t lens[2], len;
	lc__msg_t m = make_register(bufs, descs, lens), out;
	m.reg.d_rank = 3;
	m.reg.d_tp = 4;
	uint8_t *buf = enc_register_with(&m, LC__REG_HAS_TP, 4, &out, &len);
	assert_int_equal(out.reg.d_rank, 3);
	assert_int_equal(out.reg.d_tp, 4);
	lc__msg_free(&out);
	truncations_fail(buf, len);
	/* D rank 3 of a TP size of 3 on the wire is refused. */
	uint32_t tp_then_nbuf[2] = {4, 3}, three = 3; /* the TP size precedes the buffer count */
	uint8_t *at = memmem(buf, len, tp_then_nbuf, 8);
	assert_non_null(at);
	memcpy(at, &three, 4);
	decode_fails(buf, len);
	free(buf);
	uint8_t *none = NULL;
	m.reg.d_tp = 0;
	assert_int_equal(lc__msg_encode(&m, &none, &len), -EINVAL);
	assert_null(none);
}

/* Token-major pages: D's rows per buffer travel with REGISTER (only with
 * a TP size); rows past the cap, or rows without a TP size, are refused. */
static void test_register_carries_rows(void **state)
{
	lc__msg_buffer_t bufs[3];
	const void *descs[2];
	size_t lens[2], len, len_tp;
	lc__msg_t m = make_register(bufs, descs, lens), out;
	m.reg.d_rank = 1;
	m.reg.d_tp = 2;
	m.reg.flags |= LC__REG_HAS_TP;
	free(enc(&m, &len_tp));
	for (int i = 0; i < 3; i++)
		bufs[i].rows = 16 + (uint32_t)i;
	m.reg.flags |= LC__REG_HAS_ROWS;
	uint8_t *buf = enc(&m, &len);
	assert_int_equal(len, len_tp + 3 * 4);
	assert_int_equal(lc__msg_decode(buf, len, &out, NULL, 0), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(out.reg.buffers[i].rows, 16 + i);
	lc__msg_free(&out);
	truncations_fail(buf, len);
	/* 17 rows become more than the cap on the wire: refused. */
	uint32_t seventeen = 17, big = LC__MSG_MAX_ROWS + 1;
	uint8_t *at = memmem(buf, len, &seventeen, 4);
	assert_non_null(at);
	memcpy(at, &big, 4);
	decode_fails(buf, len);
	free(buf);
	/* The encoder refuses the same, and rows without a TP size. */
	uint8_t *none = NULL;
	bufs[1].rows = LC__MSG_MAX_ROWS + 1;
	assert_int_equal(lc__msg_encode(&m, &none, &len), -EINVAL);
	bufs[1].rows = 8;
	m.reg.flags &= ~(uint32_t)LC__REG_HAS_TP;
	assert_int_equal(lc__msg_encode(&m, &none, &len), -EINVAL);
	assert_null(none);
}

static void test_info_round_trip(void **state)
{
	int64_t pages[5] = {0, 1, 2, 100, 7}, slots[2] = {4, 5};
	lc__msg_t m, out;
	size_t len;
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_TRANSFER_INFO;
	m.info = (lc__msg_transfer_info_t){.room = 0xfeedfacecafebeefull,
					   .required_dst = 2,
					   .prefix_len = 64,
					   .aux_index = 9,
					   .page_count = 5,
					   .pages = pages,
					   .slot_count = 2,
					   .slots = slots};
	strcpy(m.info.session, "s");
	strcpy(m.info.status_ep, "tcp://h:1");
	uint8_t *buf = enc(&m, &len);
	assert_int_equal(lc__msg_decode(buf, len, &out, NULL, 0), 0);
	assert_true(out.info.room == m.info.room);
	assert_int_equal(out.info.required_dst, 2);
	assert_int_equal(out.info.prefix_len, 64);
	assert_int_equal(out.info.aux_index, 9);
	assert_int_equal(out.info.page_count, 5);
	assert_memory_equal(out.info.pages, pages, sizeof pages);
	assert_int_equal(out.info.slot_count, 2);
	assert_memory_equal(out.info.slots, slots, sizeof slots);
	lc__msg_free(&out);
	truncations_fail(buf, len);
	free(buf);

	/* A dummy: no pages. */
	m.info.flags = LC__INFO_DUMMY;
	m.info.page_count = m.info.slot_count = 0;
	m.info.aux_index = -1;
	buf = enc(&m, &len);
	assert_int_equal(lc__msg_decode(buf, len, &out, NULL, 0), 0);
	assert_int_equal(out.info.flags, LC__INFO_DUMMY);
	assert_null(out.info.pages);
	lc__msg_free(&out);
	free(buf);
}

/* The page cap and the message cap agree: a transfer info at every
 * maximum (pages, slots, both strings) encodes, fits in LC__MSG_MAX and
 * decodes; one page more is refused as out of range, not as oversize. */
static void test_maximal_info_fits(void **state)
{
	lc__msg_t m, out;
	size_t len;
	int64_t *pages = calloc(LC__MSG_MAX_PAGES + 1, sizeof *pages);
	int64_t slots[LC__MSG_MAX_SLOTS];
	assert_non_null(pages);
	for (uint32_t i = 0; i <= LC__MSG_MAX_PAGES; i++)
		pages[i] = INT64_MAX - i;
	for (int i = 0; i < LC__MSG_MAX_SLOTS; i++)
		slots[i] = i;
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_TRANSFER_INFO;
	m.info = (lc__msg_transfer_info_t){.room = UINT64_MAX,
					   .required_dst = LC__MSG_MAX_FANIN,
					   .prefix_len = UINT64_MAX,
					   .aux_index = INT64_MAX,
					   .page_count = LC__MSG_MAX_PAGES,
					   .pages = pages,
					   .slot_count = LC__MSG_MAX_SLOTS,
					   .slots = slots};
	memset(m.info.session, 's', LC__MSG_STR_MAX - 1);
	memset(m.info.status_ep, 'e', LC__MSG_STR_MAX - 1);
	m.info.flags = LC__INFO_HAS_PAIR | LC__INFO_WANTS_ACK;
	m.info.pair_len = LC_PAIR_MAX;
	memset(m.info.pair, 'p', LC_PAIR_MAX);
	uint8_t *buf = NULL;
	assert_int_equal(lc__msg_encode(&m, &buf, &len), 0);
	assert_true(len <= LC__MSG_MAX);
	assert_int_equal(lc__msg_decode(buf, len, &out, NULL, 0), 0);
	assert_int_equal(out.info.page_count, LC__MSG_MAX_PAGES);
	assert_true(out.info.pages[LC__MSG_MAX_PAGES - 1] == pages[LC__MSG_MAX_PAGES - 1]);
	lc__msg_free(&out);
	free(buf);
	buf = NULL;
	m.info.page_count = LC__MSG_MAX_PAGES + 1;
	assert_int_equal(lc__msg_encode(&m, &buf, &len), -EINVAL);
	assert_null(buf);
	free(pages);
}

static void test_small_round_trips(void **state)
{
	uint8_t meta[LC_METADATA_MAX];
	for (size_t i = 0; i < sizeof meta; i++)
		meta[i] = (uint8_t)(i * 7);
	lc__msg_t m[4], out;
	memset(m, 0, sizeof m);
	m[0].type = LC__MSG_CANCEL;
	m[0].cancel.room = 77;
	strcpy(m[0].cancel.session, "d1");
	strcpy(m[0].cancel.reason, "client abort");
	m[1].type = LC__MSG_STATUS;
	m[1].status = (lc__msg_status_t){.room = 5,
					 .p_rank = 2,
					 .status = LC_ROOM_SUCCESS,
					 .metadata_len = sizeof meta,
					 .metadata = meta,
					 .flags = LC__STATUS_HAS_CHECKSUM,
					 .checksum = 0x123456789abcdull};
	m[2].type = LC__MSG_STATUS;
	m[2].status = (lc__msg_status_t){
		.room = 6, .status = LC_ROOM_FAILED, .fail_reason = LC_FAIL_LAYER_TIMEOUT};
	strcpy(m[2].status.reason, "layer 3 never ready");
	m[3].type = LC__MSG_LAYERS;
	m[3].layers = (lc__msg_layers_t){.room = 8, .p_rank = 1, .layers = 61};
	for (int k = 0; k < 4; k++) {
		size_t len;
		uint8_t *buf = enc(&m[k], &len);
		assert_int_equal(lc__msg_decode(buf, len, &out, NULL, 0), 0);
		assert_int_equal(out.type, m[k].type);
		switch (out.type) {
		case LC__MSG_CANCEL:
			assert_int_equal(out.cancel.room, 77);
			assert_string_equal(out.cancel.reason, "client abort");
			break;
		case LC__MSG_STATUS:
			assert_int_equal(out.status.room, m[k].status.room);
			assert_int_equal(out.status.status, m[k].status.status);
			assert_int_equal(out.status.fail_reason, m[k].status.fail_reason);
			assert_string_equal(out.status.reason, m[k].status.reason);
			assert_int_equal(out.status.metadata_len, m[k].status.metadata_len);
			assert_int_equal(out.status.flags, m[k].status.flags);
			assert_int_equal(out.status.checksum, m[k].status.checksum);
			if (out.status.metadata_len)
				assert_memory_equal(out.status.metadata, meta, sizeof meta);
			break;
		case LC__MSG_LAYERS:
			assert_int_equal(out.layers.layers, 61);
			assert_int_equal(out.layers.p_rank, 1);
			break;
		}
		lc__msg_free(&out);
		truncations_fail(buf, len);
		free(buf);
	}
	lc__msg_t r;
	memset(&r, 0, sizeof r);
	r.type = LC__MSG_REGISTER_REPLY;
	strcpy(r.reply.session, "d0");
	r.reply.result = LC_ERR_GEOMETRY;
	strcpy(r.reply.reason, "buffer 0 item_len: P 4096, D 2048");
	size_t len;
	uint8_t *buf = enc(&r, &len);
	assert_int_equal(lc__msg_decode(buf, len, &out, NULL, 0), 0);
	assert_int_equal(out.reply.result, LC_ERR_GEOMETRY);
	assert_string_equal(out.reply.reason, r.reply.reason);
	truncations_fail(buf, len);
	free(buf);
}

/* The encoder refuses what the decoder would refuse. */
static void test_encode_refuses(void **state)
{
	uint8_t big[LC_METADATA_MAX + 1] = {0};
	int64_t neg[1] = {-3};
	lc__msg_t m;
	uint8_t *buf = NULL;
	size_t len;
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_STATUS;
	m.status = (lc__msg_status_t){.status = 3};
	assert_int_equal(lc__msg_encode(&m, &buf, &len), -EINVAL);
	m.status = (lc__msg_status_t){
		.status = LC_ROOM_SUCCESS, .metadata_len = sizeof big, .metadata = big};
	assert_int_equal(lc__msg_encode(&m, &buf, &len), -EINVAL);
	/* The room checksum: known flags only, with Success only, below the prime. */
	m.status = (lc__msg_status_t){.status = LC_ROOM_SUCCESS, .flags = 2};
	assert_int_equal(lc__msg_encode(&m, &buf, &len), -EINVAL);
	m.status = (lc__msg_status_t){.status = LC_ROOM_FAILED,
				      .fail_reason = LC_FAIL_TRANSFER,
				      .flags = LC__STATUS_HAS_CHECKSUM};
	assert_int_equal(lc__msg_encode(&m, &buf, &len), -EINVAL);
	m.status = (lc__msg_status_t){
		.status = LC_ROOM_SUCCESS, .flags = LC__STATUS_HAS_CHECKSUM, .checksum = ~0ull};
	assert_int_equal(lc__msg_encode(&m, &buf, &len), -EINVAL);
	m.status =
		(lc__msg_status_t){.status = LC_ROOM_FAILED, .fail_reason = LC_FAIL_REASON_COUNT};
	assert_int_equal(lc__msg_encode(&m, &buf, &len), -EINVAL);
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_TRANSFER_INFO;
	strcpy(m.info.session, "s");
	strcpy(m.info.status_ep, "e");
	m.info.required_dst = 0;
	assert_int_equal(lc__msg_encode(&m, &buf, &len), -EINVAL);
	m.info.required_dst = 1;
	m.info.page_count = 1;
	m.info.pages = neg;
	assert_int_equal(lc__msg_encode(&m, &buf, &len), -EINVAL);
	m.info.flags = LC__INFO_DUMMY;
	neg[0] = 1;
	assert_int_equal(lc__msg_encode(&m, &buf, &len), -EINVAL);
	memset(&m, 0, sizeof m);
	m.type = 99;
	assert_int_equal(lc__msg_encode(&m, &buf, &len), -EINVAL);
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_LAYERS;
	assert_int_equal(lc__msg_encode(&m, &buf, &len), -EINVAL);
	assert_null(buf);
}

/* Each field the encoder checks, wrong on its own in an otherwise valid
 * message: refused, nothing returned. */
static void refused(const lc__msg_t *m)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	assert_true(lc__msg_encode(m, &buf, &len) < 0);
	assert_null(buf);
}

static void test_encode_refuses_each_field(void **state)
{
	(void)state;
	lc__msg_buffer_t bufs[3];
	const void *descs[2];
	size_t lens[2], len;
	uint8_t *buf = NULL;
	lc__msg_t m = make_register(bufs, descs, lens), b;
	assert_true(lc__msg_encode(NULL, &buf, &len) < 0);
	assert_true(lc__msg_encode(&m, NULL, &len) < 0);
	assert_true(lc__msg_encode(&m, &buf, NULL) < 0);
	b = m, b.reg.session[0] = '\0', refused(&b);
	b = m, b.reg.status_ep[0] = '\0', refused(&b);
	b = m, b.reg.data_url[0] = '\0', refused(&b);
	b = m, b.reg.nbuffers = 0, refused(&b);
	b = m, b.reg.nbuffers = LC__MSG_MAX_BUFFERS + 1, refused(&b);
	b = m, b.reg.nregions = 0, refused(&b);
	b = m, b.reg.nregions = LC__MSG_MAX_REGIONS + 1, refused(&b);
	b = m, b.reg.flags |= 1u << 30, refused(&b);
	b = m, b.reg.flags |= LC__REG_HAS_TP, b.reg.d_tp = 0, refused(&b);
	b = m, b.reg.flags |= LC__REG_HAS_TP, b.reg.d_tp = LC__MSG_MAX_TP + 1, refused(&b);
	b = m, b.reg.flags |= LC__REG_HAS_TP, b.reg.d_tp = 2, b.reg.d_rank = 2, refused(&b);
	b = m, b.reg.flags |= LC__REG_HAS_ROWS, refused(&b);
	size_t zero[2] = {0, 24}, huge[2] = {LC_REGION_DESC_MAX + 1, 24};
	b = m, b.reg.region_desc_lens = zero, refused(&b);
	b = m, b.reg.region_desc_lens = huge, refused(&b);
	lc__msg_buffer_t rows[3];
	memcpy(rows, bufs, sizeof rows);
	rows[0].rows = LC__MSG_MAX_ROWS + 1;
	b = m, b.reg.flags |= LC__REG_HAS_TP | LC__REG_HAS_ROWS, b.reg.d_tp = 4;
	b.reg.buffers = rows, refused(&b);

	lc__msg_t i;
	memset(&i, 0, sizeof i);
	i.type = LC__MSG_TRANSFER_INFO;
	strcpy(i.info.session, "s");
	strcpy(i.info.status_ep, "e");
	i.info.required_dst = 1;
	int64_t slots[1] = {-1};
	b = i, b.info.session[0] = '\0', refused(&b);
	b = i, b.info.status_ep[0] = '\0', refused(&b);
	b = i, b.info.slot_count = 1, b.info.slots = slots, refused(&b);
	b = i, b.info.slot_count = LC__MSG_MAX_SLOTS + 1, b.info.slots = slots, refused(&b);
	slots[0] = 1;
	b = i, b.info.flags = LC__INFO_DUMMY, b.info.slot_count = 1, b.info.slots = slots;
	refused(&b);

	lc__msg_t r;
	memset(&r, 0, sizeof r);
	r.type = LC__MSG_REGISTER_REPLY;
	strcpy(r.reply.session, "d0");
	b = r, b.reply.session[0] = '\0', refused(&b);
	b = r, b.reply.result = 5, refused(&b);
	lc__msg_t c;
	memset(&c, 0, sizeof c);
	c.type = LC__MSG_CANCEL;
	refused(&c);
	lc__msg_t l;
	memset(&l, 0, sizeof l);
	l.type = LC__MSG_LAYERS;
	l.layers.layers = LC__MSG_MAX_LAYERS + 1;
	refused(&l);
	/* names for every type, "unknown" past them */
	assert_string_equal(lc__msg_type_name(-1), "unknown");
	assert_string_equal(lc__msg_type_name(999), "unknown");
	/* refusing a v1 REGISTER: bad arguments, or bytes that are none */
	char ep[64];
	uint8_t *out = NULL;
	size_t out_len;
	static const uint8_t junk[32] = {1, 2, 3};
	assert_true(lc__msg_refuse_v1_register(junk, sizeof junk, 0, LC_ERR_PROTO, "old", ep,
					       sizeof ep, &out, &out_len) < 0);
	assert_true(lc__msg_refuse_v1_register(junk, sizeof junk, 0, 1, "old", ep, sizeof ep, &out,
					       &out_len) < 0);
	assert_true(lc__msg_refuse_v1_register(junk, sizeof junk, 0, LC_ERR_PROTO, NULL, ep,
					       sizeof ep, &out, &out_len) < 0);
	assert_true(lc__msg_refuse_v1_register(NULL, 0, 0, LC_ERR_PROTO, "old", ep, sizeof ep, &out,
					       &out_len) < 0);
	assert_null(out);
}

/* Patch one field of a valid encoding and expect a refusal. */
static void patch_fails_at(int line __attribute__((unused)), const uint8_t *buf, size_t len,
			   size_t off, const void *v, size_t n)
{
	uint8_t *c = malloc(len);
	memcpy(c, buf, len);
	memcpy(c + off, v, n);
	decode_fails(c, len);
	free(c);
}

#define patch_fails(...) patch_fails_at(__LINE__, __VA_ARGS__)

static void test_fields_out_of_range(void **state)
{
	uint8_t v4[4], v8[8], v2[2];
	/* Header. */
	lc__msg_t m;
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_LAYERS;
	m.layers = (lc__msg_layers_t){.room = 1, .layers = 2};
	size_t len;
	uint8_t *buf = enc(&m, &len);
	lc__put_u32(v4, 0xdeadbeef);
	patch_fails(buf, len, 0, v4, 4); /* magic */
	lc__put_u16(v2, LC__MSG_VERSION + 1);
	patch_fails(buf, len, 4, v2, 2); /* version */
	lc__put_u16(v2, 1);
	patch_fails(buf, len, 4, v2, 2); /* version 1, before session secrets */
	lc__put_u16(v2, 0);
	patch_fails(buf, len, 6, v2, 2); /* type 0 */
	lc__put_u16(v2, 7);
	patch_fails(buf, len, 6, v2, 2); /* type 7 */
	lc__put_u32(v4, (uint32_t)len - 1);
	patch_fails(buf, len, 8, v4, 4); /* length */
	lc__put_u32(v4, 0);
	patch_fails(buf, len, 12 + 12, v4, 4); /* layers 0 */
	lc__put_u32(v4, LC__MSG_MAX_LAYERS + 1);
	patch_fails(buf, len, 12 + 12, v4, 4);
	free(buf);

	/* Status: body = room 8, rank 4, status 1, reason 4, strlen 2, metadata_len 4. */
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_STATUS;
	m.status = (lc__msg_status_t){.room = 1, .status = LC_ROOM_SUCCESS};
	buf = enc(&m, &len);
	uint8_t s = 4;
	patch_fails(buf, len, 12 + 12, &s, 1); /* status Transferring */
	lc__put_u32(v4, 3);
	patch_fails(buf, len, 12 + 13, v4, 4); /* Success with a reason */
	lc__put_u32(v4, LC_METADATA_MAX + 1);
	patch_fails(buf, len, 12 + 19, v4, 4); /* metadata over the limit */
	lc__put_u32(v4, 1);
	patch_fails(buf, len, 12 + 19, v4, 4); /* metadata claimed, absent */
	lc__put_u16(v2, 1000);
	patch_fails(buf, len, 12 + 17, v2, 2); /* reason length past the end */
	free(buf);

	/* Transfer info. */
	int64_t pages[2] = {1, 2};
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_TRANSFER_INFO;
	m.info = (lc__msg_transfer_info_t){
		.room = 1, .required_dst = 1, .page_count = 2, .pages = pages};
	strcpy(m.info.session, "ab");
	strcpy(m.info.status_ep, "cd");
	buf = enc(&m, &len);
	size_t body = 12 + 8 + 4 + 4; /* room, two strings of 2 bytes */
	lc__put_u32(v4, 0);
	patch_fails(buf, len, body, v4, 4); /* required 0 */
	lc__put_u32(v4, LC__MSG_MAX_FANIN + 1);
	patch_fails(buf, len, body, v4, 4);
	lc__put_u32(v4, 8);
	patch_fails(buf, len, body + 4, v4, 4); /* unknown flag */
	lc__put_u32(v4, LC__INFO_HAS_PAIR);
	patch_fails(buf, len, body + 4, v4, 4); /* a pairing value announced, absent */
	lc__put_u32(v4, LC__INFO_DUMMY);
	patch_fails(buf, len, body + 4, v4, 4); /* dummy with pages */
	lc__put_u64(v8, (uint64_t)-5);
	patch_fails(buf, len, body + 16, v8, 8); /* aux index -5 */
	lc__put_u32(v4, LC__MSG_MAX_PAGES + 1);
	patch_fails(buf, len, body + 24, v4, 4); /* page count */
	lc__put_u32(v4, 3);
	patch_fails(buf, len, body + 24, v4, 4); /* page count past the data */
	lc__put_u64(v8, (uint64_t)-1);
	patch_fails(buf, len, body + 28, v8, 8); /* negative page */
	lc__put_u16(v2, 0);
	patch_fails(buf, len, 12 + 8, v2, 2); /* empty session */
	uint8_t nul = 0;
	patch_fails(buf, len, 12 + 10, &nul, 1); /* NUL inside a string */
	free(buf);

	/* Registration: region index, kind, descriptor length. */
	lc__msg_buffer_t bufs[3];
	const void *descs[2];
	size_t lens[2];
	m = make_register(bufs, descs, lens);
	buf = enc(&m, &len);
	size_t b0 = 12 + 2 + strlen(m.reg.session) + 2 + strlen(m.reg.status_ep) + 2 +
		    strlen(m.reg.data_url) + 4 + 4 + LC_TOKEN_LEN + 8 + 4;
	lc__put_u32(v4, (uint32_t)-1);
	patch_fails(buf, len, b0, v4, 4); /* negative layer */
	lc__put_u32(v4, 7);
	patch_fails(buf, len, b0 + 4, v4, 4); /* kind */
	lc__put_u32(v4, 2);
	patch_fails(buf, len, b0 + 12, v4, 4); /* region index == nregions */
	lc__put_u64(v8, 0);
	patch_fails(buf, len, b0 + 16, v8, 8); /* item_len 0 */
	lc__put_u32(v4, 0);
	patch_fails(buf, len, b0 - 4, v4, 4); /* zero buffers */
	lc__put_u32(v4, LC__MSG_MAX_BUFFERS + 1);
	patch_fails(buf, len, b0 - 4, v4, 4);
	size_t r0 = b0 + 3 * 32;
	lc__put_u32(v4, 0);
	patch_fails(buf, len, r0, v4, 4); /* zero regions */
	lc__put_u16(v2, 0);
	patch_fails(buf, len, r0 + 4, v2, 2); /* empty descriptor */
	lc__put_u16(v2, LC_REGION_DESC_MAX + 1);
	patch_fails(buf, len, r0 + 4, v2, 2);
	free(buf);
}

/* The pairing value (flag bit 1, u8 length + bytes after the slots) and
 * the wish for a confirmation (bit 2), and the STATUS Bootstrapped that
 * confirms. */
static void test_info_pair_and_ack(void **state)
{
	int64_t pages[2] = {3, 4};
	lc__msg_t m, out;
	size_t len;
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_TRANSFER_INFO;
	m.info = (lc__msg_transfer_info_t){.room = 5,
					   .required_dst = 1,
					   .aux_index = -1,
					   .page_count = 2,
					   .pages = pages,
					   .flags = LC__INFO_HAS_PAIR | LC__INFO_WANTS_ACK,
					   .pair_len = 36};
	strcpy(m.info.session, "s");
	strcpy(m.info.status_ep, "tcp://h:1");
	memcpy(m.info.pair, "0f8d6c2e-6a1b-4c3d-9e8f-1a2b3c4d5e6f", 36);
	uint8_t *buf = enc(&m, &len);
	assert_int_equal(lc__msg_decode(buf, len, &out, NULL, 0), 0);
	assert_int_equal(out.info.flags, LC__INFO_HAS_PAIR | LC__INFO_WANTS_ACK);
	assert_int_equal(out.info.pair_len, 36);
	assert_memory_equal(out.info.pair, m.info.pair, LC_PAIR_MAX); /* zero past 36 too */
	lc__msg_free(&out);
	truncations_fail(buf, len);
	/* The length byte out of range either way. */
	size_t at = len - LC__MSG_SECRET_LEN - 36 - 1;
	uint8_t n = LC_PAIR_MIN - 1;
	patch_fails(buf, len, at, &n, 1);
	n = LC_PAIR_MAX + 1;
	patch_fails(buf, len, at, &n, 1);
	free(buf);
	/* The encoder refuses what the decoder would. */
	uint8_t *none = NULL;
	m.info.pair_len = LC_PAIR_MIN - 1;
	assert_int_equal(lc__msg_encode(&m, &none, &len), -EINVAL);
	m.info.pair_len = 16;
	m.info.flags = LC__INFO_WANTS_ACK; /* a value without its flag */
	assert_int_equal(lc__msg_encode(&m, &none, &len), -EINVAL);
	m.info.pair_len = 0;
	m.info.flags = LC__INFO_DUMMY | LC__INFO_WANTS_ACK; /* a dummy is never confirmed */
	m.info.page_count = 0;
	assert_int_equal(lc__msg_encode(&m, &none, &len), -EINVAL);
	assert_null(none);

	/* STATUS Bootstrapped: nothing but the room and the rank. */
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_STATUS;
	m.status = (lc__msg_status_t){.room = 5, .p_rank = 1, .status = LC_ROOM_BOOTSTRAPPED};
	buf = enc(&m, &len);
	assert_int_equal(lc__msg_decode(buf, len, &out, NULL, 0), 0);
	assert_int_equal(out.status.status, LC_ROOM_BOOTSTRAPPED);
	lc__msg_free(&out);
	uint8_t v4[4];
	lc__put_u32(v4, LC_FAIL_CANCELLED);
	patch_fails(buf, len, 12 + 13, v4, 4); /* with a fail reason */
	free(buf);
	m.status.metadata_len = 1;
	m.status.metadata = (uint8_t *)"x";
	assert_int_equal(lc__msg_encode(&m, &none, &len), -EINVAL);
}

static void test_oversize_and_garbage(void **state)
{
	lc__msg_t out;
	/* Claims to be larger than the limit. */
	size_t n = (size_t)LC__MSG_MAX + 1;
	uint8_t *big = calloc(1, n);
	lc__put_u32(big, LC__MSG_MAGIC);
	lc__put_u16(big + 4, LC__MSG_VERSION);
	lc__put_u16(big + 6, LC__MSG_CANCEL);
	lc__put_u32(big + 8, (uint32_t)n);
	decode_fails(big, n);
	free(big);
	decode_fails(NULL, 0);
	/* Random corruption of a valid message never crashes (asan checks). */
	lc__msg_buffer_t bufs[3];
	const void *descs[2];
	size_t lens[2], len;
	lc__msg_t m = make_register(bufs, descs, lens);
	uint8_t *buf = enc(&m, &len);
	uint64_t x = 88172645463325252ull;
	for (int it = 0; it < 20000; it++) {
		uint8_t *c = malloc(len);
		memcpy(c, buf, len);
		for (int k = 0; k < 3; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			c[x % len] = (uint8_t)(x >> 32);
		}
		if (lc__msg_decode(c, len, &out, NULL, 0) == 0)
			lc__msg_free(&out);
		free(c);
	}
	free(buf);
}

/* Every message ends with the session secret, kept bit for bit; without it
 * the message is truncated. */
static void test_secret_closes_every_message(void **state)
{
	lc__msg_t m, out;
	size_t len, plain;
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_LAYERS;
	m.layers = (lc__msg_layers_t){.room = 3, .p_rank = 1, .layers = 2};
	uint8_t *buf = enc(&m, &plain);
	assert_int_equal(plain, LC__MSG_HEADER + 16 + LC__MSG_SECRET_LEN);
	free(buf);
	for (int i = 0; i < LC__MSG_SECRET_LEN; i++)
		m.secret[i] = (uint8_t)(0xc0 + i);
	buf = enc(&m, &len);
	assert_int_equal(len, plain);
	assert_memory_equal(buf + len - LC__MSG_SECRET_LEN, m.secret, LC__MSG_SECRET_LEN);
	assert_int_equal(lc__msg_decode(buf, len, &out, NULL, 0), 0);
	assert_memory_equal(out.secret, m.secret, LC__MSG_SECRET_LEN);
	/* Without the secret: truncated (the header length agreeing). */
	lc__put_u32(buf + 8, (uint32_t)(len - LC__MSG_SECRET_LEN));
	decode_fails(buf, len - LC__MSG_SECRET_LEN);
	assert_int_equal(lc__msg_peek_version(buf, len), LC__MSG_VERSION);
	assert_int_equal(lc__msg_peek_version(buf, 4), -1);
	free(buf);
}

/* An old D's version-1 REGISTER gets a version-1 REGISTER_REPLY it reads:
 * its session, P's rank, the refusal and the reason. */
static void test_v1_register_refused_in_v1(void **state)
{
	uint8_t v1[12 + 2 + 2 + 2 + 9 + 8];
	size_t n = 0;
	lc__put_u32(v1, LC__MSG_MAGIC);
	lc__put_u16(v1 + 4, 1);
	lc__put_u16(v1 + 6, LC__MSG_REGISTER);
	n = 12;
	lc__put_u16(v1 + n, 2);
	memcpy(v1 + n + 2, "d0", 2);
	n += 4;
	lc__put_u16(v1 + n, 9);
	memcpy(v1 + n + 2, "tcp://h:1", 9);
	n += 11;
	memset(v1 + n, 0, 8); /* the rest of a v1 REGISTER is not read */
	n += 8;
	lc__put_u32(v1 + 8, (uint32_t)n);
	char ep[64];
	uint8_t *out;
	size_t out_len;
	assert_int_equal(lc__msg_refuse_v1_register(v1, n, 3, LC_ERR_PROTO, "upgrade D", ep,
						    sizeof ep, &out, &out_len),
			 0);
	assert_string_equal(ep, "tcp://h:1");
	assert_int_equal(lc__msg_peek_version(out, out_len), 1);
	assert_int_equal(lc__get_u16(out + 6), LC__MSG_REGISTER_REPLY);
	assert_int_equal(lc__get_u32(out + 8), out_len);
	assert_int_equal(lc__get_u16(out + 12), 2);
	assert_memory_equal(out + 14, "d0", 2);
	assert_int_equal(lc__get_u32(out + 16), 3);
	assert_int_equal((int32_t)lc__get_u32(out + 20), LC_ERR_PROTO);
	assert_int_equal(lc__get_u16(out + 24), 9);
	assert_memory_equal(out + 26, "upgrade D", 9);
	assert_int_equal(out_len, 35);
	free(out);
	/* Not a v1 REGISTER: a v2 message, another type, a short one. */
	lc__put_u16(v1 + 4, 2);
	assert_int_equal(lc__msg_refuse_v1_register(v1, n, 3, LC_ERR_PROTO, "x", ep, sizeof ep,
						    &out, &out_len),
			 LC_ERR_PROTO);
	lc__put_u16(v1 + 4, 1);
	lc__put_u16(v1 + 6, LC__MSG_CANCEL);
	assert_int_equal(lc__msg_refuse_v1_register(v1, n, 3, LC_ERR_PROTO, "x", ep, sizeof ep,
						    &out, &out_len),
			 LC_ERR_PROTO);
	lc__put_u16(v1 + 6, LC__MSG_REGISTER);
	assert_int_equal(lc__msg_refuse_v1_register(v1, 14, 3, LC_ERR_PROTO, "x", ep, sizeof ep,
						    &out, &out_len),
			 LC_ERR_PROTO);
}

int main(void)
{
	lc_log_set_level(LC_LOG_OFF);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_register_round_trip),
		cmocka_unit_test(test_register_carries_a_curve_key),
		cmocka_unit_test(test_register_carries_a_tp_size),
		cmocka_unit_test(test_register_carries_rows),
		cmocka_unit_test(test_info_round_trip),
		cmocka_unit_test(test_maximal_info_fits),
		cmocka_unit_test(test_small_round_trips),
		cmocka_unit_test(test_encode_refuses),
		cmocka_unit_test(test_encode_refuses_each_field),
		cmocka_unit_test(test_fields_out_of_range),
		cmocka_unit_test(test_info_pair_and_ack),
		cmocka_unit_test(test_oversize_and_garbage),
		cmocka_unit_test(test_secret_closes_every_message),
		cmocka_unit_test(test_v1_register_refused_in_v1),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
