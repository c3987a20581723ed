/*
 * Staging of device-kind sources (P side, docs/gpu.md): a batch whose
 * writes read device memory (sim, CUDA) is not handed to its transport at
 * post. Its device sources are first copied, by the region's copy engine,
 * into the context's host staging ring (staging_ring_mib, registered as a
 * region of the context at first use, memfd-backed so that shm can map it),
 * the writes are pointed at the staged bytes, and only then does the
 * transport see the batch; the ring space is freed when the batch is. So a
 * transport reads every source directly, and the copies of one batch
 * overlap the wire transfer of the batches before it.
 *
 * Back-pressure: a batch that finds no room in the ring waits (FIFO,
 * staging_waits) until earlier batches free theirs; a batch larger than
 * the whole ring stages through a one-off buffer (staging_overflows), so
 * that it completes rather than waiting forever.
 *
 * Threading: the ring and its wait list are guarded by the stage's lock
 * (a leaf: no call out is made with it held). Copies complete on the copy
 * engine's thread, which posts the batch to its transport.
 */
#ifndef LC_TRANSPORT_STAGE_H
#define LC_TRANSPORT_STAGE_H

#include "core/copier.h"
#include "transport/transport.h"

/* Make the context's ring now (at the first device-kind registration), so
 * that no post pays for it: 0 or the error. */
int lc__stage_ready(lc_ctx_t *ctx);
/* Stage b, then post it to c's transport (or fail it). 0: taken (a
 * completion follows); negative: not taken. */
int lc__stage_post(lc_conn_t *c, lc__batch_t *b);
/* c is closing: forget its waiting batches and wait for its copies. */
void lc__stage_conn_close(lc_conn_t *c);
/* Free the ring (every connection of the context is gone). */
void lc__stage_fini(lc_ctx_t *ctx);

#endif
