/*
 * shm's lane: two single-producer rings in one memfd that D creates for a
 * connection and passes with its WELCOME, beside the socket. P puts the
 * write records of small plain batches in the writes ring, D its
 * acknowledgements of them in the acks ring; a loop that spins (io.h,
 * ops->poll) finds them without a system call, and a side rings its peer
 * (a LANE_RING message on the socket) only when the peer's loop parked.
 * Design and rules: docs/transport-shm.md "The lane".
 *
 * Layout (little-endian, offsets in bytes; each index on its own line):
 *     0  u32 magic, u32 slots (D, at creation)
 *    64  u64 writes head   (P)       128  u64 writes tail   (D)
 *   192  u64 acks head     (D)       256  u64 acks tail     (P)
 *   320  u32 P parked      (P)       384  u32 D parked      (D)
 *   448  u32 P polling     (P: a caller waiting on P's completion queue
 *                             takes acks from the ring itself, cq.h)
 *  4096  slots x 80: a write record (wire.h's 72 bytes) + u64 the count
 *        of socket messages P had sent after the handshake when it put it
 *        then slots x 16: an ack record (wire.h's)
 * Indices run free (u64); slot = index % slots. Every field is writable by
 * both processes: a side keeps its own indices privately and only
 * publishes them, checks what the peer publishes (a head more than `slots`
 * ahead of the tail is malformed), and copies a record out of the ring
 * before it looks at it.
 */
#ifndef LC_TRANSPORT_SHM_LANE_H
#define LC_TRANSPORT_SHM_LANE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LC__SHM_LANE_MAGIC 0x4e4c534cu /* "LSLN" */
#define LC__SHM_LANE_SLOTS 1024u       /* = LC__SHM_MAX_WRITES */
#define LC__SHM_LANE_WSLOT 80
#define LC__SHM_LANE_ASLOT 16
#define LC__SHM_LANE_RINGS 4096
#define LC__SHM_LANE_SIZE                                                                          \
	(LC__SHM_LANE_RINGS + LC__SHM_LANE_SLOTS * (LC__SHM_LANE_WSLOT + LC__SHM_LANE_ASLOT))

typedef struct lc__shm_lane {
	uint8_t *base; /* NULL: no lane */
	_Atomic uint64_t *w_head, *w_tail, *a_head, *a_tail;
	_Atomic uint32_t *p_parked, *d_parked, *p_polling;
	uint8_t *wslots, *aslots;
	void *tsan_key; /* the same for both mappings of one lane in a process */
} lc__shm_lane_t;

/* ThreadSanitizer sees a release and an acquire only at one address, and
 * P and D in one process (the tests) map the lane twice: the indices'
 * ordering is told to it on a key both mappings share (lane.c). */
#if defined(__SANITIZE_THREAD__)
#define LC__LANE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LC__LANE_TSAN 1
#endif
#endif
#ifdef LC__LANE_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define LC__LANE_RELEASED(ln) __tsan_release((ln)->tsan_key)
#define LC__LANE_ACQUIRED(ln) __tsan_acquire((ln)->tsan_key)
#else
#define LC__LANE_RELEASED(ln) ((void)(ln))
#define LC__LANE_ACQUIRED(ln) ((void)(ln))
#endif

/* D: a new lane in a sealed memfd, mapped; *fd is to be passed to P and
 * then closed. 0 or -errno. */
int lc__shm_lane_create(lc__shm_lane_t *ln, int *fd);
/* P: map the lane D passed: a memfd sealed against shrinking of at least
 * the lane's size, with D's magic and slot count. 0 or -errno. */
int lc__shm_lane_map(lc__shm_lane_t *ln, int fd);
void lc__shm_lane_unmap(lc__shm_lane_t *ln);

static inline uint8_t *lc__shm_lane_wslot(const lc__shm_lane_t *ln, uint64_t i)
{
	return ln->wslots + (size_t)(i % LC__SHM_LANE_SLOTS) * LC__SHM_LANE_WSLOT;
}

static inline uint8_t *lc__shm_lane_aslot(const lc__shm_lane_t *ln, uint64_t i)
{
	return ln->aslots + (size_t)(i % LC__SHM_LANE_SLOTS) * LC__SHM_LANE_ASLOT;
}

/* Publish a producer's index (records before it are written), then look
 * whether the consumer parked and (peer_polling, or NULL) nobody else of
 * it looks: true when it must be rung. The full fence pairs with the
 * consumer's park (lc__shm_lane_park). */
static inline bool lc__shm_lane_publish(const lc__shm_lane_t *ln, _Atomic uint64_t *idx,
					uint64_t v, _Atomic uint32_t *peer_parked,
					_Atomic uint32_t *peer_polling)
{
	LC__LANE_RELEASED(ln);
	atomic_store_explicit(idx, v, memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);
	return atomic_load_explicit(peer_parked, memory_order_relaxed) != 0 &&
	       (!peer_polling || atomic_load_explicit(peer_polling, memory_order_relaxed) == 0);
}

/* Set a flag the producer reads after publishing (a consumer parked, P
 * polling); the full fence pairs with the producer's
 * (lc__shm_lane_publish). */
static inline void lc__shm_lane_set(_Atomic uint32_t *flag, uint32_t v)
{
	atomic_store_explicit(flag, v, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
}

/* A consumer parks before it looks a last time and sleeps. */
static inline void lc__shm_lane_park(_Atomic uint32_t *parked)
{
	lc__shm_lane_set(parked, 1);
}

/* Awake again: the producer need not ring (a late look at the old value
 * costs one ring too many, never one too few). */
static inline void lc__shm_lane_unpark(_Atomic uint32_t *parked)
{
	atomic_store_explicit(parked, 0, memory_order_relaxed);
}

/* Records the producer published past `tail`: its head minus tail, or
 * UINT64_MAX when the head is not within `slots` of the tail (malformed). */
static inline uint64_t lc__shm_lane_avail(const lc__shm_lane_t *ln, _Atomic uint64_t *head,
					  uint64_t tail)
{
	uint64_t n = atomic_load_explicit(head, memory_order_acquire) - tail;
	LC__LANE_ACQUIRED(ln);
	return n <= LC__SHM_LANE_SLOTS ? n : UINT64_MAX;
}

/* A consumer publishes its tail: the slots before it may be reused. */
static inline void lc__shm_lane_release(const lc__shm_lane_t *ln, _Atomic uint64_t *tail,
					uint64_t v)
{
	LC__LANE_RELEASED(ln);
	atomic_store_explicit(tail, v, memory_order_release);
}

/* Records a producer at `head` has in the ring, from the tail its
 * consumer published, or UINT64_MAX when that tail is not within `slots`
 * behind the head (malformed). */
static inline uint64_t lc__shm_lane_used(const lc__shm_lane_t *ln, _Atomic uint64_t *tail,
					 uint64_t head)
{
	uint64_t n = head - atomic_load_explicit(tail, memory_order_acquire);
	LC__LANE_ACQUIRED(ln);
	return n <= LC__SHM_LANE_SLOTS ? n : UINT64_MAX;
}

#endif
