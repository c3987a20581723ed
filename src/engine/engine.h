/*
 * The transfer engine (DESIGN.md section 3): internal declarations shared
 * with the benchmarks and tests. The public API is in include/layercake.h;
 * the engine's own state is in engine_int.h, private to src/engine/.
 */
#ifndef LC_ENGINE_ENGINE_H
#define LC_ENGINE_ENGINE_H

#include "core/common.h"
#include "core/notify.h"

/* Called with the engine lock held once a posting pass has flushed its
 * connections, for each layer group it posted to every destination of a
 * task: ready_ns is when the step that made the group ready was recorded
 * (CPU producer) or first seen (outside producer); post_ns is when the
 * doorbells rang (every batch of the pass queued at its transport);
 * iteration numbers the engine thread's passes; inline_pass says
 * the pass ran on a recording thread (inline submission). Must not call
 * into the engine. For benchmarks and tests. */
typedef void (*lc__post_hook_fn)(void *arg, uint64_t room, uint32_t group, uint64_t ready_ns,
				 uint64_t post_ns, uint64_t iteration, bool inline_pass);
void lc__engine_set_post_hook(lc_engine_t *e, lc__post_hook_fn fn, void *arg);

/* Called after each run of callbacks (final_cb, landed_cb) the engine
 * delivers, on the thread that delivered them, with the engine lock
 * dropped: the callbacks' owner acts once on what they queued (prefill:
 * wake its control thread for "layers landed" updates the room's final
 * status, delivered in the same run, has not superseded). Must not call
 * into the engine. */
typedef void (*lc__notes_hook_fn)(void *arg);
void lc__engine_set_notes_hook(lc_engine_t *e, lc__notes_hook_fn fn, void *arg);

/* lc_engine_room_cancel on behalf of a peer: only a session that is one of
 * the room's destinations (a dummy one included) may cancel it. Returns
 * 0, -ENOENT (unknown room), -EPERM (session not a destination of the
 * room), LC_ERR_STATE (the room already ended). */
int lc__engine_room_cancel_from(lc_engine_t *e, uint64_t room, const char *session,
				const char *reason);

/* lc_engine_room_dst_add into a room that is open: -ENOENT (nothing
 * changed) when the engine has no room of that id, where the public call
 * would open one. P's control thread adds D's destinations so once its
 * sender opened the room: a room whose final status was read is gone, and
 * a late transfer info must not open a fresh one under the sender. A room
 * that has every destination it needs refuses one more with -EBUSY (the
 * public call's LC_ERR_STATE), one that ended with LC_ERR_STATE. */
int lc__engine_room_dst_join(lc_engine_t *e, uint64_t room, const lc_dst_params_t *p);

/* The decode prefix (tokens) of the room's first real destination: 0,
 * -EAGAIN when it has none yet, -ENOENT when the engine has no such room.
 * P's sender reads D's prefix here, so that only a transfer info the room
 * took sets it. */
int lc__engine_room_prefix(lc_engine_t *e, uint64_t room, uint64_t *tokens);

/* For each of n session names, whether an unfinished room has a
 * destination on it (live[i]; false for a name the engine does not know).
 * A P rank evicts only sessions that are not live. 0, -EINVAL, -ENOMEM. */
int lc__engine_sessions_live(lc_engine_t *e, const char *const *names, size_t n, bool *live);

/* Told of every status change of the engine's rooms (lc_prefill_wait). */
lc__notify_t *lc__engine_notify(lc_engine_t *e);

#endif
