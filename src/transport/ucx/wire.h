/*
 * The ucx transport's wire: the active messages between P (the sender of
 * writes) and D (the receiver), and the transport keys it appends to a
 * packed region descriptor. Every field is little-endian; every message is
 * one eager active message (UCP_AM_FLAG_WHOLE_MSG) sent with
 * UCP_AM_SEND_FLAG_REPLY, except WRITE, whose payload may travel by
 * rendezvous. docs/transport-ucx.md explains the protocol.
 *
 * Decoders take the received length and return 0, or -1 for a message too
 * short or inconsistent (the caller counts frames_malformed); they never
 * read past `len`.
 */
#ifndef LC_TRANSPORT_UCX_WIRE_H
#define LC_TRANSPORT_UCX_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/common.h"

/* Active message ids. */
enum {
	UW_HELLO = 1,       /* P->D: uw_hello_t */
	UW_HELLO_REPLY = 2, /* D->P: status (i32) */
	UW_LEASE = 3,       /* P->D: uw_lease_t, then n x uw_lease_entry_t */
	UW_LEASE_REPLY = 4, /* D->P: uw_lease_reply_t */
	UW_DONE = 5,        /* P->D: uw_done_t: the lease's writes are finished */
	UW_ACK = 6,         /* D->P: uw_ack_t: the lease is released */
	UW_REVOKE = 7,      /* D->P: room (u64): stop writing it, release its leases */
	UW_WRITE = 8,       /* P->D, data mode "am": header uw_write_t; payload */
};

/* 2: lease flags, ACK carries D's count. A peer of another version is
 * refused at HELLO (LC_ERR_PROTO). */
#define UW_VERSION 2
#define UW_HELLO_MAGIC 0x5855434cu /* "LCUX" */

/* ---- HELLO: u32 magic, u16 version, u8 has_token, u8 0, token ---- */

#define UW_HELLO_LEN (8 + LC_TOKEN_LEN)

typedef struct uw_hello {
	uint16_t version;
	bool has_token;
	uint8_t token[LC_TOKEN_LEN];
} uw_hello_t;

static inline void uw_hello_encode(uint8_t *p, const uw_hello_t *h)
{
	memset(p, 0, UW_HELLO_LEN);
	lc__put_u32(p, UW_HELLO_MAGIC);
	lc__put_u16(p + 4, h->version);
	p[6] = h->has_token;
	memcpy(p + 8, h->token, LC_TOKEN_LEN);
}

static inline int uw_hello_decode(const uint8_t *p, size_t len, uw_hello_t *h)
{
	if (len < UW_HELLO_LEN || lc__get_u32(p) != UW_HELLO_MAGIC)
		return -1;
	h->version = lc__get_u16(p + 4);
	h->has_token = p[6] != 0;
	memcpy(h->token, p + 8, LC_TOKEN_LEN);
	return 0;
}

/* ---- HELLO_REPLY: i32 status ---- */

#define UW_STATUS_LEN 4

static inline void uw_status_encode(uint8_t *p, int status)
{
	lc__put_u32(p, (uint32_t)status);
}

static inline int uw_status_decode(const uint8_t *p, size_t len, int *status)
{
	if (len < UW_STATUS_LEN)
		return -1;
	*status = (int32_t)lc__get_u32(p);
	return 0;
}

/* ---- LEASE: u64 seq, u64 room, u32 n, u32 flags; n x entry ---- */

#define UW_LEASE_HDR 24
#define UW_LEASE_ENTRY 24 /* u32 region, u32 0, u64 offset, u64 length */
#define UW_LEASE_F_AM 1u  /* the writes travel as WRITE messages */

typedef struct uw_lease {
	uint64_t seq, room;
	uint32_t n, flags;
} uw_lease_t;

typedef struct uw_lease_entry {
	uint32_t region;
	uint64_t offset, length;
} uw_lease_entry_t;

static inline size_t uw_lease_len(size_t n)
{
	return UW_LEASE_HDR + n * UW_LEASE_ENTRY;
}

static inline void uw_lease_encode(uint8_t *p, const uw_lease_t *h)
{
	lc__put_u64(p, h->seq);
	lc__put_u64(p + 8, h->room);
	lc__put_u32(p + 16, h->n);
	lc__put_u32(p + 20, h->flags);
}

static inline void uw_lease_entry_encode(uint8_t *p, size_t i, const uw_lease_entry_t *e)
{
	uint8_t *q = p + uw_lease_len(i);
	lc__put_u32(q, e->region);
	lc__put_u32(q + 4, 0);
	lc__put_u64(q + 8, e->offset);
	lc__put_u64(q + 16, e->length);
}

/* The header only (its seq is usable for a reply even when -1 follows
 * from uw_lease_check). */
static inline int uw_lease_decode(const uint8_t *p, size_t len, uw_lease_t *h)
{
	if (len < UW_LEASE_HDR)
		return -1;
	h->seq = lc__get_u64(p);
	h->room = lc__get_u64(p + 8);
	h->n = lc__get_u32(p + 16);
	h->flags = lc__get_u32(p + 20);
	return 0;
}

/* At least one entry, and exactly n of them. */
static inline int uw_lease_check(const uw_lease_t *h, size_t len)
{
	return h->n > 0 && (len - UW_LEASE_HDR) % UW_LEASE_ENTRY == 0 &&
			       (len - UW_LEASE_HDR) / UW_LEASE_ENTRY == h->n
		       ? 0
		       : -1;
}

/* Entry i of a checked lease. */
static inline void uw_lease_entry(const uint8_t *p, size_t i, uw_lease_entry_t *e)
{
	const uint8_t *q = p + uw_lease_len(i);
	e->region = lc__get_u32(q);
	e->offset = lc__get_u64(q + 8);
	e->length = lc__get_u64(q + 16);
}

/* ---- LEASE_REPLY: u64 seq, i32 status, u32 index of the rejected write ---- */

#define UW_LEASE_REPLY_LEN 16

typedef struct uw_lease_reply {
	uint64_t seq;
	int status;
	uint32_t index;
} uw_lease_reply_t;

static inline void uw_lease_reply_encode(uint8_t *p, const uw_lease_reply_t *r)
{
	lc__put_u64(p, r->seq);
	lc__put_u32(p + 8, (uint32_t)r->status);
	lc__put_u32(p + 12, r->index);
}

static inline int uw_lease_reply_decode(const uint8_t *p, size_t len, uw_lease_reply_t *r)
{
	if (len < UW_LEASE_REPLY_LEN)
		return -1;
	r->seq = lc__get_u64(p);
	r->status = (int32_t)lc__get_u32(p + 8);
	r->index = lc__get_u32(p + 12);
	return 0;
}

/* ---- DONE: u64 seq, u64 writes, u64 bytes, i64 status ----
 * writes: the leading writes of the lease that P put (or sent); bytes:
 * their total length. D counts them only in put mode (the trust point). */

#define UW_DONE_LEN 32

typedef struct uw_done {
	uint64_t seq, writes, bytes;
	int64_t status;
} uw_done_t;

static inline void uw_done_encode(uint8_t *p, const uw_done_t *d)
{
	lc__put_u64(p, d->seq);
	lc__put_u64(p + 8, d->writes);
	lc__put_u64(p + 16, d->bytes);
	lc__put_u64(p + 24, (uint64_t)d->status);
}

static inline int uw_done_decode(const uint8_t *p, size_t len, uw_done_t *d)
{
	if (len < UW_DONE_LEN)
		return -1;
	d->seq = lc__get_u64(p);
	d->writes = lc__get_u64(p + 8);
	d->bytes = lc__get_u64(p + 16);
	d->status = (int64_t)lc__get_u64(p + 24);
	return 0;
}

/* ---- ACK: u64 seq, u64 landed (the writes D counted as in place) ---- */

#define UW_ACK_LEN 16

typedef struct uw_ack {
	uint64_t seq, landed;
} uw_ack_t;

static inline void uw_ack_encode(uint8_t *p, const uw_ack_t *a)
{
	lc__put_u64(p, a->seq);
	lc__put_u64(p + 8, a->landed);
}

static inline int uw_ack_decode(const uint8_t *p, size_t len, uw_ack_t *a)
{
	if (len < UW_ACK_LEN)
		return -1;
	a->seq = lc__get_u64(p);
	a->landed = lc__get_u64(p + 8);
	return 0;
}

/* ---- REVOKE: u64 room ---- */

#define UW_REVOKE_LEN 8

static inline void uw_revoke_encode(uint8_t *p, uint64_t room)
{
	lc__put_u64(p, room);
}

static inline int uw_revoke_decode(const uint8_t *p, size_t len, uint64_t *room)
{
	if (len < UW_REVOKE_LEN)
		return -1;
	*room = lc__get_u64(p);
	return 0;
}

/* ---- WRITE header: u64 lease seq, u64 write index; the payload follows ---- */

#define UW_WRITE_HDR 16

static inline void uw_write_encode(uint8_t *p, uint64_t seq, uint64_t index)
{
	lc__put_u64(p, seq);
	lc__put_u64(p + 8, index);
}

static inline int uw_write_decode(const uint8_t *p, size_t len, uint64_t *seq, uint64_t *index)
{
	if (len < UW_WRITE_HDR)
		return -1;
	*seq = lc__get_u64(p);
	*index = lc__get_u64(p + 8);
	return 0;
}

/* ---- Region keys: the bytes of a descriptor's LC__KEY_TAG_UCX frame
 * (core/region.h): u32 "LCUK", u16 version 1, u16 rkey length, u64 D's
 * address of offset 0, u64 mapped length, rkey bytes. ---- */

#define UW_DESC_HEADER 32
/* Where the key starts in a descriptor that carries only it: past the
 * header and its frame. */
#define UW_KEY_AT (UW_DESC_HEADER + 4)
#define UW_KEY_MAGIC 0x4b55434cu /* "LCUK" */
#define UW_KEY_VERSION 1
#define UW_KEY_HDR 24

typedef struct uw_key {
	uint64_t base, length;
	const uint8_t *rkey;
	size_t rkey_len;
} uw_key_t;

static inline void uw_key_encode(uint8_t *p, const uw_key_t *k)
{
	lc__put_u32(p, UW_KEY_MAGIC);
	lc__put_u16(p + 4, UW_KEY_VERSION);
	lc__put_u16(p + 6, (uint16_t)k->rkey_len);
	lc__put_u64(p + 8, k->base);
	lc__put_u64(p + 16, k->length);
	memcpy(p + UW_KEY_HDR, k->rkey, k->rkey_len);
}

/* A ucx key of key_len bytes (from the network: the rkey length must
 * account for every byte); k->rkey points into it. */
static inline int uw_key_decode(const uint8_t *key, size_t key_len, uw_key_t *k)
{
	if (!key || key_len < UW_KEY_HDR || lc__get_u32(key) != UW_KEY_MAGIC ||
	    lc__get_u16(key + 4) != UW_KEY_VERSION ||
	    UW_KEY_HDR + (size_t)lc__get_u16(key + 6) != key_len)
		return -1;
	k->rkey_len = lc__get_u16(key + 6);
	k->base = lc__get_u64(key + 8);
	k->length = lc__get_u64(key + 16);
	k->rkey = key + UW_KEY_HDR;
	return 0;
}

#endif
