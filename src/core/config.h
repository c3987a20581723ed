/*
 * The configuration table: every knob in one place, and the only reader of
 * the environment. X(field, env, default, min, max, help). A context copies
 * the defaults, then the environment, at creation; lc_ctx_config_set()
 * overrides values afterwards.
 *
 * String knobs (LC__CONFIG_STR_TABLE, X(field, env, default, help)) are
 * process-wide, not per context: they are read from the environment each
 * time they are used (a secret folder is consulted when a key is loaded,
 * with no context at hand).
 */
#ifndef LC_CORE_CONFIG_H
#define LC_CORE_CONFIG_H

#include <stdint.h>

#define LC__CONFIG_TABLE(X)                                                                        \
	X(tcp_lanes, "LAYERCAKE_TCP_LANES", 4, 1, 64, "parallel TCP connections per peer (lanes)") \
	X(io_threads, "LAYERCAKE_IO_THREADS", 2, 1, 64,                                            \
	  "event-loop threads per context that run the tcp, shm and ucx transports")               \
	X(io_spin_us, "LAYERCAKE_IO_SPIN_US", 100, 0, 100000,                                      \
	  "adaptive polling of an I/O loop whose recent waits mostly ended within this budget: "  \
	  "poll this long, yielding the core between looks, before sleeping on epoll (0: never "  \
	  "spin; an idle loop, or one whose events come further apart, never spins)")             \
	X(cq_spin_us, "LAYERCAKE_CQ_SPIN_US", 50, 0, 100000,                                       \
	  "lc_cq_wait with completions due (batches in flight) and none queued: poll this long, "  \
	  "yielding the core, before sleeping on the eventfd (0: sleep at once; nothing in "       \
	  "flight never spins)")                                                                   \
	X(land_stream_min_kib, "LAYERCAKE_LAND_STREAM_MIN_KIB", 64, 0, 1048576,                    \
	  "a write landing in host memory of at least this many KiB is copied with non-temporal "  \
	  "stores (core/stream.h: faster into memory larger than the cache, and it keeps the "    \
	  "cache for the caller); smaller ones with memcpy (0: always memcpy)")                    \
	X(loop_conn_threads_max, "LAYERCAKE_LOOP_CONN_THREADS_MAX", 8, 1, 1024,                    \
	  "threads a context may start for loop:// connections (a test transport that runs one "   \
	  "per connection; every other transport shares the I/O core); past it a loop:// "         \
	  "connection is refused (conns_refused_threads)")                                         \
	X(shm_copy_threads, "LAYERCAKE_SHM_COPY_THREADS", 1, 1, 2,                                 \
	  "threads that copy each large shm write at the receiver: 1, the I/O loop alone; 2 adds " \
	  "a helper thread per listener for the second half of writes of 1 MiB or more")           \
	X(shm_lane, "LAYERCAKE_SHM_LANE", 1, 0, 1,                                                 \
	  "1: an shm connection's small plain batches and their acknowledgements go through a "   \
	  "shared-memory ring beside the socket, rung only while the peer's loop sleeps; 0: "     \
	  "every message over the socket (read by P when it connects, by D at each handshake)")  \
	X(connect_timeout_ms, "LAYERCAKE_CONNECT_TIMEOUT_MS", 5000, 1, 3600000,                    \
	  "deadline for connecting and handshaking with a peer")                                   \
	X(progress_timeout_ms, "LAYERCAKE_PROGRESS_TIMEOUT_MS", 10000, 1, 3600000,                 \
	  "a lane with work and no progress for this long fails its batches (stalled)")            \
	X(batch_timeout_ms, "LAYERCAKE_BATCH_TIMEOUT_MS", 30000, 1, 86400000,                      \
	  "default deadline of a posted batch")                                                    \
	X(require_token, "LAYERCAKE_REQUIRE_TOKEN", 1, 0, 1,                                       \
	  "listeners accept only connections presenting a token they issued")                      \
	X(socket_buffer_kib, "LAYERCAKE_SOCKET_BUFFER_KIB", 0, 0, 1048576,                         \
	  "SO_SNDBUF/SO_RCVBUF of data sockets in KiB (0 = kernel autotuning)")                    \
	X(ucx_data, "LAYERCAKE_UCX_DATA", 0, 0, 1,                                                 \
	  "ucx data mode of the context, fixed when its UCX starts: 0 or am = active messages "    \
	  "that D receives into the checked destination (no RMA enabled, no keys published); "     \
	  "1 or put = one-sided puts, only where UCX reports hardware RMA (RDMA NICs)")            \
	X(ucx_allow_sw_rma, "LAYERCAKE_UCX_ALLOW_SW_RMA", 0, 0, 1,                                 \
	  "ucx put mode: 1 lets D and P use RMA that UCX emulates in software (tcp, shared "       \
	  "memory), which exposes D's memory to any connected peer; tests and benchmarks only")    \
	X(ucx_err_mode, "LAYERCAKE_UCX_ERR_MODE", 0, 0, 1,                                         \
	  "ucx endpoints' error handling: 0 or peer = UCP_ERR_HANDLING_MODE_PEER (UCX 1.13 then "  \
	  "leaves out shared memory); 1 or none = none (lets posix/sysv shared memory in)")        \
	X(layerwise_interval, "LAYERCAKE_LAYERWISE_INTERVAL", 1, -1, 4096,                         \
	  "layers per submission; <= 0 sends everything after the forward")                        \
	X(session_ttl_ms, "LAYERCAKE_SESSION_TTL_MS", 30000, 0, 86400000,                          \
	  "a failed session is blocked this long (0 disables blocking)")                           \
	X(layer_timeout_ms, "LAYERCAKE_LAYER_TIMEOUT_MS", 60000, 1, 86400000,                      \
	  "deadline for a layer's step to become ready after its batch was added")                 \
	X(metadata_timeout_ms, "LAYERCAKE_METADATA_TIMEOUT_MS", 30000, 1, 86400000,                \
	  "deadline for a room's metadata after its last layer was ready")                         \
	X(transfer_timeout_ms, "LAYERCAKE_TRANSFER_TIMEOUT_MS", 60000, 1, 86400000,                \
	  "deadline for a posted layer group to be acknowledged by D")                             \
	X(bootstrap_timeout_ms, "LAYERCAKE_BOOTSTRAP_TIMEOUT_MS", 120000, 1, 86400000,             \
	  "deadline for a room to become Bootstrapped")                                            \
	X(waiting_timeout_ms, "LAYERCAKE_WAITING_TIMEOUT_MS", 300000, 1, 86400000,                 \
	  "deadline for a Bootstrapped room to reach Success or Failed")                           \
	X(landed_wait_ms, "LAYERCAKE_LANDED_WAIT_MS", 1000, 0, 600000,                             \
	  "D: once every P rank said Success, how long to wait for the room's granted bytes to "   \
	  "land (a late write on another lane) before failing the room")                           \
	X(room_checksum, "LAYERCAKE_ROOM_CHECKSUM", 0, 0, 1,                                       \
	  "1: P sums every byte it posts (host memory) and D checks the sum over its granted "     \
	  "ranges before Success (docs/security.md, room checksum)")                               \
	X(grant_intervals_max, "LAYERCAKE_GRANT_INTERVALS_MAX", 65536, 1, 16777216,                \
	  "D: covered intervals a room's accounting keeps beyond one per granted range (writes "   \
	  "landed out of order leave gaps); past it the room fails (grant_intervals_capped)")      \
	X(heartbeat_interval_ms, "LAYERCAKE_HEARTBEAT_INTERVAL_MS", 5000, 100, 3600000,            \
	  "D's ZMTP heartbeat (PING) interval on its control channel to each P rank; the "         \
	  "bootstrap server is not probed")                                                        \
	X(heartbeat_misses, "LAYERCAKE_HEARTBEAT_MISSES", 2, 1, 1000,                              \
	  "intervals without an answer after which a P rank's channel is dropped, and "            \
	  "consecutive intervals with it down after which D fails that P's rooms")                 \
	X(poll_spin_us, "LAYERCAKE_POLL_SPIN_US", 50, 0, 1000000,                                  \
	  "adaptive polling of a GPU-written step counter: spin this long before sleeping")        \
	X(poll_sleep_us, "LAYERCAKE_POLL_SLEEP_US", 20, 1, 1000000,                                \
	  "adaptive polling: longest sleep between reads after spinning")                          \
	X(ack_coalesce_us, "LAYERCAKE_ACK_COALESCE_US", 50, 0, 100000,                             \
	  "engine woken by acknowledgements alone waits this long for the rest of the burst "      \
	  "(0: none)")                                                                             \
	X(inline_submit, "LAYERCAKE_INLINE_SUBMIT", 1, 0, 1,                                       \
	  "a CPU step record posts ready layer groups on the recording thread when the engine "    \
	  "thread is idle (1), or only wakes the engine thread (0)")                               \
	X(bootstrap_port, "LAYERCAKE_BOOTSTRAP_PORT", 8998, 0, 65535,                              \
	  "port of P's bootstrap HTTP server")                                                     \
	X(route_ttl_ms, "LAYERCAKE_ROUTE_TTL_MS", 6000, 100, 86400000,                             \
	  "life of a P rank's route at the bootstrap server without a refresh (P refreshes every " \
	  "third of it); until then only its owner (or the bootstrap secret with takeover) may "   \
	  "replace it (routes_conflict); a P whose rank is taken waits that long (+2 s) at "       \
	  "create for the route to lapse, then fails")                                             \
	X(bootstrap_conns_per_addr, "LAYERCAKE_BOOTSTRAP_CONNS_PER_ADDR", 16, 1, 256,              \
	  "connections one source address may hold open at the bootstrap server; past it new "     \
	  "ones are refused at accept (conns_refused_addr)")                                       \
	X(bootstrap_request_ms, "LAYERCAKE_BOOTSTRAP_REQUEST_MS", 5000, 100, 600000,               \
	  "absolute deadline of one bootstrap connection, however slowly it trickles; past it "    \
	  "the server closes it (conns_deadline)")                                                 \
	X(inbox_conns_max, "LAYERCAKE_INBOX_CONNS_MAX", 128, 1, 65536,                             \
	  "TCP connections one ZeroMQ inbox (P's or D's) holds, at most a quarter of "             \
	  "RLIMIT_NOFILE; past it a new one is closed at once (inbox_conns_refused)")              \
	X(inbox_conns_per_addr, "LAYERCAKE_INBOX_CONNS_PER_ADDR", 64, 1, 65536,                    \
	  "TCP connections one source address may hold at a ZeroMQ inbox; past it a new one is "   \
	  "closed at once (inbox_conns_refused)")                                                  \
	X(inbox_handshake_ms, "LAYERCAKE_INBOX_HANDSHAKE_MS", 3000, 100, 600000,                   \
	  "a connection to a ZeroMQ inbox that has not finished its ZMTP handshake by then is "    \
	  "dropped (ZMQ_HANDSHAKE_IVL)")                                                           \
	X(tcp_pending_max, "LAYERCAKE_TCP_PENDING_MAX", 256, 1, 1024,                              \
	  "connections a tcp listener holds before their handshake; past it the oldest such "      \
	  "connection is closed (conns_evicted_pending)")                                          \
	X(tcp_pending_per_addr, "LAYERCAKE_TCP_PENDING_PER_ADDR", 64, 1, 1024,                     \
	  "connections from one source address a tcp listener holds before their handshake; "      \
	  "past it that address's oldest is closed (conns_evicted_pending)")                       \
	X(tcp_lane_idle_ms, "LAYERCAKE_TCP_LANE_IDLE_MS", 120000, 0, 86400000,                     \
	  "an authenticated tcp lane with no granted write in flight that received nothing for "   \
	  "this long is closed (lanes_idled_out; the sender reconnects on its next write); 0: "    \
	  "never")                                                                                 \
	X(tcp_lanes_per_addr, "LAYERCAKE_TCP_LANES_PER_ADDR", 128, 1, 1024,                        \
	  "authenticated lanes a tcp listener holds from one source address; past it that "        \
	  "address's least recently active lane with no granted write in flight, quiet for 1 s, "  \
	  "is closed (lanes_evicted), else the newcomer is refused (lanes_refused_cap)")           \
	X(tcp_lanes_max, "LAYERCAKE_TCP_LANES_MAX", 768, 1, 1024,                                  \
	  "authenticated lanes a tcp listener holds in all (with tcp_pending_max at most 1,024 "   \
	  "connections); past it as tcp_lanes_per_addr, over every address")                       \
	X(shm_pending_max, "LAYERCAKE_SHM_PENDING_MAX", 64, 1, 1024,                               \
	  "connections an shm listener holds before their handshake; past it the oldest such "     \
	  "connection is closed (conns_evicted_pending)")                                          \
	X(d_peers_max, "LAYERCAKE_D_PEERS_MAX", 256, 1, 4096,                                      \
	  "bootstrap addresses (P instances) a D remembers with what it learned there (routes, "   \
	  "pins); when full, one no receiver names is forgotten for a new address, never-"         \
	  "resolved ones first, then the least recently used (peers_evicted), else the receiver "  \
	  "is refused (-ENOSPC)")                                                                  \
	X(p_sessions_max, "LAYERCAKE_P_SESSIONS_MAX", 256, 1, 4096,                                \
	  "D sessions a P rank holds; when full, sessions that are neither live nor recent "       \
	  "(p_session_grace_ms, p_session_keep_ms) are evicted, unproven ones first "              \
	  "(sessions_evicted), else the newcomer is refused (sessions_refused_full)")              \
	X(p_session_grace_ms, "LAYERCAKE_P_SESSION_GRACE_MS", 10000, 0, 86400000,                  \
	  "a D session none of whose rooms has succeeded yet is not evicted for a newcomer "       \
	  "within this long of its last REGISTER or TRANSFER_INFO")                                \
	X(p_session_keep_ms, "LAYERCAKE_P_SESSION_KEEP_MS", 600000, 0, 86400000,                   \
	  "a D session with a room that succeeded is not evicted for a newcomer within this "      \
	  "long of its last REGISTER or TRANSFER_INFO")                                            \
	X(p_rooms_max, "LAYERCAKE_P_ROOMS_MAX", 65536, 1, 16777216,                                \
	  "rooms a P rank's engine holds; a transfer info that would open one more is refused "    \
	  "before allocation (rooms_refused_cap)")                                                 \
	X(p_session_rooms_max, "LAYERCAKE_P_SESSION_ROOMS_MAX", 4096, 1, 16777216,                 \
	  "unfinished rooms one D session may be a destination of at a P rank (dummies "           \
	  "included); past it its transfer infos are refused (rooms_refused_session_quota)")       \
	X(p_session_descs_max, "LAYERCAKE_P_SESSION_DESCS_MAX", 4194304, 1, 4294967296ll,          \
	  "transfer-info descriptors (pages, state slots; 8 bytes each) the unfinished rooms of "  \
	  "one D session may hold at a P rank; past it its transfer infos are refused "            \
	  "(infos_refused_descs)")                                                                 \
	X(p_descs_max, "LAYERCAKE_P_DESCS_MAX", 16777216, 1, 4294967296ll,                         \
	  "transfer-info descriptors all unfinished rooms of a P rank may hold; past it transfer " \
	  "infos are refused (infos_refused_descs)")                                               \
	X(p_room_held_chunks_max, "LAYERCAKE_P_ROOM_HELD_CHUNKS_MAX", 4096, 1, 1048576,            \
	  "chunks a room still Bootstrapping may hold at a P rank's engine (P does not wait for "  \
	  "D); past it lc_engine_chunk_add is refused with -ENOSPC (chunks_refused_held)")        \
	X(p_held_pages_max, "LAYERCAKE_P_HELD_PAGES_MAX", 4194304, 1, 4294967296ll,                \
	  "page and state-slot entries the chunks held for Bootstrapping rooms may name at a P "   \
	  "rank's engine; past it lc_engine_chunk_add is refused with -ENOSPC")                   \
	X(p_replies_max, "LAYERCAKE_P_REPLIES_MAX", 64, 1, 512,                                    \
	  "sockets a P rank holds for answers to D endpoints without a session (refused "          \
	  "REGISTERs); past it the oldest is dropped with its answer (replies_dropped)")           \
	X(p_reply_ms, "LAYERCAKE_P_REPLY_MS", 3000, 10, 600000,                                    \
	  "how long a P rank keeps such a socket for its answer to go out")                        \
	X(staging_ring_mib, "LAYERCAKE_STAGING_RING_MIB", 32, 1, 65536,                            \
	  "host staging ring per context for device-kind sources (docs/gpu.md); a batch larger "   \
	  "than the ring stages through a one-off buffer (staging_overflows)")                     \
	X(sim_latency_us, "LAYERCAKE_SIM_LATENCY_US", 0, 0, 10000000,                              \
	  "simulated device memory: added latency of each copy")                                   \
	X(sim_gbps, "LAYERCAKE_SIM_GBPS", 0, 0, 100000,                                            \
	  "simulated device memory: copy bandwidth in GB/s (0: unlimited)")

#define LC__CONFIG_STR_TABLE(X)                                                                    \
	X(secret_dir, "LAYERCAKE_SECRET_DIR", "",                                                  \
	  "folder holding bootstrap.secret and the CURVE keypair (curve.public, curve.secret)")    \
	X(advertise_host, "LAYERCAKE_ADVERTISE_HOST", "",                                          \
	  "the address peers are told to reach this host at (docs/deployment.md); empty: the "     \
	  "local address of the route towards each peer, listeners bound to the wildcard")         \
	X(log, "LAYERCAKE_LOG", "warn",                                                            \
	  "log level at start: off, error, warn, info, debug or trace (lc_log_set_level changes "  \
	  "it)")                                                                                   \
	X(status_schemes, "LAYERCAKE_STATUS_SCHEMES", "tcp",                                       \
	  "ZeroMQ transports a P rank connects to for a D's status endpoint, comma separated "     \
	  "(tcp, ipc, ...); a REGISTER naming another is refused and not answered "                \
	  "(replies_refused_scheme)")                                                              \
	X(cuda_lib, "LAYERCAKE_CUDA_LIB", "libcuda.so.1",                                          \
	  "the CUDA driver library, opened with dlopen at first use (docs/gpu.md); a missing "     \
	  "one means no CUDA: host memory only")

enum lc__config_field {
#define LC__CFG_ENUM(field, env, def, min, max, help) LC__CFG_##field,
	LC__CONFIG_TABLE(LC__CFG_ENUM)
#undef LC__CFG_ENUM
		LC__CFG_COUNT
};

typedef struct lc__config {
	int64_t values[LC__CFG_COUNT];
} lc__config_t;

/* Defaults, then LAYERCAKE_* variables (malformed or out-of-range values are
 * logged and ignored). */
void lc__config_load(lc__config_t *cfg);
/* Index of a knob by field name, or -ENOENT. */
int lc__config_find(const char *name);
/* Parse and check a value for knob `index`: an integer, or a name that some
 * knobs give their values (ucx_data: am, put; ucx_err_mode: peer, none). */
int lc__config_parse(int index, const char *text, int64_t *out);

enum lc__config_str_field {
#define LC__CFGS_ENUM(field, env, def, help) LC__CFGS_##field,
	LC__CONFIG_STR_TABLE(LC__CFGS_ENUM)
#undef LC__CFGS_ENUM
		LC__CFGS_COUNT
};

/* One integer knob from its default and the environment, for a caller
 * without a context (as lc__config_load does it for each knob). */
int64_t lc__config_env_int(enum lc__config_field field);
/* A string knob: the environment's value if set and non-empty, else the
 * default; NULL when both are empty. Valid until the environment changes. */
const char *lc__config_env_str(enum lc__config_str_field field);
/* Index of a string knob by field name, or -ENOENT. */
int lc__config_find_str(const char *name);

#define LC__CFG(cfg, field) ((cfg)->values[LC__CFG_##field])

#endif
