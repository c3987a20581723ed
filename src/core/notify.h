/*
 * A notifier: "something changed since you last looked", as an eventfd a
 * caller may poll beside its own fds (lc_prefill_fd, lc_decode_fd) and a
 * wait with a deadline. Lossless and coalesced: any number of signals
 * between two waits make the next wait return once; a signal that comes
 * while nobody looks costs one atomic exchange, the first one also one
 * write(2).
 *
 * The contract for the waiter: after lc__notify_wait returns 1, look at
 * everything (poll the rooms); whatever changes after that look makes the
 * fd readable again. A wake may be spurious (nothing new to see), never
 * lost.
 *
 * Threading: any thread signals; waits from one thread at a time (a second
 * waiter may miss the wake the first one consumed).
 */
#ifndef LC_CORE_NOTIFY_H
#define LC_CORE_NOTIFY_H

#include <stdatomic.h>
#include <stdbool.h>

typedef struct lc__notify {
	int efd;              /* eventfd, non-blocking; -1 before init */
	_Atomic bool pending; /* signalled since the last wait drained it */
} lc__notify_t;

int lc__notify_init(lc__notify_t *n);
void lc__notify_fini(lc__notify_t *n);
/* Any thread, any lock held (the write is a leaf). NULL is a no-op. */
void lc__notify_signal(lc__notify_t *n);
/* 1 if signalled since the last wait (then cleared), 0 once timeout_ms
 * passed (0: do not block, < 0: no deadline), or -errno. */
int lc__notify_wait(lc__notify_t *n, int timeout_ms);

#endif
