/*
 * An attacker's tools against real P and D processes (the sessions cases):
 * a data-plane listener that only counts, ZeroMQ sockets with or without
 * CURVE, and forged control messages about D's session (D_SESSION) and
 * rooms, encoded by the real codec with a chosen session secret.
 */
#ifndef LC_TESTS_ADVERSARIAL_FORGE_H
#define LC_TESTS_ADVERSARIAL_FORGE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "control/codec.h"

#define D_SESSION "decode-owned"

/* A raw TCP listener standing for the attacker's data plane: it counts
 * every byte P sends it and answers nothing. */
typedef struct sink {
	int fd;
	char url[64];
	_Atomic uint64_t bytes;
	_Atomic bool stop;
	pthread_t th;
} sink_t;

void sink_start(sink_t *k);
/* Stops it; the bytes it got. */
uint64_t sink_stop(sink_t *k);

/* The attacker's keys (CURVE, z85) or none. */
typedef struct keys {
	char pub[41], sec[41], server[41];
} keys_t;

/* A PUSH to ep, and an inbox (PULL) bound on loopback whose endpoint goes
 * to ep[cap]; CURVE client or server with keys k when k is given. */
void *forge_push(void *zc, const char *ep, const keys_t *k);
void *forge_inbox(void *zc, const keys_t *k, char *ep, size_t cap);
/* What the inbox gets within ms: counts by type (LC__MSG_TYPE_MAX + 1
 * entries), and the result of the last REGISTER_REPLY (1 when none); stops
 * at a reply when until_reply. */
int32_t inbox_drain(void *rx, int ms, int *counts, bool until_reply);

/* A secret of the attacker's own, from a seed. */
void guess(uint8_t *secret, uint64_t seed);
/* To P: a REGISTER of D_SESSION with D's geometry, the attacker's endpoints,
 * secret and (CURVE) key; a CANCEL of room; a TRANSFER_INFO for room
 * room_id of D's room i pages that answers to status_ep. */
void forge_register(void *tx, const char *status_ep, const char *data_url, const uint8_t *secret,
		    const keys_t *k);
/* The same for another session id; copies of it, sent back to back. */
void forge_register_as(void *tx, const char *session, const char *status_ep, const char *data_url,
		       const uint8_t *secret, const keys_t *k);
void forge_register_n(void *tx, int copies, const char *session, const char *status_ep,
		      const char *data_url, const uint8_t *secret, const keys_t *k);
void forge_cancel(void *tx, uint64_t room, const uint8_t *secret);
void forge_info(void *tx, uint64_t room_id, int i, const uint8_t *secret, const char *status_ep);
/* To D: a refusal of its registration; a room's STATUS Failed and LAYERS. */
void forge_reply(void *tx, const uint8_t *secret);
void forge_p_room(void *tx, uint64_t room, const uint8_t *secret);

#endif
