/* Socket helpers both sides of tcp:// share (a leaf: calls nothing of the
 * transport). */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "transport/tcp/tcp_int.h"

void lc__tcp_sockopts(int fd, int sockbuf)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (sockbuf > 0) {
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sockbuf, sizeof sockbuf);
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sockbuf, sizeof sockbuf);
	}
}

int lc__tcp_sockbuf(lc_ctx_t *ctx)
{
	int64_t kib = lc__ctx_cfg(ctx, LC__CFG_socket_buffer_kib);
	return (int)LC__MIN(kib * 1024, (int64_t)1 << 30);
}
