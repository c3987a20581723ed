/*
 * What the adversarial tests share: child processes that report progress
 * lines on a pipe and wait for a go byte, and forging control messages onto
 * a peer's ZeroMQ endpoint with the real codec.
 */
#ifndef LC_TESTS_ADVERSARIAL_HARNESS_H
#define LC_TESTS_ADVERSARIAL_HARNESS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "control/codec.h"

/* In a child: where its progress lines go (tu_say(adv_status_fd, ...)). */
extern int adv_status_fd;

uint64_t adv_now_ms(void);
/* In a child: the parent's next byte on fd; 'q' at EOF (the parent's reap)
 * or on an error. */
char adv_wait_byte(int fd);

typedef struct adv_proc {
	pid_t pid;
	int status_fd; /* its progress lines */
	int go_fd;     /* a byte (or EOF) lets it go on */
	char buf[4096];
	size_t len;
} adv_proc_t;

typedef int (*adv_child_fn)(void *arg, int go_fd);

/* Fork a child running fn(arg, go_fd); it dies with the parent. */
void adv_spawn(adv_proc_t *pr, adv_child_fn fn, void *arg);
/* One byte on the child's go pipe; adv_go sends 'g'. */
void adv_send_byte(adv_proc_t *pr, char c);
void adv_go(adv_proc_t *pr);
/* The next progress line starting with prefix (false at EOF or timeout). */
bool adv_wait_line(adv_proc_t *p, const char *prefix, int timeout_ms, char *out, size_t cap);
/* Close the child's go pipe (EOF: quit), then its exit status, 128 + signal,
 * or 124 after timeout_ms (then killed). */
int adv_reap(adv_proc_t *p, int timeout_ms);

/* A PUSH socket to a peer's control endpoint, and one encoded message on it. */
void *adv_push_to(void *zc, const char *ep);
void adv_send_msg(void *tx, const lc__msg_t *m, int flags);
/* The next message of a type at an inbox (a PULL socket) within ms, decoded
 * into *m (the caller frees it with lc__msg_free), or false. Messages of
 * other types are dropped. */
bool adv_inbox_next(void *rx, int type, int ms, lc__msg_t *m);

/* A fake bootstrap server: a raw TCP thread on a loopback port (addr,
 * "127.0.0.1:PORT") that answers every GET with the JSON the case chose:
 * `parallel` for the parallel info (engine_rank=-1), "ok" for /health,
 * `rank` for anything else. adv_bs_set changes either (NULL: unchanged)
 * once it started; adv_bs_stop stops the thread and closes the port. */
typedef struct adv_bs {
	int fd;
	pthread_t th;
	pthread_mutex_t lock;
	char parallel[1024], rank[512]; /* under lock */
	char addr[64];
} adv_bs_t;
void adv_bs_start(adv_bs_t *b);
void adv_bs_set(adv_bs_t *b, const char *parallel, const char *rank);
void adv_bs_stop(adv_bs_t *b);
/* A loopback port: listening, its socket in *fd_out; or (fd_out NULL)
 * bound and never listening, so that a connection there is refused and no
 * other process can take the port meanwhile (kept until exit). */
int adv_loopback_port(int *fd_out);

#endif
