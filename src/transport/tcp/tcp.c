/* tcp:// ops table: the sender (send.c) and the receiver (recv.c). */

#include "transport/tcp/tcp_int.h"

const lc__transport_ops_t lc__tcp_ops = {
	.scheme = "tcp",
	.strided = true, /* one descriptor per strided write (wire.h) */
	.listen = lc__tcp_listen,
	.listener_close = lc__tcp_listener_close,
	.conn_open = lc__tcp_conn_open,
	.conn_close = lc__tcp_conn_close,
	.post = lc__tcp_post,
	.flush = lc__tcp_flush,
};
