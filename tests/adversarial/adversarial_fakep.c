/*
 * A real D against a P that is not one: a fake bootstrap server (a raw TCP
 * thread on 127.0.0.1 answering GET /route with the JSON a case chooses)
 * and a fake P rank (a ZeroMQ PULL inbox in this process that reads D's
 * REGISTER with the real codec and answers to D's status endpoint with
 * whatever the case forges). Each case asserts what D promises: the room's
 * status, fail reason and words, D's counters, a CANCEL to P where D says
 * it tells P, and no hang (every wait has a deadline):
 *
 *   refused        garbage, an old version, a type D never receives,
 *                  replies of another session or without the secret, a
 *                  status and layers of an unknown room: each dropped and
 *                  counted; then P's refusal fails the room (bad_input,
 *                  "refused this D") and D cancels at P
 *   accepted       an accepting reply bootstraps the room; a duplicate
 *                  reply, a Success before D sent pages, layers beyond the
 *                  layout, a status without the secret: dropped and counted;
 *                  a Failed (session_gone) from P fails the room with P's words
 *   silent         P never answers the REGISTER: the room fails after
 *                  connect_timeout_ms (bootstrap_timeout), naming P's rank,
 *                  "registrations_unanswered" counted
 *   unreachable    the route names a port where nothing listens: the same,
 *                  saying D cannot reach P at the address P advertised
 *   geometry       P's parallel info has another buffer count and another
 *                  fingerprint: D warns "geometry differs" before it
 *                  registers (P refuses; here, the fake P refuses)
 *   fingerprint    the same with only the fingerprint differing
 *   rank_malformed GET /route of the rank answers no endpoint: the room
 *                  fails at bootstrap_timeout_ms saying "malformed reply"
 *   doomed         P's TP is twice D's and its page lengths cannot pair with
 *                  D's: once P accepts, the room fails naming the pairing
 *                  and D cancels at P
 *   moved          a rank's first route answered nothing, its next route
 *                  differs and nothing accepts at the first any more: D
 *                  follows it ("moved", routes_moved) and registers there
 *   hijack         the same, but something still accepts at the pinned
 *                  endpoint: the changed route is refused (bad_input,
 *                  routes_refused), no REGISTER goes to it
 *   claims         after D sent its pages, a Success (twice, with metadata)
 *                  though nothing landed fails the room ("peer claimed
 *                  success: 0 of N bytes landed") and D cancels at P; a
 *                  P silent after the pages fails it at waiting_timeout_ms
 *   api            lc_decode_create, lc_receiver_send, _metadata, _cancel,
 *                  lc_decode_counter and _endpoint misused around a room the
 *                  fake P accepted: each refused with its cause, nothing
 *                  moved; the real send reaches P, the cancel too
 *
 * Exit 0 pass, 1 fail, 77 skipped.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "control/codec.h"
#include "harness.h"
#include "testutil.h"

#define WAIT_MS 20000 /* generous: a loaded 2-core VM, sanitizers */
#define ROOM 7

static int failures;

#define EXPECT(cond, ...)                                                                          \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                       \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

/* ---- D's log ---- */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[32768];
static size_t log_len;

static void on_log(lc_log_level_t level, const char *line, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&log_lock);
	if (level <= LC_LOG_WARN && log_len + strlen(line) + 2 < sizeof log_text)
		log_len += (size_t)snprintf(log_text + log_len, sizeof log_text - log_len, "%s\n",
					    line);
	pthread_mutex_unlock(&log_lock);
}

static bool log_has(const char *a)
{
	pthread_mutex_lock(&log_lock);
	bool yes = strstr(log_text, a) != NULL;
	pthread_mutex_unlock(&log_lock);
	return yes;
}

/* ---- the fake bootstrap server (harness.h) ---- */

static adv_bs_t the_bs;

static void set_rank(const char *ip, int port)
{
	char json[512];
	snprintf(json, sizeof json,
		 "{\"rank_ip\":\"%s\",\"rank_port\":%d,\"curve_public_key\":\"\"}", ip, port);
	adv_bs_set(&the_bs, NULL, json);
}

/* ---- the fake P rank ---- */

static uint64_t counter(lc_decode_t *d, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_decode_counter(d, name, &v));
	return v;
}

/* Wait until counter `name` reaches at least want; true if it did. */
static bool counter_reaches(lc_decode_t *d, const char *name, uint64_t want)
{
	for (uint64_t dl = adv_now_ms() + WAIT_MS; adv_now_ms() < dl; usleep(5000))
		if (counter(d, name) >= want)
			return true;
	fprintf(stderr, "counter %s: %llu, want %llu\n", name, (unsigned long long)counter(d, name),
		(unsigned long long)want);
	return false;
}

/* Poll until the room leaves `from` (or the deadline); its status. */
static int poll_past(lc_receiver_t *r, int from, lc_room_info_t *info)
{
	int st = from;
	for (uint64_t dl = adv_now_ms() + WAIT_MS; adv_now_ms() < dl && st == from; usleep(5000))
		st = lc_receiver_poll(r, info);
	return st;
}

static void send_reply(void *tx, const lc__msg_t *reg, uint32_t p_rank, int32_t result,
		       const char *session, const uint8_t *secret)
{
	lc__msg_t m = {.type = LC__MSG_REGISTER_REPLY};
	memcpy(m.secret, secret ? secret : reg->secret, LC__MSG_SECRET_LEN);
	snprintf(m.reply.session, sizeof m.reply.session, "%s",
		 session ? session : reg->reg.session);
	m.reply.p_rank = p_rank;
	m.reply.result = result;
	snprintf(m.reply.reason, sizeof m.reply.reason, "%s", result ? "forged refusal" : "");
	adv_send_msg(tx, &m, 0);
}

static void send_status(void *tx, const uint8_t *secret, uint64_t room, int status, int fail,
			const char *reason)
{
	lc__msg_t m = {.type = LC__MSG_STATUS};
	memcpy(m.secret, secret, LC__MSG_SECRET_LEN);
	m.status.room = room;
	m.status.status = (uint8_t)status;
	m.status.fail_reason = (uint32_t)fail;
	snprintf(m.status.reason, sizeof m.status.reason, "%s", reason);
	adv_send_msg(tx, &m, 0);
}

/* A Success carrying metadata, as P's engine sends it when it is done. */
static void send_success(void *tx, const uint8_t *secret, uint64_t room, const char *meta)
{
	lc__msg_t m = {.type = LC__MSG_STATUS};
	memcpy(m.secret, secret, LC__MSG_SECRET_LEN);
	m.status.room = room;
	m.status.status = LC_ROOM_SUCCESS;
	m.status.metadata = (uint8_t *)meta;
	m.status.metadata_len = (uint32_t)strlen(meta);
	adv_send_msg(tx, &m, 0);
}

/* A P that says Success though nothing of the room landed (twice, with
 * metadata), and one that never says anything after D sent its pages. */
static void run_claims(lc_decode_t *d, lc_receiver_t *r, const char *bs, void *rx, void *tx,
		       const lc__msg_t *reg)
{
	int64_t pages[2] = {2, 3};
	lc_receiver_pages_t pg = {
		.size = sizeof pg, .pages = pages, .page_count = 2, .aux_index = -1};
	lc_room_info_t info = {.size = sizeof info};
	send_reply(tx, reg, 0, 0, NULL, NULL);
	int st = poll_past(r, LC_ROOM_BOOTSTRAPPING, &info);
	TU_CHECK(st == LC_ROOM_BOOTSTRAPPED, "want Bootstrapped, got %s \"%s\"",
		 lc_room_status_name(st), info.reason);
	TU_OK(lc_receiver_send(r, &pg));
	lc__msg_t m;
	if (adv_inbox_next(rx, LC__MSG_TRANSFER_INFO, WAIT_MS, &m))
		lc__msg_free(&m);
	send_success(tx, reg->secret, ROOM, "meta-1");
	send_success(tx, reg->secret, ROOM, "meta-2");
	st = poll_past(r, LC_ROOM_TRANSFERRING, &info);
	EXPECT(st == LC_ROOM_FAILED && info.fail_reason == LC_FAIL_TRANSFER &&
		       strstr(info.reason, "peer claimed success: 0 of 32768 bytes landed"),
	       "claimed: want Failed (transfer) \"peer claimed success\", got %s (%s) \"%s\"",
	       lc_room_status_name(st), lc_fail_reason_name(info.fail_reason), info.reason);
	char meta[16];
	EXPECT(lc_receiver_metadata(r, meta, sizeof meta) == LC_ERR_STATE,
	       "metadata of a failed room");
	EXPECT(lc_receiver_layers_ready(r) == 0, "layers of a failed room");
	bool cancel = adv_inbox_next(rx, LC__MSG_CANCEL, WAIT_MS, &m);
	EXPECT(cancel && m.cancel.room == ROOM, "no CANCEL at P after the lie");
	if (cancel)
		lc__msg_free(&m);
	/* Sent, then silence: waiting_timeout_ms (2 s here) fails the room. */
	lc_receiver_t *r2;
	TU_OK(lc_receiver_create(d, bs, ROOM + 1, &r2));
	st = poll_past(r2, LC_ROOM_BOOTSTRAPPING, &info);
	EXPECT(st == LC_ROOM_BOOTSTRAPPED, "room 8: got %s \"%s\"", lc_room_status_name(st),
	       info.reason);
	if (st == LC_ROOM_BOOTSTRAPPED) {
		TU_OK(lc_receiver_send(r2, &pg));
		st = poll_past(r2, LC_ROOM_TRANSFERRING, &info);
		EXPECT(st == LC_ROOM_FAILED && info.fail_reason == LC_FAIL_WAITING_TIMEOUT &&
			       strstr(info.reason, "no final status within 2000 ms"),
		       "room 8: want Failed (waiting_timeout), got %s (%s) \"%s\"",
		       lc_room_status_name(st), lc_fail_reason_name(info.fail_reason), info.reason);
	}
	lc_receiver_destroy(r2);
}

static void send_layers(void *tx, const uint8_t *secret, uint64_t room, uint32_t layers)
{
	lc__msg_t m = {.type = LC__MSG_LAYERS};
	memcpy(m.secret, secret, LC__MSG_SECRET_LEN);
	m.layers.room = room;
	m.layers.layers = layers;
	adv_send_msg(tx, &m, 0);
}

/* The fake P rank's inbox: a PULL bound on loopback, its endpoint in ep. */
static void *inbox_bind(void *zc, char *ep, size_t cap)
{
	void *rx = zmq_socket(zc, ZMQ_PULL);
	int linger = 0;
	size_t n = cap;
	zmq_setsockopt(rx, ZMQ_LINGER, &linger, sizeof linger);
	TU_CHECK(zmq_bind(rx, "tcp://127.0.0.1:*") == 0, "bind");
	TU_CHECK(zmq_getsockopt(rx, ZMQ_LAST_ENDPOINT, ep, &n) == 0, "endpoint");
	return rx;
}

/* The receiver's calls misused around a room that a fake P accepted. */
static void run_api(lc_decode_t *d, lc_receiver_t *r, tu_pool_t *s, const char *bs, void *rx,
		    void *tx, const lc__msg_t *reg)
{
	int64_t pages[2] = {0, 1};
	lc_receiver_pages_t pg = {
		.size = sizeof pg, .pages = pages, .page_count = 2, .aux_index = -1};
	lc_room_info_t info = {.size = sizeof info};
	EXPECT(lc_receiver_send(r, &pg) == LC_ERR_STATE &&
		       strstr(lc_last_error(), "not Bootstrapped yet"),
	       "send before Bootstrapped: \"%s\"", lc_last_error());
	lc_receiver_t *r2 = NULL;
	EXPECT(lc_receiver_create(d, bs, ROOM, &r2) == -EEXIST && !r2,
	       "a second receiver of a room");
	EXPECT(lc_receiver_create(d, "localhost", ROOM + 5, &r2) == -EINVAL &&
		       strstr(lc_last_error(), "missing port"),
	       "bootstrap \"localhost\": \"%s\"", lc_last_error());
	EXPECT(lc_receiver_create(d, "tcp://127.0.0.1:5", ROOM + 5, &r2) == -EINVAL &&
		       strstr(lc_last_error(), "not the bootstrap server's scheme"),
	       "bootstrap tcp://: \"%s\"", lc_last_error());
	/* Another P's bootstrap server (nothing there): a peer of its own. */
	TU_OK(lc_receiver_create(d, "127.0.0.1:1", ROOM + 5, &r2));
	lc_receiver_destroy(r2);
	send_reply(tx, reg, 0, 0, NULL, NULL);
	int st = poll_past(r, LC_ROOM_BOOTSTRAPPING, &info);
	TU_CHECK(st == LC_ROOM_BOOTSTRAPPED, "want Bootstrapped, got %s \"%s\"",
		 lc_room_status_name(st), info.reason);
	/* Pages refused at the call, nothing granted, each with its cause. */
	lc_receiver_pages_t bad = pg;
	bad.pages = NULL;
	EXPECT(lc_receiver_send(r, &bad) == -EINVAL &&
		       strstr(lc_last_error(), "pages->pages is NULL"),
	       "NULL pages: \"%s\"", lc_last_error());
	bad = pg;
	bad.aux_index = -2;
	EXPECT(lc_receiver_send(r, &bad) == -EINVAL && strstr(lc_last_error(), "aux_index < -1"),
	       "aux_index: \"%s\"", lc_last_error());
	bad = pg;
	bad.size = 8;
	EXPECT(lc_receiver_send(r, &bad) == -EINVAL && strstr(lc_last_error(), "too small"),
	       "size: \"%s\"", lc_last_error());
	EXPECT(lc_receiver_send(r, NULL) == -EINVAL && strstr(lc_last_error(), "pages is NULL"),
	       "NULL: \"%s\"", lc_last_error());
	int64_t far[2] = {6, 8}; /* 8 pages: ids 0..7 */
	bad = pg;
	bad.pages = far;
	lc_last_error_clear();
	EXPECT(lc_receiver_send(r, &bad) == -EINVAL && strstr(lc_last_error(), "page id 8") &&
		       strstr(lc_last_error(), "outside buffer 0"),
	       "page 8: \"%s\"", lc_last_error());
	int64_t neg[1] = {-1};
	bad = pg;
	bad.pages = neg;
	bad.page_count = 1;
	lc_last_error_clear();
	EXPECT(lc_receiver_send(r, &bad) == -EINVAL && strstr(lc_last_error(), "page id -1"),
	       "page -1: \"%s\"", lc_last_error());
	EXPECT(lc_receiver_poll(r, &info) == LC_ROOM_BOOTSTRAPPED, "a refused send moved the room");
	bad = pg;
	bad.state_slot_count = 1;
	EXPECT(lc_receiver_send(r, &bad) == -EINVAL &&
		       strstr(lc_last_error(), "pages->state_slots is NULL"),
	       "NULL slots: \"%s\"", lc_last_error());
	bad = pg;
	bad.page_count = (size_t)1 << 40; /* refused before a page is read */
	EXPECT(lc_receiver_send(r, &bad) == -EINVAL && strstr(lc_last_error(), "too many pages"),
	       "too many pages: \"%s\"", lc_last_error());
	bad = pg;
	bad.state_slots = pages;
	bad.state_slot_count = 1000;
	EXPECT(lc_receiver_send(r, &bad) == -EINVAL &&
		       strstr(lc_last_error(), "too many state slots"),
	       "too many slots: \"%s\"", lc_last_error());
	/* The real send, from an older caller's struct without aux_index and
	 * the state slots (aux_index -1): the transfer info reaches P. */
	lc_receiver_pages_t old = pg;
	old.size = offsetof(lc_receiver_pages_t, aux_index);
	old.aux_index = 12345; /* past the caller's struct: not read */
	EXPECT(lc_receiver_send(r, &old) == 0, "send: \"%s\"", lc_last_error());
	lc__msg_t ti;
	bool got = adv_inbox_next(rx, LC__MSG_TRANSFER_INFO, WAIT_MS, &ti);
	EXPECT(got && ti.info.room == ROOM && ti.info.page_count == 2 && ti.info.pages[1] == 1 &&
		       !memcmp(ti.secret, reg->secret, LC__MSG_SECRET_LEN),
	       "no TRANSFER_INFO with the pages at P");
	if (got)
		lc__msg_free(&ti);
	EXPECT(lc_receiver_send(r, &pg) == LC_ERR_STATE && strstr(lc_last_error(), "already sent"),
	       "second send: \"%s\"", lc_last_error());
	/* A poll with an older, shorter info struct. */
	lc_room_info_t small = {.size = offsetof(lc_room_info_t, reason)};
	EXPECT(lc_receiver_poll(r, &small) == LC_ROOM_TRANSFERRING, "Transferring");
	char meta[8];
	EXPECT(lc_receiver_metadata(r, NULL, 4) == -EINVAL, "metadata into NULL");
	EXPECT(lc_receiver_metadata(r, meta, sizeof meta) == LC_ERR_STATE &&
		       strstr(lc_last_error(), "metadata is read after Success"),
	       "metadata before Success: \"%s\"", lc_last_error());
	EXPECT(lc_receiver_layers_ready(r) == 0, "layers before any landed");
	/* Cancel: Failed (cancelled) with D's words, and P told. */
	EXPECT(lc_receiver_cancel(r, "enough") == 0, "cancel");
	st = lc_receiver_poll(r, &info);
	EXPECT(st == LC_ROOM_FAILED && info.fail_reason == LC_FAIL_CANCELLED &&
		       strstr(info.reason, "enough"),
	       "cancelled: %s (%s) \"%s\"", lc_room_status_name(st),
	       lc_fail_reason_name(info.fail_reason), info.reason);
	lc__msg_t cm;
	got = adv_inbox_next(rx, LC__MSG_CANCEL, WAIT_MS, &cm);
	EXPECT(got && cm.cancel.room == ROOM, "no CANCEL at P");
	if (got)
		lc__msg_free(&cm);
	EXPECT(lc_receiver_cancel(r, "again") == LC_ERR_STATE, "a second cancel");
	/* NULL handles: refused, each naming what is NULL. */
	EXPECT(lc_receiver_cancel(NULL, "x") == -EINVAL, "cancel of NULL");
	EXPECT(lc_receiver_poll(NULL, &info) == -EINVAL, "poll of NULL");
	EXPECT(lc_receiver_metadata(NULL, NULL, 0) == -EINVAL &&
		       strstr(lc_last_error(), "receiver is NULL"),
	       "metadata of NULL");
	EXPECT(lc_receiver_send(NULL, &pg) == -EINVAL &&
		       strstr(lc_last_error(), "receiver is NULL"),
	       "send of NULL");
	EXPECT(lc_receiver_create(d, bs, 1, NULL) == -EINVAL &&
		       strstr(lc_last_error(), "out is NULL"),
	       "create into NULL");
	EXPECT(lc_receiver_create(NULL, bs, 1, &r2) == -EINVAL &&
		       strstr(lc_last_error(), "decode is NULL"),
	       "create on NULL");
	lc_receiver_destroy(NULL);
	/* A D keeps at most d_peers_max (256) bootstrap addresses that never
	 * answered it, and as many that did; past them a new one takes the
	 * place of one with no live room (two are known here: the fake P's,
	 * named by r, answered and has its place in the other half;
	 * 127.0.0.1:1 never answered): 300 addresses, each receiver destroyed
	 * before the next, are all taken, 45 forgotten for them
	 * (control.peers_evict has the refusal with every place named). */
	int made = 0, rc = 0;
	uint64_t ev0 = 0, ev = 0;
	lc_decode_counter(d, "peers_evicted", &ev0);
	for (int i = 0; i < 300 && !rc; i++) {
		char addr[64];
		snprintf(addr, sizeof addr, "127.0.%d.%d:1", 1 + i / 250, 1 + i % 250);
		rc = lc_receiver_create(d, addr, 1000 + (uint64_t)i, &r2);
		if (!rc) {
			made++;
			lc_receiver_destroy(r2);
		}
	}
	lc_decode_counter(d, "peers_evicted", &ev);
	EXPECT(rc == 0 && made == 300 && ev - ev0 == 45,
	       "peers: %d made, %llu forgotten, rc %d \"%s\"", made, (unsigned long long)(ev - ev0),
	       rc, lc_last_error());
	/* Counters and the endpoint, misused. */
	uint64_t v = 7;
	EXPECT(lc_decode_counter(NULL, "statuses", &v) == -EINVAL &&
		       strstr(lc_last_error(), "decode is NULL"),
	       "counter of NULL");
	EXPECT(lc_decode_counter(d, "statuses", NULL) == -EINVAL &&
		       strstr(lc_last_error(), "out is NULL"),
	       "counter into NULL");
	EXPECT(lc_decode_endpoint(d, NULL, 8) == -EINVAL && strstr(lc_last_error(), "buf is NULL"),
	       "endpoint into NULL");
	EXPECT(lc_decode_counter(d, "no_such_counter", &v) == -ENOENT &&
		       strstr(lc_last_error(), "no counter named 'no_such_counter'"),
	       "unknown counter: \"%s\"", lc_last_error());
	EXPECT(lc_decode_counter(d, NULL, &v) == -EINVAL && strstr(lc_last_error(), "name is NULL"),
	       "NULL name");
	EXPECT(lc_decode_counter(d, "inbox_conns_refused", &v) == 0 && v == 0,
	       "inbox_conns_refused");
	char ep[128];
	EXPECT(lc_decode_endpoint(NULL, ep, sizeof ep) == -EINVAL &&
		       strstr(lc_last_error(), "decode is NULL"),
	       "endpoint of NULL");
	EXPECT(lc_decode_endpoint(d, ep, 4) < 0, "endpoint into 4 bytes");
	EXPECT(lc_decode_endpoint(d, ep, sizeof ep) > 0 && !strncmp(ep, "tcp://127.0.0.1:", 16),
	       "endpoint %s", ep);
	(void)s;
}

int main(int argc, char **argv)
{
	tu_watchdog(100);
	if (argc != 2) {
		fprintf(stderr, "usage: %s case\n", argv[0]);
		return 2;
	}
	const char *c = argv[1];
	bool refused = !strcmp(c, "refused"), accepted = !strcmp(c, "accepted"),
	     silent = !strcmp(c, "silent"), unreachable = !strcmp(c, "unreachable"),
	     geometry = !strcmp(c, "geometry"), malformed = !strcmp(c, "rank_malformed"),
	     doomed = !strcmp(c, "doomed"), moved = !strcmp(c, "moved"),
	     hijack = !strcmp(c, "hijack"), api = !strcmp(c, "api"),
	     fpdiff = !strcmp(c, "fingerprint"), claims = !strcmp(c, "claims");
	if (!(refused || accepted || silent || unreachable || geometry || malformed || doomed ||
	      moved || hijack || api || fpdiff || claims)) {
		fprintf(stderr, "unknown case %s\n", c);
		return 2;
	}
	lc_log_set_handler(on_log, NULL);
	tu_pool_t s;
	tu_pool_init(&s, "d0",
		     silent || unreachable || moved || hijack ? "connect_timeout_ms=1500"
		     : malformed                              ? "bootstrap_timeout_ms=2000"
		     : claims ? "landed_wait_ms=200,waiting_timeout_ms=2000"
			      : NULL,
		     2, 8, 4096);
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = s.layout,
				 .regions = &s.region,
				 .region_count = 1,
				 .listen_url = "tcp://127.0.0.1:0",
				 .host = "127.0.0.1",
				 .tp_size = 1};
	lc_decode_t *d = NULL;
	if (api) {
		/* Parameters refused at create, each with its cause. */
		lc_decode_params_t bad = dp;
		bad.region_count = 100000;
		EXPECT(lc_decode_create(s.ctx, &bad, &d) == -EINVAL &&
			       strstr(lc_last_error(), "100000 regions, at most"),
		       "region_count: \"%s\"", lc_last_error());
		bad = dp;
		bad.tp_rank = 2;
		EXPECT(lc_decode_create(s.ctx, &bad, &d) == -EINVAL &&
			       strstr(lc_last_error(), "tp_rank 2 outside [0, tp_size 1)"),
		       "tp_rank: \"%s\"", lc_last_error());
		bad = dp;
		bad.listen_url = NULL;
		EXPECT(lc_decode_create(s.ctx, &bad, &d) == -EINVAL &&
			       strstr(lc_last_error(), "params->listen_url is required"),
		       "listen_url: \"%s\"", lc_last_error());
		EXPECT(lc_decode_create(s.ctx, &dp, NULL) == -EINVAL &&
			       strstr(lc_last_error(), "out is NULL"),
		       "out: \"%s\"", lc_last_error());
		bad = dp;
		bad.regions = NULL;
		EXPECT(lc_decode_create(s.ctx, &bad, &d) == -EINVAL &&
			       strstr(lc_last_error(), "params->regions is required"),
		       "regions: \"%s\"", lc_last_error());
		bad = dp;
		bad.tp_rank = -1;
		EXPECT(lc_decode_create(s.ctx, &bad, &d) == -EINVAL &&
			       strstr(lc_last_error(), "tp_rank -1 outside"),
		       "tp_rank -1: \"%s\"", lc_last_error());
		EXPECT(lc_decode_create(s.ctx, NULL, &d) == -EINVAL &&
			       strstr(lc_last_error(), "params is NULL"),
		       "NULL params: \"%s\"", lc_last_error());
		EXPECT(lc_decode_create(NULL, &dp, &d) == -EINVAL &&
			       strstr(lc_last_error(), "ctx is NULL"),
		       "NULL ctx: \"%s\"", lc_last_error());
		bad = dp;
		bad.listen_url = "tcp://127.0.0.1";
		EXPECT(lc_decode_create(s.ctx, &bad, &d) == -EINVAL &&
			       strstr(lc_last_error(), "missing port"),
		       "listen_url without port: \"%s\"", lc_last_error());
		EXPECT(d == NULL, "a decode written on failure");
	}
	int rc = lc_decode_create(s.ctx, &dp, &d);
	if (rc == LC_ENOTSUP || rc == LC_ERR_NO_TRANSPORT) {
		fprintf(stderr, "skip: %s\n", lc_strerror(rc));
		return TU_SKIP;
	}
	TU_OK(rc);

	void *zc = zmq_ctx_new();
	char inbox_ep[128];
	void *rx = inbox_bind(zc, inbox_ep, sizeof inbox_ep);
	int p_port = atoi(strrchr(inbox_ep, ':') + 1);
	if (unreachable)
		p_port = adv_loopback_port(NULL);
	adv_bs_start(&the_bs);
	char parallel_json[1024];
	unsigned long long fp = (unsigned long long)lc_layout_fingerprint(s.layout);
	if (geometry)
		snprintf(
			parallel_json, sizeof parallel_json,
			"{\"prefill_tp_size\":1,\"prefill_dp_size\":1,\"registered_ranks\":1,"
			"\"layers\":2,\"layout_fingerprint\":\"%016llx\",\"kv_item_lens\":[1,2,3]}",
			fp ^ 0x1234);
	else if (doomed)
		snprintf(parallel_json, sizeof parallel_json,
			 "{\"prefill_tp_size\":2,\"prefill_dp_size\":1,\"registered_ranks\":2,"
			 "\"layers\":2,\"layout_fingerprint\":\"%016llx\","
			 "\"kv_item_lens\":[3,3,3,3]}",
			 fp);
	else if (refused) /* an older P: no fingerprint (D checks nothing) */
		snprintf(parallel_json, sizeof parallel_json,
			 "{\"prefill_tp_size\":1,\"prefill_dp_size\":1,\"registered_ranks\":1}");
	else
		snprintf(parallel_json, sizeof parallel_json,
			 "{\"prefill_tp_size\":1,\"prefill_dp_size\":1,\"registered_ranks\":1,"
			 "\"layers\":2,\"layout_fingerprint\":\"%016llx\"}",
			 fpdiff ? fp ^ 0x1234 : fp);
	adv_bs_set(&the_bs, parallel_json, NULL);
	/* moved: the first route names a port where nothing listens; hijack:
	 * one where something listens that is no P (it never speaks ZMTP). */
	int alive_fd = -1;
	if (moved)
		set_rank("127.0.0.1", adv_loopback_port(NULL));
	else if (hijack)
		set_rank("127.0.0.1", adv_loopback_port(&alive_fd));
	else
		set_rank("127.0.0.1", p_port);
	if (malformed)
		adv_bs_set(&the_bs, NULL, "{\"rank_ip\":\"127.0.0.1\",\"rank_port\":0}");
	const char *bs = the_bs.addr;

	lc_receiver_t *r;
	TU_OK(lc_receiver_create(d, bs, ROOM, &r));
	lc_room_info_t info = {.size = sizeof info};
	lc__msg_t reg;
	bool got_reg = false;
	void *tx = NULL;

	if (moved || hijack) {
		/* The first route fails its room (nothing answers the REGISTER);
		 * the next room looks the rank up again and finds it changed. */
		int st = poll_past(r, LC_ROOM_BOOTSTRAPPING, &info);
		EXPECT(st == LC_ROOM_FAILED && info.fail_reason == LC_FAIL_BOOTSTRAP_TIMEOUT,
		       "first room: want Failed (bootstrap_timeout), got %s (%s) \"%s\"",
		       lc_room_status_name(st), lc_fail_reason_name(info.fail_reason), info.reason);
		lc_receiver_destroy(r);
		set_rank("127.0.0.1", p_port);
		TU_OK(lc_receiver_create(d, bs, ROOM + 1, &r));
		if (hijack) {
			/* The pinned endpoint still accepts: the new route is an
			 * impostor's, refused, nothing sent to it. */
			st = poll_past(r, LC_ROOM_BOOTSTRAPPING, &info);
			EXPECT(st == LC_ROOM_FAILED && info.fail_reason == LC_FAIL_BAD_INPUT &&
				       strstr(info.reason, "route changed during this D's session"),
			       "second room: want Failed (bad_input) \"route changed\", got %s "
			       "(%s) \"%s\"",
			       lc_room_status_name(st), lc_fail_reason_name(info.fail_reason),
			       info.reason);
			EXPECT(counter(d, "routes_refused") >= 1, "routes_refused not counted");
			EXPECT(log_has("refused since the last line"), "no error line");
			EXPECT(!adv_inbox_next(rx, LC__MSG_REGISTER, 300, &reg),
			       "D sent its REGISTER to the changed route");
			close(alive_fd);
			goto out;
		}
		got_reg = adv_inbox_next(rx, LC__MSG_REGISTER, WAIT_MS, &reg);
		TU_CHECK(got_reg, "no REGISTER from D at the moved P");
		EXPECT(counter(d, "routes_moved") == 1, "routes_moved not counted");
		EXPECT(log_has("moved from"), "no warning of the move");
		tx = adv_push_to(zc, reg.reg.status_ep);
		send_reply(tx, &reg, 0, 0, NULL, NULL);
		st = poll_past(r, LC_ROOM_BOOTSTRAPPING, &info);
		EXPECT(st == LC_ROOM_BOOTSTRAPPED, "moved: want Bootstrapped, got %s \"%s\"",
		       lc_room_status_name(st), info.reason);
		goto out;
	}

	if (malformed || silent || unreachable) {
		int st = poll_past(r, LC_ROOM_BOOTSTRAPPING, &info);
		EXPECT(st == LC_ROOM_FAILED && info.fail_reason == LC_FAIL_BOOTSTRAP_TIMEOUT,
		       "want Failed (bootstrap_timeout), got %s (%s)", lc_room_status_name(st),
		       lc_fail_reason_name(info.fail_reason));
		if (malformed)
			EXPECT(strstr(info.reason, "malformed reply"), "reason \"%s\"",
			       info.reason);
		else {
			EXPECT(counter(d, "registrations_unanswered") >= 1,
			       "registrations_unanswered not counted");
			EXPECT(strstr(info.reason, "P rank 0 at tcp://127.0.0.1:"), "reason \"%s\"",
			       info.reason);
			EXPECT(log_has("no registration reply within connect_timeout_ms (1500 ms)"),
			       "no error line naming connect_timeout_ms");
			EXPECT(!unreachable || strstr(info.reason, "cannot reach P rank 0"),
			       "reason \"%s\"", info.reason);
			EXPECT(!silent || strstr(info.reason, "cannot reach this D"),
			       "reason \"%s\"", info.reason);
		}
		if (unreachable) {
			/* The next room looks the rank up again; the same route
			 * (pinned, unchanged) is followed and fails the same way. */
			lc_receiver_destroy(r);
			TU_OK(lc_receiver_create(d, bs, ROOM + 1, &r));
			st = poll_past(r, LC_ROOM_BOOTSTRAPPING, &info);
			EXPECT(st == LC_ROOM_FAILED && strstr(info.reason, "cannot reach P rank 0"),
			       "second room: %s \"%s\"", lc_room_status_name(st), info.reason);
			EXPECT(counter(d, "routes_refused") == 0 && counter(d, "routes_moved") == 0,
			       "an unchanged route taken as a change");
		}
		goto out;
	}

	got_reg = adv_inbox_next(rx, LC__MSG_REGISTER, WAIT_MS, &reg);
	TU_CHECK(got_reg, "no REGISTER from D at the fake P");
	EXPECT(reg.reg.nbuffers == 4, "REGISTER with %u buffers", reg.reg.nbuffers);
	EXPECT(reg.reg.fingerprint == lc_layout_fingerprint(s.layout), "REGISTER fingerprint");
	EXPECT(!strncmp(reg.reg.status_ep, "tcp://127.0.0.1:", 16), "status_ep %s",
	       reg.reg.status_ep);
	tx = adv_push_to(zc, reg.reg.status_ep);

	if (geometry || fpdiff) {
		EXPECT(log_has("geometry differs from P") &&
			       log_has(geometry ? "buffer count differs"
						: "layout fingerprint differs"),
		       "no warning of the geometry");
		send_reply(tx, &reg, 0, LC_ERR_GEOMETRY, NULL, NULL);
		int st = poll_past(r, LC_ROOM_BOOTSTRAPPING, &info);
		EXPECT(st == LC_ROOM_FAILED && strstr(info.reason, "refused this D"),
		       "got %s \"%s\"", lc_room_status_name(st), info.reason);
		goto out;
	}

	if (api) {
		run_api(d, r, &s, bs, rx, tx, &reg);
		goto out;
	}
	if (claims) {
		run_claims(d, r, bs, rx, tx, &reg);
		goto out;
	}

	if (doomed) {
		/* One rank at a time: rank 1's REGISTER follows rank 0's reply. */
		lc__msg_t reg1;
		send_reply(tx, &reg, 0, 0, NULL, NULL);
		bool got1 = adv_inbox_next(rx, LC__MSG_REGISTER, WAIT_MS, &reg1);
		EXPECT(got1, "no REGISTER for P rank 1");
		if (got1) {
			send_reply(tx, &reg1, 1, 0, NULL, NULL);
			lc__msg_free(&reg1);
		}
		int st = poll_past(r, LC_ROOM_BOOTSTRAPPING, &info);
		EXPECT(st == LC_ROOM_FAILED && info.fail_reason == LC_FAIL_BAD_INPUT,
		       "want Failed (bad_input), got %s (%s) \"%s\"", lc_room_status_name(st),
		       lc_fail_reason_name(info.fail_reason), info.reason);
		lc__msg_t cm;
		bool cancel = adv_inbox_next(rx, LC__MSG_CANCEL, WAIT_MS, &cm);
		EXPECT(cancel && cm.cancel.room == ROOM, "no CANCEL of the room at P");
		if (cancel)
			lc__msg_free(&cm);
		goto out;
	}

	/* What no P sends, or not this P: each dropped and counted, the room
	 * untouched. */
	uint8_t wrong[LC__MSG_SECRET_LEN];
	memset(wrong, 0xa5, sizeof wrong);
	uint64_t malformed0 = counter(d, "msgs_malformed"), old0 = counter(d, "msgs_old_version"),
		 unexp0 = counter(d, "msgs_unexpected"), mism0 = counter(d, "session_mismatches");
	zmq_send(tx, "not a control message", 21, 0);
	uint8_t buf[64] = {0};
	size_t blen;
	{
		uint8_t *enc;
		lc__msg_t lm = {.type = LC__MSG_LAYERS};
		lm.layers.room = 99;
		lm.layers.layers = 1;
		TU_OK(lc__msg_encode(&lm, &enc, &blen));
		TU_CHECK(blen <= sizeof buf, "layers size");
		memcpy(buf, enc, blen);
		free(enc);
		buf[4] = LC__MSG_VERSION + 7; /* u16 version after the magic */
		zmq_send(tx, buf, blen, 0);
	}
	lc__msg_t ti = {.type = LC__MSG_TRANSFER_INFO};
	ti.info.room = ROOM;
	ti.info.required_dst = 1;
	snprintf(ti.info.session, sizeof ti.info.session, "x");
	snprintf(ti.info.status_ep, sizeof ti.info.status_ep, "%s", inbox_ep);
	adv_send_msg(tx, &ti, 0);
	send_reply(tx, &reg, 0, LC_ERR_GEOMETRY, "someone-else", NULL); /* another session */
	send_reply(tx, &reg, 0, LC_ERR_GEOMETRY, NULL, wrong);          /* no secret */
	send_reply(tx, &reg, 9, LC_ERR_GEOMETRY, NULL, NULL);           /* no such rank */
	send_status(tx, reg.secret, 12345, LC_ROOM_FAILED, LC_FAIL_TRANSFER, "unknown room");
	send_layers(tx, reg.secret, 12345, 1);
	EXPECT(counter_reaches(d, "msgs_malformed", malformed0 + 1), "garbage not counted");
	EXPECT(counter_reaches(d, "msgs_old_version", old0 + 1), "old version not counted");
	EXPECT(counter_reaches(d, "session_mismatches", mism0 + 1), "forged reply not counted");
	EXPECT(counter_reaches(d, "msgs_unexpected", unexp0 + 5), "unexpected ones not counted");
	EXPECT(log_has("control message version"), "no word on the version");
	int st = lc_receiver_poll(r, &info);
	EXPECT(st == LC_ROOM_BOOTSTRAPPING, "the room moved on forged messages: %s \"%s\"",
	       lc_room_status_name(st), info.reason);

	if (refused) {
		uint64_t ref0 = counter(d, "registrations_refused");
		send_reply(tx, &reg, 0, LC_ERR_GEOMETRY, NULL, NULL);
		st = poll_past(r, LC_ROOM_BOOTSTRAPPING, &info);
		EXPECT(st == LC_ROOM_FAILED && info.fail_reason == LC_FAIL_BAD_INPUT &&
			       strstr(info.reason, "P rank 0 refused this D: forged refusal"),
		       "want Failed (bad_input) \"refused this D\", got %s (%s) \"%s\"",
		       lc_room_status_name(st), lc_fail_reason_name(info.fail_reason), info.reason);
		EXPECT(counter_reaches(d, "registrations_refused", ref0 + 1),
		       "refusal not counted");
		lc__msg_t cm;
		bool cancel = adv_inbox_next(rx, LC__MSG_CANCEL, WAIT_MS, &cm);
		EXPECT(cancel && cm.cancel.room == ROOM &&
			       !memcmp(cm.secret, reg.secret, LC__MSG_SECRET_LEN),
		       "no CANCEL of the room with D's secret at P");
		if (cancel)
			lc__msg_free(&cm);
		/* A refusal never sticks: the next room waits a moment, then
		 * registers again, and an accepting P bootstraps it. */
		lc_receiver_destroy(r);
		TU_OK(lc_receiver_create(d, bs, ROOM + 1, &r));
		lc__msg_t again;
		bool got = adv_inbox_next(rx, LC__MSG_REGISTER, WAIT_MS, &again);
		EXPECT(got, "no second REGISTER after the refusal");
		if (got) {
			send_reply(tx, &again, 0, 0, NULL, NULL);
			st = poll_past(r, LC_ROOM_BOOTSTRAPPING, &info);
			EXPECT(st == LC_ROOM_BOOTSTRAPPED,
			       "after the refusal: want Bootstrapped, got %s \"%s\"",
			       lc_room_status_name(st), info.reason);
			lc__msg_free(&again);
		}
		goto out;
	}

	/* accepted */
	send_reply(tx, &reg, 0, 0, NULL, NULL);
	st = poll_past(r, LC_ROOM_BOOTSTRAPPING, &info);
	EXPECT(st == LC_ROOM_BOOTSTRAPPED, "want Bootstrapped, got %s \"%s\"",
	       lc_room_status_name(st), info.reason);
	unexp0 = counter(d, "msgs_unexpected");
	mism0 = counter(d, "session_mismatches");
	uint64_t lay0 = counter(d, "layer_updates");
	send_reply(tx, &reg, 0, 0, NULL, NULL); /* answers nothing outstanding */
	send_status(tx, reg.secret, ROOM, LC_ROOM_SUCCESS, 0, "");
	send_layers(tx, reg.secret, ROOM, 3); /* the layout has 2 */
	send_layers(tx, reg.secret, ROOM, 1);
	send_status(tx, wrong, ROOM, LC_ROOM_FAILED, LC_FAIL_TRANSFER, "forged");
	EXPECT(counter_reaches(d, "msgs_unexpected", unexp0 + 3), "unexpected ones not counted");
	EXPECT(counter_reaches(d, "session_mismatches", mism0 + 1), "forged status not counted");
	EXPECT(counter_reaches(d, "layer_updates", lay0 + 2), "layer updates not counted");
	EXPECT(log_has("before D sent its pages"), "no word on the early Success");
	st = lc_receiver_poll(r, &info);
	EXPECT(st == LC_ROOM_BOOTSTRAPPED, "the room moved on forged messages: %s \"%s\"",
	       lc_room_status_name(st), info.reason);
	EXPECT(lc_receiver_layers_ready(r) == 0, "P's layers believed");
	send_status(tx, reg.secret, ROOM, LC_ROOM_FAILED, LC_FAIL_SESSION_GONE, "gone away");
	st = poll_past(r, LC_ROOM_BOOTSTRAPPED, &info);
	EXPECT(st == LC_ROOM_FAILED && info.fail_reason == LC_FAIL_SESSION_GONE &&
		       strstr(info.reason, "P rank 0: gone away"),
	       "want Failed (session_gone) \"P rank 0: gone away\", got %s (%s) \"%s\"",
	       lc_room_status_name(st), lc_fail_reason_name(info.fail_reason), info.reason);
	/* P no longer knows the session: the next room registers again. A
	 * status of the final room is dropped; a Failed without a reason code
	 * is a transfer failure. */
	lc_receiver_t *r8;
	TU_OK(lc_receiver_create(d, bs, ROOM + 1, &r8));
	lc__msg_t again;
	bool got = adv_inbox_next(rx, LC__MSG_REGISTER, WAIT_MS, &again);
	EXPECT(got, "no second REGISTER after session_gone");
	if (got) {
		send_reply(tx, &again, 0, 0, NULL, NULL);
		st = poll_past(r8, LC_ROOM_BOOTSTRAPPING, &info);
		EXPECT(st == LC_ROOM_BOOTSTRAPPED, "room 8: want Bootstrapped, got %s \"%s\"",
		       lc_room_status_name(st), info.reason);
		unexp0 = counter(d, "msgs_unexpected");
		send_status(tx, again.secret, ROOM, LC_ROOM_FAILED, LC_FAIL_TRANSFER, "late");
		EXPECT(counter_reaches(d, "msgs_unexpected", unexp0 + 1),
		       "a status of a final room not counted");
		send_status(tx, again.secret, ROOM + 1, LC_ROOM_FAILED, 0, "no code");
		st = poll_past(r8, LC_ROOM_BOOTSTRAPPED, &info);
		EXPECT(st == LC_ROOM_FAILED && info.fail_reason == LC_FAIL_TRANSFER &&
			       strstr(info.reason, "P rank 0: no code"),
		       "room 8: want Failed (transfer), got %s (%s) \"%s\"",
		       lc_room_status_name(st), lc_fail_reason_name(info.fail_reason), info.reason);
		lc__msg_free(&again);
	}
	lc_receiver_destroy(r8);

out:
	int last = lc_receiver_poll(r, &info);
	fprintf(stderr, "%s: %s (%s) \"%s\"\n", c, lc_room_status_name(last),
		lc_fail_reason_name(info.fail_reason), info.reason);
	if (failures) {
		pthread_mutex_lock(&log_lock);
		fprintf(stderr, "log:\n%s", log_text);
		pthread_mutex_unlock(&log_lock);
	}
	if (got_reg)
		lc__msg_free(&reg);
	lc_receiver_destroy(r);
	lc_decode_destroy(d);
	if (tx)
		zmq_close(tx);
	zmq_close(rx);
	zmq_ctx_term(zc);
	adv_bs_stop(&the_bs);
	tu_pool_fini(&s);
	lc_log_set_handler(NULL, NULL);
	fprintf(stderr, "%s\n", failures ? "FAIL" : "ok");
	return failures ? 1 : 0;
}
