/*
 * An attacker that holds a ZeroMQ inbox (adversarial_floods.c): raw TCP
 * connections from chosen source addresses (127.0.0.x: all loopback on
 * Linux) that finish the ZMTP handshake as a PUSH would and then say
 * nothing; and a watch of a real peer's connections to an inbox, read from
 * the kernel while the attacker acts.
 */
#ifndef LC_TESTS_ADVERSARIAL_HOLDER_H
#define LC_TESTS_ADVERSARIAL_HOLDER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* A non-blocking TCP connection from src (NULL: any) to host:port, or -1. */
int adv_tcp_from(const char *src, const char *host, int port);
/* Close with a reset (SO_LINGER 0): nothing lingers in either kernel. */
void adv_close_reset(int fd);

#define HOLD_MAX 3000  /* connections a holder opens */
#define HOLD_WINDOW 32 /* of them on their way at a time */

/* HOLD_MAX connections that say hello (the ZMTP 3.0 greeting, NULL
 * mechanism, and a READY naming a PUSH) and then nothing, kept open by a
 * thread that reads and drops what the inbox sends. At most HOLD_WINDOW
 * are on their way at a time (connecting, or not greeted yet): the inbox's
 * accept queue is short, and what overflows it would come back in waves of
 * SYN retries for minutes; paced, the flood has all come in within a
 * second or two (settled). A connection the inbox closes is closed here
 * too; with refill on, it is opened again, one a millisecond. */
typedef struct hold {
	int fd[HOLD_MAX];
	uint8_t st[HOLD_MAX];
	uint32_t got[HOLD_MAX]; /* bytes the inbox sent */
	unsigned char hello[128];
	size_t hello_len;
	char host[64];
	int port, naddrs, next, on_way;
	uint64_t refill_ms; /* refilling: when the next may be opened again */
	pthread_t th;
	_Atomic bool stop, settled, refill;
	/* Opened in all; greeted by the inbox and open now, ever; closed by it. */
	_Atomic int opened, ready, ready_ever, closed;
} hold_t;

/* To host:port from naddrs source addresses: 127.0.0.2 onwards, or
 * 127.0.0.1 alone (the real peers' own) when naddrs is 1. */
void hold_start(hold_t *h, const char *host, int port, int naddrs);
void hold_stop(hold_t *h);
/* Its counts on stderr, after when. */
void hold_say(hold_t *h, const char *when);

/* A thread that looks, every millisecond or so, at the established TCP
 * connections of process pid to remote port rport (sock_diag: a table full
 * of a flood's TIME_WAITs, as /proc/net/tcp shows it, takes 100 ms to read;
 * sockets matched by inode to /proc/PID/fd): every distinct one (by local
 * port) seen while it ran. */
typedef struct peer_watch {
	pid_t pid;
	int rport;
	int ports[64], n, looks;
	_Atomic bool stop;
	pthread_t th;
} peer_watch_t;

void peer_watch_start(peer_watch_t *w, pid_t pid, int rport);
void peer_watch_stop(peer_watch_t *w);

#endif
