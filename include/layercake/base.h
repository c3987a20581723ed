/*
 * layercake/base.h: what every part of the API shares: the export macro,
 * the version, error codes, logging, and the tables of configuration knobs
 * and context counters. Include <layercake.h> rather than this file; each
 * header under layercake/ also compiles on its own.
 *
 * Conventions, once for all functions of the library:
 *
 * - Every call returns int: 0 (or a count) on success, a negative error code
 *   on failure: either -errno (-EINVAL, -ENOMEM, ...) or one of the LC_ERR_*
 *   codes below. lc_strerror() and lc_err_name() describe both kinds, and
 *   lc_last_error() says why the calling thread's last failing call failed.
 * - Output parameters are written only on success.
 * - Handles are opaque. Parameter structs start with a `size` member that
 *   the caller sets to sizeof(the struct); fields past `size` take defaults,
 *   so the structs can grow without breaking callers.
 * - NULL parameters mean defaults, everywhere: every function that takes a
 *   pointer to a parameter struct (lc_*_params_t) accepts NULL and treats
 *   it exactly as a struct whose fields all take their defaults. Where a
 *   field has no default (it is marked "required"), NULL fails as that
 *   field left unset would: -EINVAL, and the call does nothing; so does a
 *   struct whose `size` does not reach a required field ("params->size is
 *   too small" in lc_last_error()).
 * - Callbacks: if a call that takes a callback fails, the callback never
 *   runs; otherwise it runs exactly once.
 * - The library never prints to stdout and never exits the process; it logs
 *   through a settable logger (stderr by default, level from LAYERCAKE_LOG).
 * - Pages are borrowed, never owned: memory registered with the library must
 *   stay valid until it is deregistered, and destination pages granted to a
 *   room must stay valid until the grant is revoked.
 * - Threading: unless a function says otherwise, calls on different handles
 *   may run concurrently from any threads, and calls on the same handle are
 *   serialised internally. Destroy functions must not race with other calls
 *   on the handle they destroy.
 * - Names are lc_<object>_<verb> with symmetric pairs (create/destroy,
 *   issue/revoke, open/close, register/deregister). A renamed or changed
 *   call keeps no alias: the Python package and the examples move with it.
 * - Exports: every LC_API function of these headers and nothing else, under
 *   the symbol version LAYERCAKE_0.1 (checked by the test abi.exports).
 *   layercake/testing.h (test hooks) is exported too but not included by
 *   <layercake.h>.
 */
#ifndef LAYERCAKE_BASE_H
#define LAYERCAKE_BASE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define LC_API __attribute__((visibility("default")))
#else
#define LC_API
#endif

/* ------------------------------------------------------------------------
 * Version
 * ---------------------------------------------------------------------- */

#define LC_VERSION_MAJOR 0
#define LC_VERSION_MINOR 1
#define LC_VERSION_PATCH 0

/* "MAJOR.MINOR.PATCH" of the library actually loaded. */
LC_API const char *lc_version(void);
/* MAJOR * 10000 + MINOR * 100 + PATCH of the library actually loaded. */
LC_API int lc_version_number(void);

/* ------------------------------------------------------------------------
 * Errors: one table. X(name, value, text).
 * ---------------------------------------------------------------------- */

#define LC_ERRNO_CODES(X)                                                                          \
	X(LC_OK, 0, "success")                                                                     \
	X(LC_EINVAL, -EINVAL, "invalid argument")                                                  \
	X(LC_ENOMEM, -ENOMEM, "out of memory")                                                     \
	X(LC_EAGAIN, -EAGAIN, "try again")                                                         \
	X(LC_ENOENT, -ENOENT, "no such entry")                                                     \
	X(LC_EEXIST, -EEXIST, "already exists")                                                    \
	X(LC_EBUSY, -EBUSY, "busy")                                                                \
	X(LC_ETIMEDOUT, -ETIMEDOUT, "timed out")                                                   \
	X(LC_ENOSPC, -ENOSPC, "no space left")                                                     \
	X(LC_EMSGSIZE, -EMSGSIZE, "message too long")                                              \
	X(LC_ERANGE, -ERANGE, "value out of range")                                                \
	X(LC_ENOTSUP, -ENOTSUP, "operation not supported")

#define LC_LIBRARY_CODES(X)                                                                        \
	X(LC_ERR_REGION, -1001, "unknown memory region")                                           \
	X(LC_ERR_OUT_OF_REGION, -1002, "range outside the registered region")                      \
	X(LC_ERR_GRANT, -1003, "write not covered by a grant for its room")                        \
	X(LC_ERR_CANCELLED, -1004, "cancelled")                                                    \
	X(LC_ERR_EXPIRED, -1005, "deadline expired")                                               \
	X(LC_ERR_PEER_CLOSED, -1006, "peer closed the connection")                                 \
	X(LC_ERR_UNREACHABLE, -1007, "peer unreachable")                                           \
	X(LC_ERR_AUTH, -1008, "authentication failed")                                             \
	X(LC_ERR_PROTO, -1009, "malformed or unexpected message")                                  \
	X(LC_ERR_NO_TRANSPORT, -1010, "no transport for this URL")                                 \
	X(LC_ERR_INJECTED, -1011, "injected fault")                                                \
	X(LC_ERR_STALLED, -1012, "no progress within the progress deadline")                       \
	X(LC_ERR_GEOMETRY, -1013, "page geometry differs between P and D")                         \
	X(LC_ERR_SESSION_FAILED, -1014, "session failed and is blocked")                           \
	X(LC_ERR_CLOSED, -1015, "handle is closing")                                               \
	X(LC_ERR_STATE, -1016, "not allowed in the current state")                                 \
	X(LC_ERR_IO, -1017, "transport I/O error")                                                 \
	X(LC_ERR_BOOTSTRAP, -1018, "bootstrap server error")                                       \
	X(LC_ERR_CUDA, -1019, "a CUDA driver call failed")                                         \
	X(LC_ERR_MEM_KIND, -1020, "memory kind unknown or not what the memory is")

#define LC_ERROR_CODES(X) LC_ERRNO_CODES(X) LC_LIBRARY_CODES(X)

enum lc_error {
#define LC__ERR_ENUM(name, value, text) name = (value),
	LC_ERROR_CODES(LC__ERR_ENUM)
#undef LC__ERR_ENUM
};

/* Text for any code returned by the library, including plain -errno values.
 * Never NULL; the string is static. */
LC_API const char *lc_strerror(int code);
/* Symbolic name ("LC_ERR_GRANT", "LC_EINVAL") or "LC_UNKNOWN". Static. */
LC_API const char *lc_err_name(int code);
/* The table above as the loaded library has it, for bindings that read it
 * rather than copy its numbers: lc_err_code(i, &code) for
 * 0 <= i < lc_err_count() (-ERANGE past the end, -EINVAL for NULL). */
LC_API int lc_err_count(void);
LC_API int lc_err_code(int index, int *out);

/*
 * The cause of the last failure on the calling thread, in words: a call
 * that fails because of what it was given or found ("buffer 7 is not inside
 * any given region", "tcp://127.0.0.1: missing port") records its reason
 * before it returns, and lc_last_error() returns it until the next failure
 * on this thread replaces it. The create calls (lc_ctx_create,
 * lc_listener_create, lc_conn_create, lc_region_register*, lc_engine_create,
 * lc_prefill_create, lc_decode_create, lc_bootstrap_start) clear it when they
 * start; other calls that succeed leave it alone. So read it only right
 * after a call returned a negative code, and trust it for that call only
 * when lc_last_error_code() equals that code (a failure that records no
 * reason, an -ENOMEM say, leaves an older text in place).
 * Never NULL ("" when none); the text belongs to the thread and stays valid
 * until that thread's next call into the library. Failures on the library's
 * own threads (a room that fails later) are reported by the room's reason
 * and the log, not here. The Python package puts this text into
 * LayercakeError.
 */
LC_API const char *lc_last_error(void);
/* The code that lc_last_error()'s text was recorded with (0: none). */
LC_API int lc_last_error_code(void);
/* Forget the calling thread's last error (lc_last_error() returns ""). */
LC_API void lc_last_error_clear(void);

/* ------------------------------------------------------------------------
 * Logging
 * ---------------------------------------------------------------------- */

typedef enum lc_log_level {
	LC_LOG_OFF = 0,
	LC_LOG_ERROR = 1,
	LC_LOG_WARN = 2,
	LC_LOG_INFO = 3,
	LC_LOG_DEBUG = 4,
	LC_LOG_TRACE = 5,
} lc_log_level_t;

/* Receives one formatted line without a trailing newline. May be called from
 * any library thread, concurrently; must not call back into the library. */
typedef void (*lc_log_cb)(lc_log_level_t level, const char *line, void *arg);

/* Replace the process-wide logger (NULL restores the stderr logger). */
LC_API void lc_log_set_handler(lc_log_cb cb, void *arg);
/* Set the process-wide level. The initial level comes from LAYERCAKE_LOG
 * (off, error, warn, info, debug, trace; default warn). */
LC_API void lc_log_set_level(lc_log_level_t level);
LC_API lc_log_level_t lc_log_get_level(void);
/* Parses "off".."trace" or "0".."5"; -EINVAL otherwise. */
LC_API int lc_log_level_parse(const char *text, lc_log_level_t *out);

/* ------------------------------------------------------------------------
 * Configuration: one table of knobs. Each has a LAYERCAKE_* environment
 * variable, a default and a help line. A context reads the environment when
 * it is created; lc_ctx_config_set() overrides a value afterwards.
 * ---------------------------------------------------------------------- */

typedef struct lc_config_info {
	const char *name;        /* e.g. "tcp_lanes" */
	const char *env;         /* e.g. "LAYERCAKE_TCP_LANES" */
	const char *default_str; /* e.g. "4" */
	const char *help;        /* one line */
	int64_t min;             /* inclusive bounds of the value */
	int64_t max;
	/* 1: a text knob (a folder, a log level): process-wide, read from its
	 * variable when used; lc_ctx_config_get returns its text ("(set)" for
	 * shared_secret, never the secret), min and max are 0, and
	 * lc_ctx_config_set refuses it (-ENOTSUP). */
	int is_text;
} lc_config_info_t;

/* Number of knobs; lc_config_info(i) for 0 <= i < count, NULL past the end. */
LC_API int lc_config_count(void);
LC_API const lc_config_info_t *lc_config_info(int index);

/* ------------------------------------------------------------------------
 * Counters: the table of a context's counters (monotonic, since creation).
 * lc_counter_name(i) for 0 <= i < lc_counter_count(); lc_ctx_counter() and
 * lc_ctx_counter_by_name() read a context's values.
 * ---------------------------------------------------------------------- */

LC_API int lc_counter_count(void);
LC_API const char *lc_counter_name(int index);

#ifdef __cplusplus
}
#endif

#endif /* LAYERCAKE_BASE_H */
