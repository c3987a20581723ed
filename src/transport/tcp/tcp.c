/* tcp:// ops table: the sender (send.c) and the receiver (recv.c). */

#include "transport/tcp/tcp_int.h"

const lc__transport_ops_t lc__tcp_ops = {
	.scheme = "tcp",
	/* strided: one descriptor per strided write (wire.h) */
	.caps = LC__TP_STRIDED | LC__TP_REMOTE | LC__TP_HOST_PORT | LC__TP_INLINE_SEND,
	.listener = {.listen = lc__tcp_listen, .close = lc__tcp_listener_close},
	.conn = {.open = lc__tcp_conn_open,
		 .close = lc__tcp_conn_close,
		 .post = lc__tcp_post,
		 .flush = lc__tcp_flush},
};
