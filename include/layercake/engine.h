/*
 * layercake/engine.h: the prefill-side engine and what it is made of:
 * layouts of KV buffers, step counters, room status and failure reasons,
 * histograms, heterogeneous tensor parallelism, sessions, rooms, batches
 * and metrics. Conventions: see layercake/base.h.
 */
#ifndef LAYERCAKE_ENGINE_H
#define LAYERCAKE_ENGINE_H

#include "layercake/dataplane.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Layouts: the table of P's KV buffers. Page i of buffer b lives at
 * base + i * item_len. A layer is the list of buffers whose `layer` equals
 * its global id. Buffers of kind LC_BUFFER_STATE hold per-request state
 * (mamba) addressed by slot instead of by page.
 * ---------------------------------------------------------------------- */

typedef enum lc_buffer_kind {
	LC_BUFFER_K = 0,      /* MHA keys */
	LC_BUFFER_V = 1,      /* MHA values */
	LC_BUFFER_LATENT = 2, /* MLA latent (compressed KV) */
	LC_BUFFER_QUANT = 3,  /* one of the per_token_head sub-buffers of MLA */
	LC_BUFFER_INDEX = 4,  /* DSA index keys */
	LC_BUFFER_STATE = 5,  /* per-request state (mamba), addressed by slot */
	LC_BUFFER_OTHER = 6,
} lc_buffer_kind_t;

enum lc_buffer_flags {
	LC_BUFFER_DRAFT = 1u << 0, /* belongs to a draft (MTP) layer */
};

typedef struct lc_buffer {
	void *base;        /* first byte; must lie in a region of the engine's ctx */
	uint64_t length;   /* bytes */
	uint64_t item_len; /* bytes per page (per slot for LC_BUFFER_STATE) */
	int32_t layer;     /* global layer id, >= 0 */
	uint32_t kind;     /* lc_buffer_kind_t */
	uint32_t flags;    /* enum lc_buffer_flags */
	/* Token-major pages ([page_size, heads, head_dim], SGLang's and vLLM's
	 * default): tokens per page, which must divide item_len; 0 or 1 means
	 * head-major (a rank's heads are one contiguous slice of the page).
	 * Only heterogeneous TP reads it (lc_tp_fragment's rows); not in the
	 * fingerprint. */
	uint32_t rows;
} lc_buffer_t;

typedef struct lc_layout lc_layout_t;

/* The general builder: a layout from any table of buffers (copied). Layers
 * are 0 .. max(layer); a layer may have no buffer (a layer without KV still
 * ticks the step counter). Errors: -EINVAL (NULL, n == 0, a negative layer,
 * item_len 0, length not a multiple of item_len, kind out of range),
 * -ENOMEM. Any thread. */
LC_API int lc_layout_create(const lc_buffer_t *buffers, size_t n, lc_layout_t **out);

typedef enum lc_layout_model {
	LC_LAYOUT_MHA = 0, /* K and V per layer: [K_0..K_{L-1}, V_0..V_{L-1}] */
	LC_LAYOUT_MLA = 1, /* one latent buffer per layer: [C_0..C_{L-1}] */
	/* MLA with per_token_head quantisation, three sub-buffers per layer:
	 * [Q0_0..Q0_{L-1}, Q1_0..Q1_{L-1}, Q2_0..Q2_{L-1}] */
	LC_LAYOUT_MLA_PER_TOKEN_HEAD = 2,
	LC_LAYOUT_DSA = 3, /* MLA plus an index buffer: [C_0..C_{L-1}, I_0..I_{L-1}] */
} lc_layout_model_t;

/* Parameters of the model builders. Buffer order is the pool's: the target
 * buffers as described by `model`, then the draft (MTP) buffers in the same
 * pattern over draft_layers, then the state buffers (component-major:
 * [c0 of every state layer, c1 ...]). Draft layers get the global ids after
 * every target KV and state layer id. */
typedef struct lc_layout_params {
	size_t size;           /* sizeof(lc_layout_params_t) */
	uint32_t model;        /* lc_layout_model_t */
	uint32_t layers;       /* target KV layers, >= 1 */
	uint32_t draft_layers; /* draft/MTP KV layers */
	uint32_t rows;         /* KV buffers' lc_buffer_t.rows: tokens per token-major
				* page, 0 = head-major (not for state buffers) */
	uint64_t pages;        /* pages per KV buffer (length = pages * item_len) */
	uint64_t item_len[3];  /* bytes per page of each per-layer component:
			       * MHA {K, V}, MLA {C}, per_token_head {Q0, Q1, Q2},
			       * DSA {C, I}; a zero V/Q1/Q2/I takes item_len[0] */
	void *const *bases;    /* one base per buffer in the order above, or NULL
			       * (all bases 0: a geometry-only layout) */
	/* Optional: global layer id of each target KV layer (hybrid models);
	 * NULL means 0..layers-1. */
	const int32_t *kv_layer_ids;
	/* Optional per-request state buffers (mamba): state_components buffers
	 * for each of the state_layers layers whose global ids are given. */
	uint32_t state_components;
	uint32_t state_layers;
	const int32_t *state_layer_ids;
	uint64_t state_slots;     /* slots per state buffer */
	uint64_t state_item_len;  /* bytes per slot */
	void *const *state_bases; /* state_components * state_layers, or NULL */
} lc_layout_params_t;

/* Build the layout of a standard pool. Errors as lc_layout_create, plus
 * -EINVAL for an unknown model or zero layers. Any thread. */
LC_API int lc_layout_build(const lc_layout_params_t *params, lc_layout_t **out);
/* NULL is a no-op. The layout must not be in use by a live engine. */
LC_API void lc_layout_destroy(lc_layout_t *layout);
/* Number of buffers, and a copy of buffer i (-ERANGE past the end). */
LC_API int lc_layout_buffer_count(const lc_layout_t *layout);
LC_API int lc_layout_buffer(const lc_layout_t *layout, int index, lc_buffer_t *out);
/* Number of layers (max global layer id + 1): the cache steps one batch
 * reserves. */
LC_API int lc_layout_layer_count(const lc_layout_t *layout);
/* Indices of the buffers of global layer `layer`, in buffer order, into
 * out[0..cap). Returns how many there are (may exceed cap; only cap are
 * written), -ERANGE for an unknown layer. */
LC_API int lc_layout_layer_buffers(const lc_layout_t *layout, int layer, uint32_t *out, size_t cap);
/* 64-bit fingerprint of the page geometry (per buffer: layer, kind, flags,
 * item_len; not base or length). P and D must have equal fingerprints. */
LC_API uint64_t lc_layout_fingerprint(const lc_layout_t *layout);

/* ------------------------------------------------------------------------
 * Step counters: the wraparound-safe comparison of two counters modulo
 * LC_STEP_MOD. Step t names the (t+1)-th record: it is ready once the
 * counter has moved strictly past t (by less than LC_STEP_MOD / 2).
 * ---------------------------------------------------------------------- */

#define LC_STEP_MOD (UINT64_C(1) << 62)

/* 1 if step `target` is ready given the counter value `current`, else 0. */
LC_API int lc_step_ready(uint64_t current, uint64_t target);

/* ------------------------------------------------------------------------
 * Room status (the seed's TransferPoll values) and failure reasons.
 * Updates are monotonic; Failed is sticky; Success and Failed are final.
 * New reasons are added at the end of the table, so no value moves; code
 * that reads them loops to LC_FAIL_REASON_COUNT (or lc_fail_reason_count())
 * rather than naming a last one.
 * ---------------------------------------------------------------------- */

typedef enum lc_room_status {
	LC_ROOM_FAILED = 0,
	LC_ROOM_BOOTSTRAPPING = 1,
	LC_ROOM_BOOTSTRAPPED = 2,
	LC_ROOM_WAITING_FOR_INPUT = 3,
	LC_ROOM_TRANSFERRING = 4,
	LC_ROOM_SUCCESS = 5,
} lc_room_status_t;

#define LC_FAIL_REASONS(X)                                                                         \
	X(LC_FAIL_NONE, 0, "none")                                                                 \
	X(LC_FAIL_TRANSFER, 1, "transfer")                                                         \
	X(LC_FAIL_SESSION_BLOCKED, 2, "session_blocked")                                           \
	X(LC_FAIL_LAYER_TIMEOUT, 3, "layer_timeout")                                               \
	X(LC_FAIL_TRANSFER_TIMEOUT, 4, "transfer_timeout")                                         \
	X(LC_FAIL_METADATA_TIMEOUT, 5, "metadata_timeout")                                         \
	X(LC_FAIL_BOOTSTRAP_TIMEOUT, 6, "bootstrap_timeout")                                       \
	X(LC_FAIL_WAITING_TIMEOUT, 7, "waiting_timeout")                                           \
	X(LC_FAIL_CANCELLED, 8, "cancelled")                                                       \
	X(LC_FAIL_SESSION_GONE, 9, "session_gone")                                                 \
	X(LC_FAIL_BAD_INPUT, 10, "bad_input")                                                      \
	X(LC_FAIL_STOPPED, 11, "engine_stopped")                                                   \
	X(LC_FAIL_NO_MEMORY, 12, "no_memory")

typedef enum lc_fail_reason {
#define LC__FAIL_ENUM(name, value, text) name = (value),
	LC_FAIL_REASONS(LC__FAIL_ENUM)
#undef LC__FAIL_ENUM
		LC_FAIL_REASON_COUNT
} lc_fail_reason_t;

/* "Failed", "Success", ... ; "Unknown" out of range. Static. */
LC_API const char *lc_room_status_name(int status);
/* Label text of a failure reason ("transfer", "layer_timeout"...); "unknown"
 * out of range. Static. */
LC_API const char *lc_fail_reason_name(int reason);
/* Symbolic name of a failure reason ("LC_FAIL_TRANSFER"); "LC_FAIL_UNKNOWN"
 * out of range. Static. */
LC_API const char *lc_fail_reason_symbol(int reason);
/* LC_FAIL_REASON_COUNT of the library actually loaded: the reasons are
 * 0 .. count-1 (bindings read it rather than hard-coding the table). */
LC_API int lc_fail_reason_count(void);

/* ------------------------------------------------------------------------
 * Histograms (metrics): four buckets per power of two; bucket i counts
 * values <= 2^(i/4) microseconds (and above the previous bound), the last
 * bucket counts everything above (Prometheus le="+Inf" is `count`).
 * ---------------------------------------------------------------------- */

#define LC_HIST_BUCKETS 96

typedef struct lc_histogram {
	uint64_t count;
	uint64_t sum_ns;
	uint64_t buckets[LC_HIST_BUCKETS]; /* not cumulative */
} lc_histogram_t;

/* Upper bound of bucket i in microseconds (2^(i/4)); HUGE_VAL for the last
 * and out of range. */
LC_API double lc_histogram_bucket_le_us(int index);
/* Approximate q-quantile (0 < q <= 1) in microseconds (bucket upper bound
 * interpolated); 0 for an empty histogram. */
LC_API double lc_histogram_quantile_us(const lc_histogram_t *h, double q);

/* ------------------------------------------------------------------------
 * Engine (P side): one thread that streams every room's layers to its
 * destinations as they become ready.
 *
 * Threading contract: every lc_engine_* call may come from any thread; the
 * batch calls (batch_begin, chunk_add, batch_end) belong to the one thread
 * that launches forwards (the scheduler) and must not interleave with each
 * other from several threads. lc_engine_record_cache/aux never wait for the
 * engine lock; what else they may wait for depends on inline_submit (see
 * them below): only with inline_submit=0 do they never block.
 * Callbacks run on the engine thread with no engine lock held; they may
 * call lc_engine_* functions except lc_engine_destroy, and should return
 * quickly (they delay every room's writes).
 * ---------------------------------------------------------------------- */

typedef struct lc_engine lc_engine_t;

/* The leading `layers` layers of every page of the room sent so far have
 * landed at `session` (acknowledged). Called when the number grows. */
typedef void (*lc_layers_landed_cb)(void *arg, uint64_t room, const char *session, uint32_t layers);

/* The final status of a room toward one destination session, reported
 * exactly once per (room, non-dummy destination) when the room ends:
 * LC_ROOM_SUCCESS with the room's metadata blob, or LC_ROOM_FAILED with a
 * reason (metadata NULL). lc_prefill_t turns it into a P->D status
 * message. The struct and every pointer in it are valid during the call
 * only; fields past `size` are absent (an older library). */
enum lc_room_final_flags {
	/* `checksum` holds the sum of every byte posted to this destination
	 * (knob room_checksum; docs/security.md). */
	LC_FINAL_HAS_CHECKSUM = 1u << 0,
};
typedef struct lc_room_final {
	size_t size; /* sizeof(lc_room_final_t) as the library knows it */
	uint64_t room;
	const char *session;     /* the destination's session name */
	int status;              /* LC_ROOM_SUCCESS or LC_ROOM_FAILED */
	int fail_reason;         /* lc_fail_reason_t; LC_FAIL_NONE on success */
	const char *reason_text; /* "" on success */
	const void *metadata;    /* success: the room's metadata (may be NULL) */
	size_t metadata_len;
	uint32_t flags; /* LC_FINAL_* */
	uint64_t checksum;
} lc_room_final_t;
typedef void (*lc_room_final_cb)(void *arg, const lc_room_final_t *final);

typedef struct lc_engine_params {
	size_t size;               /* sizeof(lc_engine_params_t) */
	const lc_layout_t *layout; /* copied; buffers must lie in regions of ctx */
	const char *name;          /* for log lines; copied; may be NULL */
	lc_room_final_cb final_cb; /* a room's final status per destination */
	void *final_arg;
	lc_layers_landed_cb landed_cb;
	void *landed_arg;
	/* An outside producer (a GPU via cuStreamWriteValue64) writes absolute
	 * step values into the counter words: the engine then polls them
	 * adaptively (spin poll_spin_us, then sleeps growing to poll_sleep_us)
	 * while a layer is awaited. 0: only lc_engine_record_* move them. */
	int external_counter;
	int reserved;
	/* Optional caller-owned counter words (8-byte aligned, e.g. host-mapped
	 * memory); NULL uses words the engine allocates (lc_engine_counter). */
	uint64_t *cache_word;
	uint64_t *aux_word;
} lc_engine_params_t;

/* Create an engine on ctx and start its thread. Reads the knobs
 * layerwise_interval, session_ttl_ms, layer_timeout_ms, metadata_timeout_ms,
 * transfer_timeout_ms, bootstrap_timeout_ms, waiting_timeout_ms,
 * poll_spin_us, poll_sleep_us and room_checksum from ctx. The layout has no
 * default: NULL params, or params->size not reaching `layout`, fail with
 * -EINVAL. Errors: -EINVAL (no layout, misaligned words), -ENOMEM, or a
 * thread/eventfd errno. */
LC_API int lc_engine_create(lc_ctx_t *ctx, const lc_engine_params_t *params, lc_engine_t **out);
/* Stop the thread; rooms not finished fail with LC_FAIL_STOPPED (status
 * callbacks run for them), sessions' connections are closed. Blocks until
 * the thread has joined. Not from a callback. NULL is a no-op. */
LC_API void lc_engine_destroy(lc_engine_t *engine);

/* --- step counters (producer side) --- */

enum lc_step_counter { LC_STEP_CACHE = 0, LC_STEP_AUX = 1 };

/* CPU producer: advance the cache counter by one (one layer of the current
 * forward written), or the aux counter by one (the batch's metadata
 * written), and wake the engine. Any thread. Every non-idle batch needs
 * exactly layer_count cache records and one aux record, in order.
 *
 * Every record is accounted for: a non-idle batch reserves its steps at
 * lc_engine_batch_end, and a record whose step no ended batch reserved
 * (one record too many, a forward without a batch, an idle batch's
 * forward) is refused: LC_ERR_STATE, the counter does not move (later
 * batches keep their steps), records_refused counts it and the engine
 * thread logs a warning naming the step, at most once a second. So an
 * engine that records on every forward, including forwards with no
 * disaggregated room, must open a non-idle batch (empty is fine) for each
 * of them; otherwise its extra records are refused, harmlessly, and each
 * is an error and a warning. Returns 0, LC_ERR_STATE (unreserved, or after
 * a stream record: see below), or -EINVAL for a NULL engine.
 *
 * What the calling thread may wait for depends on the context's knob
 * inline_submit (LAYERCAKE_INLINE_SUBMIT):
 * - inline_submit=1 (the default, inline submission): if the engine lock is
 *   free (pthread_mutex_trylock, never waits for it), the call runs the
 *   engine's posting pass on the caller's thread under the engine lock: it
 *   takes the data plane's connection and transport locks briefly (waiting
 *   if another thread holds one), may allocate (malloc), and may take in a
 *   batch handed over by lc_engine_batch_end. Its cost grows with the rooms
 *   and destinations the step made ready (about 0.4 us each). If the lock
 *   is held, it behaves as with 0.
 * - inline_submit=0, the never-blocking mode: a lock-free compare-and-swap
 *   on the counter word against the reservation bound (retried only if
 *   another recorder raced it), a clock read (vDSO), an atomic load, and,
 *   when the engine thread sleeps, one write(2) to its non-blocking
 *   eventfd (a refused record: two atomic updates and that write). No
 *   lock, no allocation, no other system call; all posting happens on the
 *   engine thread.
 * Use inline_submit=0 where the recording thread must never block (a
 * real-time or GPU-stream callback thread). */
LC_API int lc_engine_record_cache(lc_engine_t *engine);
LC_API int lc_engine_record_aux(lc_engine_t *engine);
/* Address of a counter word (enum lc_step_counter) for an outside producer
 * that writes absolute values modulo LC_STEP_MOD; valid for the engine's
 * life. The engine's own words sit alone in a page-aligned 4 KiB block,
 * ready for cuMemHostRegister. The producer too may only write values the
 * ended batches reserved: a word seen beyond its reservation fails every
 * room waiting for steps (LC_FAIL_BAD_INPUT, the reason gives the value
 * and the reservation), counts counter_overruns, and the next batch
 * reserves from the word's value. */
LC_API int lc_engine_counter(lc_engine_t *engine, int which, uint64_t **out);

/* GPU producer (docs/gpu.md, "The GPU step counter"): enqueue on the CUDA
 * stream `cu_stream` (a CUstream; NULL is the legacy default stream) one
 * cuStreamWriteValue64 of the counter's next absolute value into the
 * engine's counter word, so that the record happens when the stream's
 * earlier work (the layer's KV writes) has, with no kernel launch. Not for
 * replayed CUDA graphs: a captured write replays its captured value
 * (docs/gpu.md). The first such call registers the engine's
 * counter words with cuMemHostRegister (DEVICEMAP | PORTABLE) in the
 * stream's context (caller words: they must be host memory; memory CUDA
 * already registered is used as it is) and switches the engine thread to
 * adaptive polling of the words (poll_spin_us, poll_sleep_us), as with
 * external_counter.
 *
 * The values are counted by the library at enqueue time: the n-th call
 * writes (value of the word at the first call + n) mod LC_STEP_MOD. Hence:
 * - Every record of one engine goes on one stream, or on streams ordered
 *   with each other (events): a later value landing first would make
 *   steps ready before their layers are written.
 * - Once a stream has recorded, the CPU records of this engine return
 *   LC_ERR_STATE: a CPU +1 would be overwritten by the stream's next value.
 * - Batches as for CPU records: lc_engine_batch_end (on the host) before
 *   the forward's first record is enqueued, exactly layer_count cache
 *   records and one aux record per non-idle batch. A record beyond the
 *   reservation is refused at enqueue (LC_ERR_STATE, records_refused),
 *   as a CPU record is.
 * - The stream must not record into an engine being destroyed:
 *   lc_engine_destroy synchronises the registering context (waits for its
 *   queued work) before it unregisters and frees the words.
 * Thread: any, serialised by a mutex of the engine's own (never the engine
 * lock); it does not wait for the GPU. Returns 0, LC_ERR_STATE (a record
 * beyond the reservation, refused as above), LC_ENOTSUP (no CUDA:
 * lc_cuda_info says why), -EINVAL (NULL engine), or the error of the
 * failing CUDA call (logged, counted in cuda_errors). */
LC_API int lc_engine_record_cache_on_stream(lc_engine_t *engine, void *cu_stream);
LC_API int lc_engine_record_aux_on_stream(lc_engine_t *engine, void *cu_stream);

/* --- batches (the seed's add_batch(is_idle)) --- */

/* One chunk of a room produced by the current batch. */
typedef struct lc_chunk {
	size_t size; /* sizeof(lc_chunk_t) */
	uint64_t room;
	const int64_t *pages; /* P page ids of this chunk; copied */
	size_t page_count;
	/* Index of the chunk's first page in each destination's dst page list
	 * (the seed's index_slice.start; D's list already skips its prefix). */
	uint64_t dst_index;
	int is_last; /* the last chunk: carries state slots, awaits metadata */
	int reserved;
	const int64_t *state_slots; /* P state (mamba) slots, last chunk only */
	size_t state_slot_count;
	/* P-side partial cache ("MLA L1.5", src ON): this rank owns the pages
	 * where src_mask is 1; src_local are its physical pages for them.
	 * NULL = src OFF. Both of page_count / popcount entries; copied. */
	const uint8_t *src_mask;
	const int64_t *src_local;
	size_t src_local_count;
	/* 0: dst_index counts D's pages after D's prefix, as above. > 0: tokens
	 * per page, and dst_index counts the request's pages from its first
	 * token (token position / page_tokens), D's prefix not yet subtracted:
	 * what a chunk added before D's transfer info arrived must say (the
	 * room Bootstrapping, D's prefix unknown). Once a destination's info
	 * is in, the engine leaves out the chunk's pages below that
	 * destination's prefix (prefix_len / page_tokens pages: they are D's
	 * already) and places the rest at dst_index - prefix pages. A D prefix
	 * that is not a whole number of pages fails the room (bad input). */
	uint64_t page_tokens;
} lc_chunk_t;

/* Open a batch (one forward of P). Chunks added until lc_engine_batch_end
 * are stamped with the batch's first cache step and aux step. An idle batch
 * reserves nothing and accepts no chunk. LC_ERR_STATE if a batch is open. */
LC_API int lc_engine_batch_begin(lc_engine_t *engine, int is_idle);
/* Add a chunk. Inside a non-idle batch it waits for its layers' steps;
 * outside any batch (non-layer-wise use, after the forward) its layers are
 * ready at once. A room may take several chunks (is_last on the final one).
 *
 * A room still Bootstrapping (D's transfer info not in yet) takes chunks
 * too: P need not wait for D. The engine holds them, with the steps their
 * batch reserved; the forward records its layers as usual. When the room
 * becomes Bootstrapped, every layer already recorded goes out at once and
 * the later ones as they are recorded; if it fails first (its
 * bootstrap_timeout_ms, a cancel, a close) the held chunks are dropped. P's
 * pages must stay valid until the room ends, as for any chunk. Use
 * page_tokens for such a chunk when D may hold a prefix. Bounded: at most
 * p_room_held_chunks_max chunks per Bootstrapping room, and at most
 * p_held_pages_max page and state-slot entries in the held chunks of all
 * rooms; beyond either the chunk is refused with -ENOSPC (nothing held,
 * counted in chunks_refused_held, logged once per 1,024).
 *
 * Errors: LC_ERR_STATE (the open batch is idle; the room is already
 * final, or Failed meanwhile), -ENOSPC (the held caps above), -ENOENT
 * (unknown room), -EINVAL (bad pages or masks: a P page id, in pages or
 * src_local, outside [0, pages of the layout's smallest page buffer), a
 * state slot outside the smallest state buffer, fewer src_local entries
 * than src_mask marks; the log gives the id, its index in the chunk and
 * the pool size), -ENOMEM. Every error but a Failed room is also counted
 * in bad_input and logged. */
LC_API int lc_engine_chunk_add(lc_engine_t *engine, const lc_chunk_t *chunk);
/* Close the batch: a non-idle batch hands its chunks to the engine and
 * advances the reservation by (layer_count, 1) even when it had no chunk:
 * only then may its forward record. LC_ERR_STATE if no batch is open. Must
 * precede the forward's first record. */
LC_API int lc_engine_batch_end(lc_engine_t *engine);

/* --- heterogeneous tensor parallelism (spec 6.7) --- */

/* What one P rank sends of each page of one buffer to one D rank: bytes
 * [src_offset, src_offset + bytes) of each P page land at dst_offset of the
 * D page, D pages being dst_item_len bytes apart. With count > 1 (token-
 * major pages) that is count blocks of `bytes`: block i from
 * src_offset + i * src_stride of the P page to dst_offset + i * dst_stride
 * of the D page, moved as one strided write per page. */
typedef struct lc_fragment {
	uint32_t buffer;       /* P layout buffer index */
	uint32_t reserved;     /* zero */
	uint64_t src_offset;   /* bytes into each P page */
	uint64_t dst_offset;   /* bytes into each D page */
	uint64_t bytes;        /* bytes per block, > 0 */
	uint64_t dst_item_len; /* D's bytes per page of this buffer */
	uint32_t count;        /* blocks per page; 0 or 1: one block */
	uint32_t reserved2;    /* zero */
	uint64_t src_stride;   /* bytes between blocks in the P page */
	uint64_t dst_stride;   /* bytes between blocks in the D page */
} lc_fragment_t;

/* One side's view of one buffer: its TP size, this rank, bytes per page,
 * bytes per unit (a KV head's slice of one token row of a page; unit_len ==
 * item_len / rows for a buffer every rank holds whole, such as an MLA
 * latent), and rows: tokens per page of a token-major page
 * ([page_size, heads, head_dim], item_len = rows * units * unit_len);
 * 0 or 1 is a head-major page (a rank's heads are one contiguous slice). */
typedef struct lc_tp_side {
	int tp_size;
	int tp_rank;
	uint64_t item_len;
	uint64_t unit_len;
	uint32_t rows;
	uint32_t reserved; /* zero */
} lc_tp_side_t;

/* The fragment P rank p->tp_rank sends to D rank d->tp_rank. A side with T
 * ranks of L = item_len / rows / unit_len units each holds G = L * T units; with
 * H = min(Gp, Gd) distinct units, each side's ranks form replica groups
 * of G / H ranks holding the same L units (GQA with more ranks than KV
 * heads; a whole-page buffer at unequal TP). Rank r holds distinct units
 * [(r / rep) * L, (r / rep + 1) * L); the first rank of each P replica group
 * sends the units it shares with D rank d. Equal geometry gives rank p ->
 * rank p, whole pages; an MLA latent at P TP 2, D TP 1 gives rank 0 -> 0
 * and nothing from rank 1 (a dummy); at P TP 1, D TP 2, rank 0 -> both.
 * Token-major pages (rows > 1 on both sides, equal) repeat that per token
 * row: count = rows blocks, src_stride / dst_stride the P / D row lengths
 * (one block when the shared units are whole rows on both sides).
 * Returns 1 and fills out's offsets, bytes, dst_item_len, count and
 * strides (buffer left as it was), 0 if p sends d nothing of this buffer,
 * LC_ERR_GEOMETRY if the two sides cannot be paired (unit lengths or rows
 * differ, a unit count that does not divide, a block leaving its page),
 * -EINVAL for bad arguments. Pure; any thread. A D rank's P
 * ranks are those with a fragment for it, and a P rank's required
 * destination count those D ranks with a fragment from it. */
LC_API int lc_tp_fragment(const lc_tp_side_t *p, const lc_tp_side_t *d, lc_fragment_t *out);

/* --- sessions (one per D rank) --- */

typedef struct lc_session_params {
	size_t size;      /* sizeof(lc_session_params_t) */
	const char *name; /* D's session id, e.g. "10.0.0.2:7001"; copied */
	const char *url;  /* D's data-plane listener, e.g. "tcp://10.0.0.2:7002" */
	lc_token_t token; /* presented to D */
	int has_token;
	int reserved;
	/* D's packed region descriptors (lc_region_pack) */
	const void *const *region_descs;
	const size_t *region_desc_lens;
	size_t region_count;
	/* Per layout buffer: which descriptor holds it and at what byte offset
	 * D's page 0 (slot 0) of it starts. NULL buffer_region means buffer i
	 * is descriptor i at offset 0 (region_count == buffer count). */
	const uint32_t *buffer_region;
	const uint64_t *buffer_offset; /* NULL = all 0 */
	/* Heterogeneous TP: with fragment_count > 0 only the buffers named
	 * here go to this session, each as its fragment's byte range of every
	 * page (one fragment per buffer, from lc_tp_fragment); NULL/0 means
	 * whole pages of every buffer (equal geometry). Copied. */
	const lc_fragment_t *fragments;
	size_t fragment_count;
} lc_session_params_t;

/* Register (or register again) a D session: connect to its listener (in the
 * background) and import its regions. Registering an existing name clears
 * its failure state (TTL) and replaces its connection; rooms in flight on
 * the old connection fail with LC_FAIL_SESSION_GONE. Errors: -EINVAL,
 * LC_ERR_GEOMETRY (a fragment outside its P or D page, or a buffer named
 * twice), -ENOMEM, or the error of lc_conn_create / lc_conn_import_region. */
LC_API int lc_engine_session_add(lc_engine_t *engine, const lc_session_params_t *params);
/* Forget a session; its unfinished rooms fail (LC_FAIL_SESSION_GONE).
 * -ENOENT if unknown. */
LC_API int lc_engine_session_remove(lc_engine_t *engine, const char *name);
/* 1 if the session is blocked by a recent failure (within session_ttl_ms),
 * 0 if healthy, -ENOENT if unknown. Sets *failures to its failure count. */
LC_API int lc_engine_session_blocked(lc_engine_t *engine, const char *name, uint64_t *failures);

/* --- rooms --- */

/* Open a room (the sender of a request exists): status Bootstrapping.
 * -EEXIST if the room is known (a finished room stays known until its final
 * status was read or it was released; then the id starts fresh). */
LC_API int lc_engine_room_open(lc_engine_t *engine, uint64_t room);

/* D's transfer info for one destination session of a room. */
typedef struct lc_dst_params {
	size_t size;          /* sizeof(lc_dst_params_t) */
	const char *session;  /* a registered session name (not needed if dummy) */
	const int64_t *pages; /* D page ids after D's prefix; copied */
	size_t page_count;
	uint64_t prefix_len;         /* D's decode prefix length in tokens (info) */
	int64_t aux_index;           /* D's request slot (info, echoed nowhere) */
	uint32_t required_dst_count; /* required_dst_info_num, >= 1 */
	int is_dummy;                /* a dummy destination: no writes, no status */
	const int64_t *state_slots;  /* D state slots; copied */
	size_t state_slot_count;
	/* D-side partial cache (dst ON): mask over the page list, and local
	 * page ids for the masked positions. NULL = dst OFF. */
	const uint8_t *dst_mask;
	const int64_t *dst_local;
	size_t dst_local_count;
} lc_dst_params_t;

/* Add a destination to a room (opening it if unknown, as the seed's
 * monotonic status allows). When required_dst_count distinct sessions have
 * been added the room is Bootstrapped, and the chunks it held meanwhile go
 * out (their recorded layers at once; lc_engine_chunk_add). A destination whose session is
 * blocked fails the room at once (LC_FAIL_SESSION_BLOCKED). Errors:
 * -EINVAL, -ENOENT (unknown session), -EEXIST (session already added),
 * LC_ERR_STATE (room final, or more destinations than required). */
LC_API int lc_engine_room_dst_add(lc_engine_t *engine, uint64_t room, const lc_dst_params_t *dst);
/* Publish the room's metadata (first token, draft ids...; copied, at most
 * LC_METADATA_MAX bytes), delivered with Success. Once per room: -EEXIST
 * after the first; -EMSGSIZE if too long; -ENOENT unknown room. */
#define LC_METADATA_MAX 4096
LC_API int lc_engine_room_metadata_set(lc_engine_t *engine, uint64_t room, const void *data,
				       size_t len);
/* Cancel a room: stop submitting, cancel its posted batches, drop the
 * chunks it holds (a room still Bootstrapping), fail it with
 * LC_FAIL_CANCELLED (every destination notified once). Returns 0, -ENOENT
 * if unknown, LC_ERR_STATE if it already ended. */
LC_API int lc_engine_room_cancel(lc_engine_t *engine, uint64_t room, const char *reason);

typedef struct lc_room_info {
	size_t size;     /* sizeof(lc_room_info_t) */
	int status;      /* lc_room_status_t */
	int fail_reason; /* lc_fail_reason_t */
	char reason[LC_REASON_MAX];
	uint32_t dst_count; /* destinations added */
	uint32_t required_dst_count;
	uint32_t layers_landed; /* leading layers landed at every destination */
	uint32_t reserved;
} lc_room_info_t;

/* Read a room's status. Reading a final status (Success or Failed)
 * reports it: the room is removed (its destinations' status callbacks are
 * already queued) and its id may start fresh. A finished room nobody reads
 * is dropped after waiting_timeout_ms. -ENOENT for an unknown room. */
LC_API int lc_engine_room_status(lc_engine_t *engine, uint64_t room, lc_room_info_t *out);
/* Forget a room without reading it; an unfinished room is cancelled first.
 * -ENOENT if unknown. */
LC_API int lc_engine_room_close(lc_engine_t *engine, uint64_t room);

/* --- metrics --- */

typedef struct lc_engine_metrics {
	size_t size; /* sizeof(lc_engine_metrics_t), set by the caller */
	uint64_t rooms_opened;
	uint64_t rooms_succeeded;
	uint64_t rooms_failed;         /* by reason: lc_engine_failed_by_reason */
	uint64_t rooms_expired_unread; /* finished, never read, dropped */
	uint64_t rooms_active;         /* gauge */
	uint64_t chunks_added;
	uint64_t batches_posted; /* lc_batch_post calls */
	uint64_t batches_failed;
	uint64_t writes_posted; /* descriptors */
	uint64_t bytes_posted;
	uint64_t bytes_acked;
	uint64_t bad_input; /* calls refused for bad arguments */
	uint64_t session_failures;
	uint64_t tasks_pending;     /* gauge: queue depth (waiting for steps) */
	uint64_t tasks_inflight;    /* gauge: posted, awaiting acknowledgement */
	uint64_t tasks_pending_max; /* highest queue depth seen */
	uint64_t loop_iterations;
	lc_histogram_t room_latency;      /* open -> final */
	lc_histogram_t group_ack_latency; /* layer group posted -> acknowledged */
	lc_histogram_t step_to_post;      /* step recorded (or first seen) -> posted */
	uint64_t inline_submits;          /* step records that posted on the recording thread */
	/* CPU or stream step records refused: no ended batch reserved their
	 * step (LC_ERR_STATE; the counter did not move) */
	uint64_t records_refused;
	/* times an outside producer's word was seen beyond its reservation
	 * (the rooms awaiting steps failed) */
	uint64_t counter_overruns;
	/* gauges: chunks added to rooms still Bootstrapping, held until D's
	 * transfer info arrives, and their page and state-slot entries */
	uint64_t chunks_held;
	uint64_t pages_held;
	uint64_t chunks_refused_held; /* -ENOSPC: past a held cap */
} lc_engine_metrics_t;

/* Copy a consistent snapshot of the metrics (fields up to out->size). New
 * fields are added at the end only; per-reason counts are not in the struct
 * (a new reason would move every later field) but behind the call below. */
LC_API int lc_engine_metrics(lc_engine_t *engine, lc_engine_metrics_t *out);
/* Rooms that failed with `reason` (lc_fail_reason_t) since the engine was
 * created, into *out (0 for LC_FAIL_NONE). -ERANGE for a reason outside
 * 0 .. lc_fail_reason_count()-1, -EINVAL for NULL arguments. Each call is
 * its own snapshot, taken under the lock lc_engine_metrics takes. */
LC_API int lc_engine_failed_by_reason(lc_engine_t *engine, int reason, uint64_t *out);

#ifdef __cplusplus
}
#endif

#endif /* LAYERCAKE_ENGINE_H */
