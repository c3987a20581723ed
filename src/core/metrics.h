/*
 * Counters of a context: one X-macro, atomically incremented from any
 * thread, read through lc_ctx_counter*(). Histograms live in histogram.h.
 */
#ifndef LC_CORE_METRICS_H
#define LC_CORE_METRICS_H

#define LC__COUNTERS(X)                                                                            \
	X(batches_posted)                                                                          \
	X(batches_done)                                                                            \
	X(batches_failed)                                                                          \
	X(batches_expired)                                                                         \
	X(batches_cancelled)                                                                       \
	X(writes_posted)                                                                           \
	X(bytes_posted)                                                                            \
	X(writes_applied)                                                                          \
	X(bytes_applied)                                                                           \
	X(writes_rejected_region)                                                                  \
	X(writes_rejected_range)                                                                   \
	X(writes_rejected_grant)                                                                   \
	X(writes_rejected_token)                                                                   \
	X(bytes_landed_twice)                                                                      \
	X(rooms_short_landed)                                                                      \
	X(rooms_checksum_failed)                                                                   \
	X(grant_intervals_capped)                                                                  \
	X(grants_added)                                                                            \
	X(grants_revoked)                                                                          \
	X(grants_refused_range)                                                                    \
	X(conns_opened)                                                                            \
	X(conns_failed)                                                                            \
	X(conns_rejected_auth)                                                                     \
	X(conns_refused_sw_rma)                                                                    \
	X(frames_malformed)                                                                        \
	X(random_failures)                                                                         \
	X(lanes_stalled)                                                                           \
	X(conns_evicted_pending)                                                                   \
	X(lanes_idled_out)                                                                         \
	X(lanes_evicted)                                                                           \
	X(lanes_refused_cap)                                                                       \
	X(sessions_evicted)                                                                        \
	X(sessions_refused_full)                                                                   \
	X(rooms_refused_cap)                                                                       \
	X(rooms_refused_session_quota)                                                             \
	X(infos_refused_unknown)                                                                   \
	X(infos_refused_descs)                                                                     \
	X(infos_refused_unregistered)                                                              \
	X(infos_parked)                                                                            \
	X(infos_refused_park_full)                                                                 \
	X(infos_refused_no_room)                                                                   \
	X(infos_refused_pair)                                                                      \
	X(infos_refused_claimed)                                                                   \
	X(infos_refused_ended)                                                                     \
	X(infos_cancelled_parked)                                                                  \
	X(replies_refused_scheme)                                                                  \
	X(replies_dropped)                                                                         \
	X(conns_refused_threads)                                                                   \
	X(cuda_errors)                                                                             \
	X(regions_rejected_kind)                                                                   \
	X(device_copies)                                                                           \
	X(device_copy_bytes)                                                                       \
	X(device_copy_errors)                                                                      \
	X(staging_bytes)                                                                           \
	X(staging_waits)                                                                           \
	X(staging_overflows)                                                                       \
	X(ipc_exports)                                                                             \
	X(ipc_imports)                                                                             \
	X(ipc_writes)                                                                              \
	X(ipc_bytes)                                                                               \
	X(ipc_rejected)                                                                            \
	X(sends_inline)                                                                            \
	X(lane_writes)                                                                             \
	X(lane_rings)

enum lc__counter {
#define LC__CNT_ENUM(name) LC__CNT_##name,
	LC__COUNTERS(LC__CNT_ENUM)
#undef LC__CNT_ENUM
		LC__CNT_COUNT
};

#define LC__COUNT_ADD(ctx, name, n)                                                                \
	atomic_fetch_add_explicit(&(ctx)->counters[LC__CNT_##name], (uint64_t)(n),                 \
				  memory_order_relaxed)
#define LC__COUNT(ctx, name) LC__COUNT_ADD(ctx, name, 1)

#endif
