/*
 * The tcp:// wire format (version 2), shared by both ends of a lane. Every
 * integer is little-endian; every frame starts with the same four bytes:
 *
 *   u16 magic 0x434C ("LC" on the wire)   u8 type   u8 version (2)
 *
 * then 20 more bytes of header; a WRITES frame also carries a table and
 * payloads whose sizes its header gives, so a reader always knows how many
 * bytes to expect before it trusts any of them:
 *
 *   WRITES (sender -> receiver): a run of n writes of one room
 *     4 u32 n (1..LC__TCP_MAX_RUN)   8 u64 room   16 u64 seq of the first write
 *     then n descriptors of 32 bytes:
 *       0 u32 region   4 u32 count   8 u64 offset   16 u64 length
 *       24 u64 stride
 *     then the n payloads, back to back, in descriptor order.
 *     count 0 or 1: a plain write of `length` bytes at offset (stride 0).
 *     count 2..LC_WRITE_MAX_COUNT: a strided write, count blocks of
 *     `length` bytes landing `stride` (>= length) apart from offset; its
 *     payload is the blocks' bytes back to back (count * length). The
 *     sender's source stride stays at the sender: it gathers the blocks
 *     (or sends the staged packed copy of a device source).
 *
 *   control frames (24 bytes in all)
 *     4 i32 status   8 u64 a   16 u64 b
 *     HELLO       (sender -> receiver) status = flags (bit 0: a token follows),
 *                 a, b = the 16 token bytes (zero without a token)
 *     HELLO_REPLY (receiver -> sender) status = 0, LC_ERR_AUTH, or -EBUSY (the
 *                 receiver holds its cap of lanes and may close none); a = b = 0
 *     ACK         (receiver -> sender) status = 0; a = writes processed on
 *                 this lane so far (cumulative); b = 0
 *     REJECT      (receiver -> sender) status = the failure code; a = seq of
 *                 the rejected write; b = detail (LC__TCP_REJECT_*). It also
 *                 acknowledges every write before seq.
 *
 * seq numbers the writes of one lane from 0; the receiver checks that each
 * WRITES frame starts at the next one, so a desynchronised stream is caught
 * at the first frame instead of writing garbage somewhere. The table ahead
 * of the payloads lets the receiver check a whole run and read its payloads
 * straight into place with one readv. Docs: docs/transport-tcp.md.
 */
#ifndef LC_TRANSPORT_TCP_WIRE_H
#define LC_TRANSPORT_TCP_WIRE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/common.h"

#define LC__TCP_MAGIC 0x434Cu
#define LC__TCP_VERSION 2u /* 2: strided descriptors (count, stride) */
#define LC__TCP_HDR_LEN 24u  /* every frame's header; all of a control frame */
#define LC__TCP_DESC_LEN 32u /* one write in a WRITES table */
#define LC__TCP_MAX_RUN 128u /* writes per WRITES frame */
#define LC__TCP_CTRL_LEN LC__TCP_HDR_LEN
/* A write longer than this is a malformed frame, not a big write: it keeps
 * a corrupted length from making a lane discard for ever. */
#define LC__TCP_MAX_WRITE (1ull << 44)

enum lc__tcp_type {
	LC__TCP_WRITES = 0x01,
	LC__TCP_HELLO = 0x10,
	LC__TCP_HELLO_REPLY = 0x11,
	LC__TCP_ACK = 0x20,
	LC__TCP_REJECT = 0x21,
};

enum lc__tcp_hello_flags { LC__TCP_HELLO_TOKEN = 1 };

enum lc__tcp_reject_detail {
	LC__TCP_REJECT_CHECK = 0,   /* region, range or grant check failed */
	LC__TCP_REJECT_REVOKED = 1, /* the grant was revoked during the payload */
};

typedef struct lc__tcp_run_hdr {
	uint32_t n;
	uint64_t room, seq;
} lc__tcp_run_hdr_t;

typedef struct lc__tcp_desc {
	uint32_t region, count; /* count 0 or 1: plain */
	uint64_t offset, length, stride;
} lc__tcp_desc_t;

/* Payload bytes of a descriptor on the wire; UINT64_MAX if they overflow. */
static inline uint64_t lc__tcp_desc_bytes(const lc__tcp_desc_t *d)
{
	uint64_t k = d->count > 1 ? d->count : 1;
	return d->length > UINT64_MAX / k ? UINT64_MAX : d->length * k;
}

typedef struct lc__tcp_ctrl {
	uint8_t type;
	int32_t status;
	uint64_t a, b;
} lc__tcp_ctrl_t;

static inline void lc__tcp_put_prefix(uint8_t *p, uint8_t type)
{
	lc__put_u16(p, LC__TCP_MAGIC);
	p[2] = type;
	p[3] = LC__TCP_VERSION;
}

static inline void lc__tcp_encode_run(uint8_t *p, const lc__tcp_run_hdr_t *h)
{
	lc__tcp_put_prefix(p, LC__TCP_WRITES);
	lc__put_u32(p + 4, h->n);
	lc__put_u64(p + 8, h->room);
	lc__put_u64(p + 16, h->seq);
}

static inline void lc__tcp_encode_desc(uint8_t *p, const lc__tcp_desc_t *d)
{
	lc__put_u32(p, d->region);
	lc__put_u32(p + 4, d->count);
	lc__put_u64(p + 8, d->offset);
	lc__put_u64(p + 16, d->length);
	lc__put_u64(p + 24, d->stride);
}

static inline void lc__tcp_encode_ctrl(uint8_t *p, const lc__tcp_ctrl_t *c)
{
	lc__tcp_put_prefix(p, c->type);
	lc__put_u32(p + 4, (uint32_t)c->status);
	lc__put_u64(p + 8, c->a);
	lc__put_u64(p + 16, c->b);
}

/* Whether the 4 bytes at p start one of our frames (magic, version, a
 * known type). */
static inline bool lc__tcp_prefix_ok(const uint8_t *p)
{
	if (lc__get_u16(p) != LC__TCP_MAGIC || p[3] != LC__TCP_VERSION)
		return false;
	switch (p[2]) {
	case LC__TCP_WRITES:
	case LC__TCP_HELLO:
	case LC__TCP_HELLO_REPLY:
	case LC__TCP_ACK:
	case LC__TCP_REJECT:
		return true;
	default:
		return false;
	}
}

static inline void lc__tcp_decode_run(const uint8_t *p, lc__tcp_run_hdr_t *h)
{
	h->n = lc__get_u32(p + 4);
	h->room = lc__get_u64(p + 8);
	h->seq = lc__get_u64(p + 16);
}

static inline void lc__tcp_decode_desc(const uint8_t *p, lc__tcp_desc_t *d)
{
	d->region = lc__get_u32(p);
	d->count = lc__get_u32(p + 4);
	d->offset = lc__get_u64(p + 8);
	d->length = lc__get_u64(p + 16);
	d->stride = lc__get_u64(p + 24);
}

static inline void lc__tcp_decode_ctrl(const uint8_t *p, lc__tcp_ctrl_t *c)
{
	c->type = p[2];
	c->status = (int32_t)lc__get_u32(p + 4);
	c->a = lc__get_u64(p + 8);
	c->b = lc__get_u64(p + 16);
}

#endif
