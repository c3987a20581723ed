/*
 * Adversarial test: no peer grows the log faster than a bounded rate
 * (issue 21, finding 9). A real P (with its bootstrap server) and a real D
 * in this process, real ZeroMQ sockets on 127.0.0.1; the test plays the
 * attacker with the real codec and sends, 10,000 of each:
 *
 *   to P: malformed messages, forged CANCELs (no registered session),
 *         TRANSFER_INFOs of an unregistered session, REGISTERs that P
 *         refuses (another geometry);
 *   to D: malformed messages, REGISTER_REPLYs that answer no registration.
 *
 * Every one is dropped and counted (the counters show all 10,000 of each),
 * and all of them together add fewer than 100 lines to the process's log
 * (captured with lc_log_set_handler, WARN and above).
 *
 *     adversarial_logflood
 *
 * Exit 0 pass, 1 fail, 77 skipped (built without ZeroMQ or the bootstrap
 * server).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zmq.h>

#include "control/codec.h"
#include "harness.h"
#include "testutil.h"

#define N 10000
#define MAX_LINES 100

static _Atomic int lines;
static char first_lines[8][512], last_line[512];
static pthread_mutex_t last_lock = PTHREAD_MUTEX_INITIALIZER;

static void count_line(lc_log_level_t level, const char *line, void *arg)
{
	(void)level;
	(void)arg;
	int n = atomic_fetch_add(&lines, 1);
	if (n < 8)
		snprintf(first_lines[n], sizeof first_lines[n], "%s", line);
	pthread_mutex_lock(&last_lock);
	snprintf(last_line, sizeof last_line, "%s", line);
	pthread_mutex_unlock(&last_lock);
}

static void send_msg(void *tx, const lc__msg_t *m, bool truncate)
{
	uint8_t *buf;
	size_t len;
	int rc = lc__msg_encode(m, &buf, &len);
	TU_CHECK(rc == 0, "encode: %s", lc_last_error());
	/* Cut short: the current version's header, a body that does not decode. */
	TU_CHECK(zmq_send(tx, buf, truncate ? len - 3 : len, 0) >= 0, "send: %s",
		 zmq_strerror(zmq_errno()));
	free(buf);
}

static void flood_p(void *tx)
{
	lc__msg_t m;
	int64_t pages[2] = {0, 1};
	static const uint8_t desc[64] = {1};
	const void *descs[1] = {desc};
	size_t desc_lens[1] = {sizeof desc};
	lc__msg_buffer_t buf = {.layer = 0, .item_len = 256};
	for (int i = 0; i < N; i++) {
		memset(&m, 0, sizeof m);
		m.type = LC__MSG_CANCEL;
		memset(m.secret, 0x5a, sizeof m.secret);
		m.cancel.room = 1000 + (uint64_t)i;
		snprintf(m.cancel.session, sizeof m.cancel.session, "mallory");
		snprintf(m.cancel.reason, sizeof m.cancel.reason, "forged");
		send_msg(tx, &m, true); /* malformed */
		send_msg(tx, &m, false); /* a forged CANCEL */

		memset(&m, 0, sizeof m);
		m.type = LC__MSG_TRANSFER_INFO;
		memset(m.secret, 0x5a, sizeof m.secret);
		m.info.room = 1000 + (uint64_t)i;
		snprintf(m.info.session, sizeof m.info.session, "mallory");
		/* No port: the status P owes it goes nowhere at once. */
		snprintf(m.info.status_ep, sizeof m.info.status_ep, "tcp://127.0.0.1");
		m.info.required_dst = 1;
		m.info.aux_index = -1;
		m.info.page_count = 2;
		m.info.pages = pages;
		send_msg(tx, &m, false);

		memset(&m, 0, sizeof m);
		m.type = LC__MSG_REGISTER;
		memset(m.secret, 0x5a, sizeof m.secret);
		snprintf(m.reg.session, sizeof m.reg.session, "mallory-%d", i);
		snprintf(m.reg.status_ep, sizeof m.reg.status_ep, "tcp://127.0.0.1");
		snprintf(m.reg.data_url, sizeof m.reg.data_url, "tcp://127.0.0.1:1");
		m.reg.fingerprint = 0x5a5a; /* not P's geometry: refused */
		m.reg.nbuffers = 1;
		m.reg.buffers = &buf;
		m.reg.nregions = 1;
		m.reg.region_descs = descs;
		m.reg.region_desc_lens = desc_lens;
		send_msg(tx, &m, false);
	}
}

static void flood_d(void *tx, const char *session)
{
	lc__msg_t m;
	for (int i = 0; i < N; i++) {
		memset(&m, 0, sizeof m);
		m.type = LC__MSG_REGISTER_REPLY;
		memset(m.secret, 0x5a, sizeof m.secret);
		snprintf(m.reply.session, sizeof m.reply.session, "%s", session);
		m.reply.result = LC_ERR_GEOMETRY;
		snprintf(m.reply.reason, sizeof m.reply.reason, "forged refusal");
		send_msg(tx, &m, true);  /* malformed */
		send_msg(tx, &m, false); /* answers no registration */
	}
}

static uint64_t pc(lc_prefill_t *p, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_prefill_counter(p, name, &v));
	return v;
}

static uint64_t dc(lc_decode_t *d, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_decode_counter(d, name, &v));
	return v;
}

int main(void)
{
	tu_watchdog(170);
	lc_log_set_level(LC_LOG_WARN);
	tu_pool_t ps, ds;
	tu_pool_init(&ps, "p", NULL, 2, 16, 256);
	tu_pool_init(&ds, "d", NULL, 2, 16, 256);

	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1"};
	lc_bootstrap_t *bs;
	int rc = lc_bootstrap_start(&bp, &bs);
	if (rc == LC_ENOTSUP)
		return TU_SKIP;
	TU_OK(rc);
	char bs_addr[128], p_ep[256], d_ep[256];
	TU_OK(lc_bootstrap_addr(bs, bs_addr, sizeof bs_addr));
	lc_prefill_params_t pp = {.size = sizeof pp,
				  .layout = ps.layout,
				  .bootstrap = bs_addr,
				  .host = "127.0.0.1",
				  .world_size = 1,
				  .dp_size = 1};
	lc_prefill_t *p;
	rc = lc_prefill_create(ps.ctx, &pp, &p);
	if (rc == LC_ENOTSUP)
		return TU_SKIP;
	TU_OK(rc);
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = ds.layout,
				 .regions = &ds.region,
				 .region_count = 1,
				 .listen_url = "tcp://127.0.0.1:0",
				 .host = "127.0.0.1",
				 .session = "d-flood"};
	lc_decode_t *d;
	TU_OK(lc_decode_create(ds.ctx, &dp, &d));
	TU_OK(lc_prefill_endpoint(p, p_ep, sizeof p_ep));
	TU_OK(lc_decode_endpoint(d, d_ep, sizeof d_ep));
	fprintf(stderr, "P %s, D %s\n", p_ep, d_ep);

	lc_log_set_handler(count_line, NULL);
	void *zc = zmq_ctx_new();
	void *to_p = adv_push_to(zc, p_ep), *to_d = adv_push_to(zc, d_ep);
	uint64_t t0 = adv_now_ms();
	flood_p(to_p);
	flood_d(to_d, "d-flood");

	/* Wait (bounded) until every message was taken and counted. */
	const char *pn[] = {"msgs_malformed", "cancels_refused", "transfer_infos",
			    "registrations_refused"};
	const char *dn[] = {"msgs_malformed", "msgs_unexpected"};
	uint64_t pv[4], dv[2], dl = adv_now_ms() + 120000;
	bool all;
	do {
		usleep(50000);
		all = true;
		for (int i = 0; i < 4; i++)
			all &= (pv[i] = pc(p, pn[i])) >= N;
		for (int i = 0; i < 2; i++)
			all &= (dv[i] = dc(d, dn[i])) >= N;
	} while (!all && adv_now_ms() < dl);
	int n = atomic_load(&lines);
	/* An interval later, the next one logs again with the count held back. */
	usleep(1100000);
	lc__msg_t m = {.type = LC__MSG_CANCEL};
	snprintf(m.cancel.session, sizeof m.cancel.session, "mallory");
	memset(m.secret, 0x5a, sizeof m.secret);
	send_msg(to_p, &m, true);
	for (dl = adv_now_ms() + 10000; pc(p, "msgs_malformed") == N && adv_now_ms() < dl;)
		usleep(10000);
	usleep(100000);
	int after = atomic_load(&lines);
	lc_log_set_handler(NULL, NULL);
	fprintf(stderr, "%d x 6 messages in %llu ms: %d log lines\n", N,
		(unsigned long long)(adv_now_ms() - t0), n);
	for (int i = 0; i < after && i < 8; i++)
		fprintf(stderr, "  %s\n", first_lines[i]);
	for (int i = 0; i < 4; i++)
		fprintf(stderr, "P %s %llu\n", pn[i], (unsigned long long)pv[i]);
	for (int i = 0; i < 2; i++)
		fprintf(stderr, "D %s %llu\n", dn[i], (unsigned long long)dv[i]);
	zmq_close(to_p);
	zmq_close(to_d);
	zmq_ctx_term(zc);

	for (int i = 0; i < 4; i++)
		TU_CHECK(pv[i] == N, "P counted %llu %s, not %d", (unsigned long long)pv[i], pn[i], N);
	for (int i = 0; i < 2; i++)
		TU_CHECK(dv[i] == N, "D counted %llu %s, not %d", (unsigned long long)dv[i], dn[i], N);
	TU_CHECK(n < MAX_LINES, "%d log lines for %d dropped messages (bound %d)", n, 6 * N,
		 MAX_LINES);
	TU_CHECK(after == n + 1 && strstr(last_line, "more since last)"),
		 "the malformed message after the interval: %d new lines, the last \"%s\"",
		 after - n, last_line);

	lc_decode_destroy(d);
	lc_prefill_destroy(p);
	lc_bootstrap_stop(bs);
	tu_pool_fini(&ds);
	tu_pool_fini(&ps);
	fprintf(stderr, "PASS\n");
	return 0;
}
