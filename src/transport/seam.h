/*
 * The memory seam: the one place where a byte leaves a local source region
 * and the one place where it lands in a destination region. Transports move
 * bytes between these two points and decide nothing about memory: they ask
 * the seam where a write may land (checked against the context's regions
 * and the room's grant), land it through the seam, and tell the seam when
 * it is in place, which counts it.
 *
 * Host memory keeps its fast path: lc__land_open() hands out a direct
 * pointer, and a transport that can receive straight into place (tcp's
 * readv, UCX's receive into a user buffer) does so inside an
 * lc__land_enter/exit bracket. Memory that no CPU pointer may reach gets no
 * direct pointer; the transport then lands through lc__land_copy(), which
 * stages it. Decode-side accounting hooks into lc__land_done().
 *
 * Threading: every function is safe from any transport thread; one landing
 * (lc__land_t) belongs to the thread that opened it.
 */
#ifndef LC_TRANSPORT_SEAM_H
#define LC_TRANSPORT_SEAM_H

#include <stdbool.h>
#include <stdint.h>

#include "core/copier.h"
#include "core/ctx.h"

/* Copies into granted memory are cut in slices of at most this, each in
 * its own grant bracket, so that a revoke never waits long for one; it is
 * also the size of every bounce buffer the seam makes (the one definition:
 * no transport slices by itself). */
#define LC__LAND_SLICE (4u << 20)

/* One checked write on its way into a destination region. */
typedef struct lc__land {
	lc_ctx_t *ctx;
	lc__grant_room_t *g;   /* referenced from open to done */
	uint8_t *dst;          /* direct destination, or NULL: land by lc__land_copy */
	uint8_t *dev;          /* device-kind destination (never dereferenced), or NULL */
	struct lc__copier *cp; /* its copy engine */
	uint64_t room, offset, length;
	uint32_t region;
} lc__land_t;

/* Check [offset, offset+length) of region against the context's regions and
 * room's grant, and the writer against the room's binding: `who` is the id
 * of the token the write's connection presented at its handshake (0: none
 * of this context's; lc__ctx_token_accepted gave it), which a room bound
 * to other tokens refuses (core/grant.h). Count and log a rejection
 * (LC_ERR_REGION, LC_ERR_OUT_OF_REGION, LC_ERR_GRANT; a writer the room
 * was not given to is LC_ERR_GRANT counted in writes_rejected_token). On
 * success *l holds a grant reference until lc__land_done(). */
int lc__land_open(lc_ctx_t *ctx, uint64_t who, uint64_t room, uint32_t region, uint64_t offset,
		  uint64_t length, lc__land_t *l);
/* Bracket a direct landing into l->dst (or into any landing sharing l->g).
 * false once the room was revoked: nothing may land, and no exit is due. */
bool lc__land_enter(const lc__land_t *l);
void lc__land_exit(const lc__land_t *l);
/* Land n bytes from src at byte `at` of the write, inside its own bracket.
 * LC_ERR_GRANT if the room was revoked. Into device memory (l->dev) this
 * goes through the region's copy engine and returns once the copy has
 * completed: a write is acknowledged only after its device copy, and
 * lc_grant_revoke (which waits for brackets) waits for the room's device
 * copies in flight. A failed device copy is LC_ERR_IO. */
int lc__land_copy(const lc__land_t *l, uint64_t at, const void *src, uint64_t n);
/* The write is finished: when `landed`, all of its bytes are in place and
 * are counted (writes_applied, bytes_applied) and marked covered on the
 * room's grant entry (lc__grant_landed, by region, offset and length: what
 * D's Success check and layers_ready read). Bytes that had landed before
 * count bytes_landed_twice (the room's first such write is logged); a write
 * that breaks the room's accounting (grant_intervals_max) counts
 * grant_intervals_capped and is logged. Releases the grant. */
void lc__land_done(lc__land_t *l, bool landed);
/* Whether the room of l was revoked (a probe: nothing is entered). */
bool lc__land_is_revoked(const lc__land_t *l);
/* Land n bytes at byte `at` of l that a producer writes: fill(arg, buf, off,
 * k) puts up to k (> 0) bytes of the write's [at + off, ...) into buf and
 * returns how many (> 0) or a negative error, which lc__land_fill returns.
 * Into host memory buf is the destination itself, inside a bracket (the
 * kernel's process_vm_readv straight into place); into device memory it is
 * a host bounce slice the seam then lands through the copy engine. So a
 * transport that produces bytes needs no device code. 0, LC_ERR_GRANT
 * (revoked), LC_ERR_IO (a device copy failed), -ENOMEM, or fill's error. */
typedef int64_t (*lc__land_fill_fn)(void *arg, uint8_t *buf, uint64_t off, uint64_t k);
int lc__land_fill(const lc__land_t *l, uint64_t at, uint64_t n, lc__land_fill_fn fill, void *arg);
/* Pipelined device landing (docs/gpu.md "Staging"): land n bytes from host
 * memory src at byte `at` of a device-kind landing l (l->dev) without
 * waiting. The copy is queued on l's engine in slices, each holding the
 * room's grant bracket from queueing until it completed, so lc_grant_revoke
 * waits for every copy in flight. 0: done(arg, status) runs exactly once,
 * after the last slice's bracket was left, on the engine's thread (on the
 * caller's, before this returns, only when a later slice could not be
 * queued), with 0, LC_ERR_IO, or LC_ERR_GRANT if the room was revoked after
 * the first slice; the caller keeps src untouched
 * and l open (lc__land_done not yet called) until then. LC_ERR_GRANT if the
 * room was revoked, LC_ERR_IO if nothing could be queued: done never runs
 * then. */
int lc__land_copy_async(const lc__land_t *l, uint64_t at, const void *src, uint64_t n,
			lc__copy_done_fn done, void *arg);
/* open + copy + done for a payload that is addressable as a whole (loop,
 * shm, UCX eager messages), from writer `who` (lc__land_open). */
int lc__land_write(lc_ctx_t *ctx, uint64_t who, uint64_t room, uint32_t region, uint64_t offset,
		   const void *src, uint64_t length);
/* A strided write's receiver-side shape: count blocks of length bytes,
 * dst_stride apart from offset. Whether it is sane (count 1..
 * LC_WRITE_MAX_COUNT, stride >= length for count > 1, no overflow); sets
 * *span to the bytes from the first block's start to the last one's end.
 * A peer's bad shape is counted (writes_rejected_range) and logged here. */
int lc__land_strided_span(lc_ctx_t *ctx, uint64_t room, uint64_t offset, uint64_t length,
			  uint32_t count, uint64_t dst_stride, uint64_t *span);
/* The blocks of a strided write whose source blocks are src_stride apart:
 * the whole span is checked against the region and the grant at once
 * (lc__land_open), then each block lands and is accounted by itself.
 * count <= 1 is lc__land_write. */
int lc__land_strided(lc_ctx_t *ctx, uint64_t who, uint64_t room, uint32_t region, uint64_t offset,
		     const void *src, uint64_t length, uint32_t count, uint64_t src_stride,
		     uint64_t dst_stride);
/* Accounting of one block [at, at + n) of a landing opened over a span:
 * counts the block as landed (as lc__land_done does for a whole write) but
 * keeps the grant reference. */
void lc__land_block_done(lc__land_t *l, uint64_t at, uint64_t n);
/* Release the grant and count nothing more: what landed of l was counted
 * block by block (lc__land_block_done), or nothing landed. */
void lc__land_release(lc__land_t *l);
/* A revoke cut a landing short: count it as a grant rejection. */
void lc__land_revoked(lc__land_t *l);

/* Source side: the registered local region holding [addr, addr+len)
 * (LC_ERR_REGION if none). The generic layer checks every write's source
 * at post, and stages device-kind sources into the context's host ring
 * before a transport sees the batch (transport/stage.c), so transports
 * read every source directly. */
int lc__source_find(lc_ctx_t *ctx, const void *addr, size_t len, lc__region_info_t *out);

#endif
