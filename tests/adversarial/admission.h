/*
 * A P and D scripted step by step, for the cases about which D a P rank
 * takes for a room (adversarial_admission.c, adversarial_pairing.c): a real
 * P process (a bootstrap server and one P rank, rooms.h's geometry) that
 * acts on one byte at a time from the parent, and real D processes, each
 * with one receiver of one room. Each reports what happened, with the
 * CLOCK_MONOTONIC time (shared by the processes of one machine), on its
 * status pipe. A pairing value is used where the library has them
 * (LC_PAIR_MAX), so that the cases without one build on any version.
 */
#ifndef LC_TESTS_ADVERSARIAL_ADMISSION_H
#define LC_TESTS_ADVERSARIAL_ADMISSION_H

#include <stddef.h>
#include <stdint.h>

#include "harness.h"

#define ADM_ROOM 4242
#define ADM_PAGE_TOKENS 16 /* tokens per page: D's prefix_len / this = pages P skips */
#define ADM_PAIR_MAX 64

/* The P process: knobs for its pool ("name=value,..."; NULL none) and the
 * pairing value its sender gets (len 0: none). Commands, one byte each:
 *   's'  create the sender of ADM_ROOM          -> "p-sender RC"
 *   'b'  wait (10 s) for it to leave Bootstrapping
 *                                               -> "p-boot STATUS PREFIX|-1"
 *   'f'  forward the room (its pages after D's prefix, every layer, the
 *        metadata) and wait (10 s) for its end  -> "p-final STATUS T REASON"
 *   'h'  a batch of the room with half its layers recorded -> "p-half"
 *   'x'  cancel the sender                      -> "p-cancel RC T"
 *   'r'  poll the sender once                   -> "p-poll STATUS"
 *   'd'  destroy the sender                     -> "p-destroyed T"
 *   'c'  counters -> "p-counters pair N claimed N ended N parked N noroom N"
 *   'q' or EOF: quit (0). */
typedef struct adm_p_arg {
	const char *knobs;
	uint8_t pair[ADM_PAIR_MAX];
	size_t pair_len;
} adm_p_arg_t;
int adm_p_child(void *arg, int go_fd);

/* A D process: one receiver of ADM_ROOM at bs_addr, its pairing value
 * (len 0: none), D's prefix in tokens, knobs for its pool. On 'g': creates
 * the receiver, sends its NPAGES pages once Bootstrapped ("d-sent STATUS
 * T"), waits (wait_ms) for the end and checks every page against P's
 * ("d-done STATUS FAIL_REASON T BAD_PAGES REASON"); quits on the next byte
 * or EOF. It says "d-ready" once up. */
typedef struct adm_d_arg {
	const char *bs_addr;
	const char *knobs;
	uint8_t pair[ADM_PAIR_MAX];
	size_t pair_len;
	uint64_t prefix;
	int wait_ms;
} adm_d_arg_t;
int adm_d_child(void *arg, int go_fd);

/* What a D said in its "d-done" line. */
typedef struct adm_done {
	int status, fail_reason, bad;
	uint64_t t_ms;
	char reason[200];
} adm_done_t;

/* The parent's side. */
/* Start P (says addr: its bootstrap address to addr[64]). */
void adm_p_start(adv_proc_t *p, adm_p_arg_t *a, char *addr);
/* Send P command c and read its answer line (prefix) into line[cap]. */
void adm_p_do(adv_proc_t *p, char c, const char *prefix, char *line, size_t cap);
/* Start a D and wait for it to be up (not yet receiving). */
void adm_d_start(adv_proc_t *d, adm_d_arg_t *a);
/* Let D receive; its "d-sent" time. */
uint64_t adm_d_send(adv_proc_t *d);
/* D's "d-done" within timeout_ms (false when none came). */
bool adm_d_done(adv_proc_t *d, int timeout_ms, adm_done_t *out);
/* Tell a child to quit ('q'), whether or not it is still there. */
void adm_quit(adv_proc_t *p);
/* A P counter from its "p-counters" line (0 when absent). */
uint64_t adm_counter(const char *line, const char *name);
/* A pairing value from a seed (LC_PAIR_MIN bytes and more). */
void adm_pair(uint8_t *pair, size_t *len, uint64_t seed);

#endif
