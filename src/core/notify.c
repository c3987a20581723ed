/* Notifiers: an eventfd and a flag that keeps it to one write per wait. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/common.h"
#include "core/notify.h"

int lc__notify_init(lc__notify_t *n)
{
	atomic_init(&n->pending, false);
	n->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	return n->efd < 0 ? -errno : 0;
}

void lc__notify_fini(lc__notify_t *n)
{
	if (n->efd >= 0)
		close(n->efd);
	n->efd = -1;
}

void lc__notify_signal(lc__notify_t *n)
{
	uint64_t one = 1;
	if (!n || n->efd < 0 || atomic_exchange(&n->pending, true))
		return; /* nobody has looked since the last signal: it still stands */
	if (write(n->efd, &one, sizeof one) < 0 && errno != EAGAIN)
		LC__ERROR("notifier eventfd write: %s", strerror(errno));
}

/* Drain first, then clear: a signal in between finds pending set and does
 * not write, but its change happened before the clear, so the look the
 * caller takes after we return sees it. */
static int take(lc__notify_t *n)
{
	uint64_t drain;
	if (read(n->efd, &drain, sizeof drain) < 0 && errno != EAGAIN)
		return -errno;
	atomic_store(&n->pending, false);
	return 1;
}

int lc__notify_wait(lc__notify_t *n, int timeout_ms)
{
	uint64_t deadline = timeout_ms > 0 ? lc__now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
	for (;;) {
		if (atomic_load(&n->pending))
			return take(n);
		int wait_ms = timeout_ms < 0 ? -1 : 0;
		if (timeout_ms > 0) {
			uint64_t now = lc__now_ns();
			if (now >= deadline)
				return 0;
			wait_ms = (int)((deadline - now + 999999) / 1000000);
		}
		struct pollfd p = {.fd = n->efd, .events = POLLIN};
		int rc = poll(&p, 1, wait_ms);
		if (rc < 0 && errno != EINTR)
			return -errno;
		if (rc > 0)
			return take(n);
		if (rc == 0 && timeout_ms == 0)
			return 0;
	}
}
