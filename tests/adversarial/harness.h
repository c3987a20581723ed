/*
 * What the adversarial tests share: child processes that report progress
 * lines on a pipe and wait for a go byte, and forging control messages onto
 * a peer's ZeroMQ endpoint with the real codec.
 */
#ifndef LC_TESTS_ADVERSARIAL_HARNESS_H
#define LC_TESTS_ADVERSARIAL_HARNESS_H

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

#endif
