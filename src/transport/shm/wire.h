/*
 * The shm wire format: one SOCK_SEQPACKET message per record group,
 * little-endian, a header {u32 type, u32 count} and then:
 *   HELLO   P->D  u32 magic, u32 version, u32 flags (1: token, 2: P offers
 *                 CUDA IPC, 4: P can use a lane), u32 0, token[16]
 *   WELCOME D->P  u32 magic, u32 version, i32 status, u32 flags (1: D accepts
 *                 CUDA IPC, 2: the lane's memfd is attached (lane.h); 0 from
 *                 a receiver that predates them)
 *   REGION  P->D  u32 src id, u32 flags (1: fd attached), u64 P address,
 *                 u64 length, u64 offset in the memfd (+ SCM_RIGHTS fd)
 *   DROP    P->D  u32 src id, u32 0
 *   WRITES  P->D  count x {u64 batch, u64 room, u32 src id, u32 dst region,
 *                 u64 src offset, u64 dst offset, u64 length, u32 blocks,
 *                 u32 0, u64 src stride, u64 dst stride}
 *                 (blocks > 1: a strided write, `blocks` blocks of length
 *                 bytes at the two strides; 0 or 1: one block)
 *   ACKS    D->P  count x {u64 batch, u32 writes, i32 status}
 *   IPC_REGION P->D (only after a WELCOME accepting IPC) u32 src id, u32 flags
 *                 (1: VMM, an fd attached), u64 allocation size, u64 offset of
 *                 the region in the allocation, u64 region length,
 *                 u64 the allocation's address in P (used as it is when D is
 *                 the same process, where a handle cannot be opened),
 *                 char pci[16] (the exporting device's PCI bus id, NUL-padded),
 *                 u8 handle[64] (cuIpcGetMemHandle's; zero with an fd)
 *   LANE_RING either way, the header alone: the sender put records in the
 *                 lane while the receiver's loop was parked (lane.h). It
 *                 orders nothing and is not counted among P's messages.
 * The count is 0 but for WRITES and ACKS. Every offset of the format is
 * written here and nowhere else: the sides fill and read the structs below.
 * The get_* helpers check a message's length and return 0, or -1 when the
 * message is malformed.
 */
#ifndef LC_TRANSPORT_SHM_WIRE_H
#define LC_TRANSPORT_SHM_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/ctx.h"

#define LC__SHM_MAGIC 0x4d48534cu /* "LSHM" */
#define LC__SHM_VERSION 2u        /* 2: strided write records */

enum lc__shm_msg_type {
	LC__SHM_HELLO = 1,
	LC__SHM_WELCOME = 2,
	LC__SHM_REGION = 3,
	LC__SHM_DROP = 4,
	LC__SHM_WRITES = 5,
	LC__SHM_ACKS = 6,
	LC__SHM_IPC_REGION = 7,
	LC__SHM_LANE_RING = 8,
};

#define LC__SHM_HDR 8
#define LC__SHM_HELLO_LEN (LC__SHM_HDR + 32)
#define LC__SHM_WELCOME_LEN (LC__SHM_HDR + 16)
#define LC__SHM_REGION_LEN (LC__SHM_HDR + 32)
#define LC__SHM_DROP_LEN (LC__SHM_HDR + 8)
#define LC__SHM_IPC_REGION_LEN (LC__SHM_HDR + 120)
#define LC__SHM_WRITE_REC 72
#define LC__SHM_ACK_REC 16
#define LC__SHM_MAX_WRITES 1024 /* records per WRITES or ACKS message */
#define LC__SHM_MSG_MAX (LC__SHM_HDR + LC__SHM_MAX_WRITES * LC__SHM_WRITE_REC)
#define LC__SHM_ACKS_MAX (LC__SHM_HDR + LC__SHM_MAX_WRITES * LC__SHM_ACK_REC)

#define LC__SHM_HELLO_TOKEN 1u  /* HELLO flags: a token follows */
#define LC__SHM_REGION_FD 1u    /* REGION flags: an fd is attached */
#define LC__SHM_HELLO_IPC 2u    /* HELLO flags: P offers CUDA IPC */
#define LC__SHM_WELCOME_IPC 1u  /* WELCOME flags: D accepts CUDA IPC */
#define LC__SHM_HELLO_LANE 4u   /* HELLO flags: P can use a lane */
#define LC__SHM_WELCOME_LANE 2u /* WELCOME flags: the lane's memfd is attached */
#define LC__SHM_IPC_VMM 1u      /* IPC_REGION flags: a VMM allocation's fd is attached */
#define LC__SHM_PCI_LEN 16
#define LC__SHM_IPC_HANDLE_LEN 64

typedef struct lc__shm_hello {
	uint32_t magic, version, flags;
	uint8_t token[LC_TOKEN_LEN];
} lc__shm_hello_t;

typedef struct lc__shm_welcome {
	uint32_t magic, version;
	int32_t status;
	uint32_t flags;
} lc__shm_welcome_t;

typedef struct lc__shm_ipc_region {
	uint32_t id, flags;
	uint64_t alloc_size, offset, len, base;
	char pci[LC__SHM_PCI_LEN]; /* NUL-terminated once decoded */
	uint8_t handle[LC__SHM_IPC_HANDLE_LEN];
} lc__shm_ipc_region_t;

typedef struct lc__shm_region {
	uint32_t id, flags;
	uint64_t addr, len, offset;
} lc__shm_region_t;

typedef struct lc__shm_write {
	uint64_t batch, room;
	uint32_t src, dst;
	uint64_t src_off, dst_off, length;
	uint32_t count; /* blocks of a strided write; 0 or 1: one */
	uint64_t src_stride, dst_stride;
} lc__shm_write_t;

typedef struct lc__shm_ack {
	uint64_t batch;
	uint32_t writes;
	int32_t status;
} lc__shm_ack_t;

/* ---- header ---- */

static inline void lc__shm_put_hdr(uint8_t *m, uint32_t type, uint32_t count)
{
	lc__put_u32(m, type);
	lc__put_u32(m + 4, count);
}

/* The type of a message of len bytes, 0 if it has no header. */
static inline uint32_t lc__shm_type(const uint8_t *m, size_t len)
{
	return len >= LC__SHM_HDR ? lc__get_u32(m) : 0;
}

/* The record count of a WRITES or ACKS message of len bytes whose records
 * are rec bytes each, or 0 when the count and the length disagree. */
static inline uint32_t lc__shm_count(const uint8_t *m, size_t len, size_t rec)
{
	uint32_t n = lc__get_u32(m + 4);
	if (n == 0 || n > LC__SHM_MAX_WRITES || len != LC__SHM_HDR + (size_t)n * rec)
		return 0;
	return n;
}

/* ---- HELLO, WELCOME ---- */

static inline size_t lc__shm_put_hello(uint8_t *m, const lc__shm_hello_t *h)
{
	memset(m, 0, LC__SHM_HELLO_LEN);
	lc__shm_put_hdr(m, LC__SHM_HELLO, 0);
	lc__put_u32(m + LC__SHM_HDR, h->magic);
	lc__put_u32(m + LC__SHM_HDR + 4, h->version);
	lc__put_u32(m + LC__SHM_HDR + 8, h->flags);
	memcpy(m + LC__SHM_HDR + 16, h->token, LC_TOKEN_LEN);
	return LC__SHM_HELLO_LEN;
}

static inline int lc__shm_get_hello(const uint8_t *m, size_t len, lc__shm_hello_t *h)
{
	if (len != LC__SHM_HELLO_LEN)
		return -1;
	h->magic = lc__get_u32(m + LC__SHM_HDR);
	h->version = lc__get_u32(m + LC__SHM_HDR + 4);
	h->flags = lc__get_u32(m + LC__SHM_HDR + 8);
	memcpy(h->token, m + LC__SHM_HDR + 16, LC_TOKEN_LEN);
	return h->magic == LC__SHM_MAGIC ? 0 : -1;
}

static inline size_t lc__shm_put_welcome(uint8_t *m, const lc__shm_welcome_t *w)
{
	memset(m, 0, LC__SHM_WELCOME_LEN);
	lc__shm_put_hdr(m, LC__SHM_WELCOME, 0);
	lc__put_u32(m + LC__SHM_HDR, w->magic);
	lc__put_u32(m + LC__SHM_HDR + 4, w->version);
	lc__put_u32(m + LC__SHM_HDR + 8, (uint32_t)w->status);
	lc__put_u32(m + LC__SHM_HDR + 12, w->flags);
	return LC__SHM_WELCOME_LEN;
}

static inline int lc__shm_get_welcome(const uint8_t *m, size_t len, lc__shm_welcome_t *w)
{
	if (len != LC__SHM_WELCOME_LEN || lc__shm_type(m, len) != LC__SHM_WELCOME)
		return -1;
	w->magic = lc__get_u32(m + LC__SHM_HDR);
	w->version = lc__get_u32(m + LC__SHM_HDR + 4);
	w->status = (int32_t)lc__get_u32(m + LC__SHM_HDR + 8);
	w->flags = lc__get_u32(m + LC__SHM_HDR + 12);
	return w->magic == LC__SHM_MAGIC ? 0 : -1;
}

/* ---- REGION, DROP ---- */

static inline size_t lc__shm_put_region(uint8_t *m, const lc__shm_region_t *r)
{
	lc__shm_put_hdr(m, LC__SHM_REGION, 0);
	lc__put_u32(m + LC__SHM_HDR, r->id);
	lc__put_u32(m + LC__SHM_HDR + 4, r->flags);
	lc__put_u64(m + LC__SHM_HDR + 8, r->addr);
	lc__put_u64(m + LC__SHM_HDR + 16, r->len);
	lc__put_u64(m + LC__SHM_HDR + 24, r->offset);
	return LC__SHM_REGION_LEN;
}

static inline int lc__shm_get_region(const uint8_t *m, size_t len, lc__shm_region_t *r)
{
	if (len != LC__SHM_REGION_LEN)
		return -1;
	r->id = lc__get_u32(m + LC__SHM_HDR);
	r->flags = lc__get_u32(m + LC__SHM_HDR + 4);
	r->addr = lc__get_u64(m + LC__SHM_HDR + 8);
	r->len = lc__get_u64(m + LC__SHM_HDR + 16);
	r->offset = lc__get_u64(m + LC__SHM_HDR + 24);
	return 0;
}

static inline size_t lc__shm_put_drop(uint8_t *m, uint32_t id)
{
	lc__shm_put_hdr(m, LC__SHM_DROP, 0);
	lc__put_u32(m + LC__SHM_HDR, id);
	lc__put_u32(m + LC__SHM_HDR + 4, 0);
	return LC__SHM_DROP_LEN;
}

static inline int lc__shm_get_drop(const uint8_t *m, size_t len, uint32_t *id)
{
	if (len != LC__SHM_DROP_LEN)
		return -1;
	*id = lc__get_u32(m + LC__SHM_HDR);
	return 0;
}

/* ---- IPC_REGION ---- */

static inline size_t lc__shm_put_ipc_region(uint8_t *m, const lc__shm_ipc_region_t *r)
{
	memset(m, 0, LC__SHM_IPC_REGION_LEN);
	lc__shm_put_hdr(m, LC__SHM_IPC_REGION, 0);
	lc__put_u32(m + LC__SHM_HDR, r->id);
	lc__put_u32(m + LC__SHM_HDR + 4, r->flags);
	lc__put_u64(m + LC__SHM_HDR + 8, r->alloc_size);
	lc__put_u64(m + LC__SHM_HDR + 16, r->offset);
	lc__put_u64(m + LC__SHM_HDR + 24, r->len);
	lc__put_u64(m + LC__SHM_HDR + 32, r->base);
	memcpy(m + LC__SHM_HDR + 40, r->pci, strnlen(r->pci, LC__SHM_PCI_LEN - 1));
	memcpy(m + LC__SHM_HDR + 56, r->handle, LC__SHM_IPC_HANDLE_LEN);
	return LC__SHM_IPC_REGION_LEN;
}

static inline int lc__shm_get_ipc_region(const uint8_t *m, size_t len, lc__shm_ipc_region_t *r)
{
	if (len != LC__SHM_IPC_REGION_LEN)
		return -1;
	r->id = lc__get_u32(m + LC__SHM_HDR);
	r->flags = lc__get_u32(m + LC__SHM_HDR + 4);
	r->alloc_size = lc__get_u64(m + LC__SHM_HDR + 8);
	r->offset = lc__get_u64(m + LC__SHM_HDR + 16);
	r->len = lc__get_u64(m + LC__SHM_HDR + 24);
	r->base = lc__get_u64(m + LC__SHM_HDR + 32);
	memcpy(r->pci, m + LC__SHM_HDR + 40, LC__SHM_PCI_LEN);
	r->pci[LC__SHM_PCI_LEN - 1] = '\0';
	memcpy(r->handle, m + LC__SHM_HDR + 56, LC__SHM_IPC_HANDLE_LEN);
	return 0;
}

/* ---- WRITES, ACKS: record i of a message (header excluded) ---- */

static inline void lc__shm_put_write(uint8_t *m, uint32_t i, const lc__shm_write_t *w)
{
	uint8_t *r = m + LC__SHM_HDR + (size_t)i * LC__SHM_WRITE_REC;
	lc__put_u64(r, w->batch);
	lc__put_u64(r + 8, w->room);
	lc__put_u32(r + 16, w->src);
	lc__put_u32(r + 20, w->dst);
	lc__put_u64(r + 24, w->src_off);
	lc__put_u64(r + 32, w->dst_off);
	lc__put_u64(r + 40, w->length);
	lc__put_u32(r + 48, w->count);
	lc__put_u32(r + 52, 0);
	lc__put_u64(r + 56, w->src_stride);
	lc__put_u64(r + 64, w->dst_stride);
}

static inline void lc__shm_get_write(const uint8_t *m, uint32_t i, lc__shm_write_t *w)
{
	const uint8_t *r = m + LC__SHM_HDR + (size_t)i * LC__SHM_WRITE_REC;
	w->batch = lc__get_u64(r);
	w->room = lc__get_u64(r + 8);
	w->src = lc__get_u32(r + 16);
	w->dst = lc__get_u32(r + 20);
	w->src_off = lc__get_u64(r + 24);
	w->dst_off = lc__get_u64(r + 32);
	w->length = lc__get_u64(r + 40);
	w->count = lc__get_u32(r + 48);
	w->src_stride = lc__get_u64(r + 56);
	w->dst_stride = lc__get_u64(r + 64);
}

/* The batch of write record i, without decoding the rest. */
static inline uint64_t lc__shm_write_batch(const uint8_t *m, uint32_t i)
{
	return lc__get_u64(m + LC__SHM_HDR + (size_t)i * LC__SHM_WRITE_REC);
}

static inline void lc__shm_put_ack(uint8_t *m, uint32_t i, const lc__shm_ack_t *a)
{
	uint8_t *r = m + LC__SHM_HDR + (size_t)i * LC__SHM_ACK_REC;
	lc__put_u64(r, a->batch);
	lc__put_u32(r + 8, a->writes);
	lc__put_u32(r + 12, (uint32_t)a->status);
}

static inline void lc__shm_get_ack(const uint8_t *m, uint32_t i, lc__shm_ack_t *a)
{
	const uint8_t *r = m + LC__SHM_HDR + (size_t)i * LC__SHM_ACK_REC;
	a->batch = lc__get_u64(r);
	a->writes = lc__get_u32(r + 8);
	a->status = (int32_t)lc__get_u32(r + 12);
}

/* Message lengths of WRITES and ACKS of n records. */
static inline size_t lc__shm_writes_len(uint32_t n)
{
	return LC__SHM_HDR + (size_t)n * LC__SHM_WRITE_REC;
}

static inline size_t lc__shm_acks_len(uint32_t n)
{
	return LC__SHM_HDR + (size_t)n * LC__SHM_ACK_REC;
}

/* Whether a record's source blocks lie in a source region of len bytes
 * (a strided record's span: count within the cap, blocks not overlapping,
 * no overflow). */
static inline bool lc__shm_src_span_ok(uint64_t len, const lc__shm_write_t *w)
{
	uint64_t span = w->length;
	if (w->count > 1) {
		uint64_t k = w->count - 1;
		if (w->count > LC_WRITE_MAX_COUNT || w->src_stride < w->length ||
		    w->src_stride > (UINT64_MAX - w->length) / k)
			return false;
		span = k * w->src_stride + w->length;
	}
	return w->src_off <= len && span <= len - w->src_off;
}

/* What a malformed message of this type is called in the log. */
static inline const char *lc__shm_bad_text(uint32_t type)
{
	switch (type) {
	case LC__SHM_HELLO:
		return "bad hello";
	case LC__SHM_REGION:
		return "bad region";
	case LC__SHM_DROP:
		return "bad drop";
	case LC__SHM_IPC_REGION:
		return "bad CUDA IPC region";
	case LC__SHM_WRITES:
		return "bad writes";
	case LC__SHM_LANE_RING:
		return "bad lane ring";
	default:
		return "unknown type";
	}
}

#endif
