/* Transports by URL scheme. The references are strong so that static links
 * pull every transport out of the archive; ucx exists only where the build
 * found UCX (LC_HAVE_UCX). */
#include <string.h>

#include "transport/transport.h"

extern const lc__transport_ops_t lc__loop_ops;
extern const lc__transport_ops_t lc__tcp_ops;
extern const lc__transport_ops_t lc__shm_ops;
#ifdef LC_HAVE_UCX
extern const lc__transport_ops_t lc__ucx_ops;
#define UCX_OPS (&lc__ucx_ops)
#else
#define UCX_OPS NULL
#endif

static const lc__transport_ops_t *candidates(int i)
{
	switch (i) {
	case 0:
		return &lc__loop_ops;
	case 1:
		return &lc__tcp_ops;
	case 2:
		return &lc__shm_ops;
	case 3:
		return UCX_OPS;
	default:
		return NULL;
	}
}

/* Required ops present? The registry refuses an incomplete table. */
static bool complete(const lc__transport_ops_t *ops)
{
	return ops && ops->scheme && ops->listen && ops->listener_close && ops->conn_open &&
	       ops->conn_close && ops->post;
}

const lc__transport_ops_t *lc__transport_find(const char *url)
{
	const char *sep = url ? strstr(url, "://") : NULL;
	if (!sep)
		return NULL;
	size_t n = (size_t)(sep - url);
	for (int i = 0; i < 4; i++) {
		const lc__transport_ops_t *ops = candidates(i);
		if (complete(ops) && strlen(ops->scheme) == n && !strncmp(ops->scheme, url, n))
			return ops;
	}
	return NULL;
}

static char transport_list[64];
static pthread_once_t transport_list_once = PTHREAD_ONCE_INIT;

static void build_transport_list(void)
{
	for (int i = 0; i < 4; i++) {
		const lc__transport_ops_t *ops = candidates(i);
		if (!complete(ops))
			continue;
		if (transport_list[0])
			strcat(transport_list, ",");
		strcat(transport_list, ops->scheme);
	}
}

const char *lc_transports(void)
{
	pthread_once(&transport_list_once, build_transport_list);
	return transport_list;
}
