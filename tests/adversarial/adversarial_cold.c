/*
 * P's control plane on its cold paths: a real P rank (its bootstrap server,
 * its ZeroMQ control socket on 127.0.0.1) and a D that speaks the wire by
 * hand with the real codec, sending what an honest D never does. Every
 * refusal must reach the sender with its cause (a REGISTER_REPLY or a
 * STATUS on its own endpoint), be counted, and leave P serving.
 *
 *     adversarial_cold <case>
 *
 *   register_refused  a zero secret, and each way a geometry can differ
 *                     (buffer count, item_len, layer, kind, fingerprint, a
 *                     TP split that does not divide), a data URL the engine
 *                     cannot use: each refused with its reason; a TP split
 *                     that pairs (D TP 2) is taken
 *   sessions_full     p_sessions_max=2: a third session evicts the idle one
 *                     with the oldest activity; with every session holding a
 *                     live room a newcomer is refused (-ENOSPC); the same
 *                     secret from a new status endpoint refreshes it there
 *   infos             a transfer info of an unregistered session is answered
 *                     with a Failed STATUS (session_gone); a dummy for an
 *                     unknown room is refused and counted, for a known room
 *                     taken; a repeated info is refused by the engine and
 *                     not answered (the room goes on for the first), another
 *                     session's for the claimed room refused and that D told
 *                     (bad_input) on its own channel; a registered dummy for
 *                     a room without a sender is parked until one comes
 *   cancels           a registered D cancels a room no destination claimed
 *                     (the room fails at once with D's reason), a room of
 *                     another session (refused, counted) and its own room
 *   garbage           bytes that are no message, and messages P never takes
 *                     (STATUS, REGISTER_REPLY): dropped and counted
 *   bad_endpoint      a D whose status endpoint P cannot connect to: a refusal
 *                     goes nowhere (counted), an accepted session has no
 *                     channel, and a refused transfer info of it is answered
 *                     on the info's own endpoint instead
 *
 * Exit 0 pass, 1 fail, 77 skipped.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zmq.h>

#include "control/codec.h"
#include "core/layout.h"
#include "forge.h"
#include "harness.h"
#include "rooms.h"
#include "rounds.h"
#include "testutil.h"

static uint64_t seed_of(int k, int page)
{
	return adv_seed_of(k, page);
}

typedef struct world {
	adv_p_t P;
	void *zc, *tx, *rx;
	char inbox[LC__MSG_STR_MAX];
	sink_t sink;
	tu_pool_t d; /* D's pool, for its geometry and region descriptor */
	uint8_t desc[LC_REGION_DESC_MAX];
	size_t dlen;
} world_t;

static void world_up(world_t *w, const char *knobs)
{
	memset(w, 0, sizeof *w);
	adv_p_up(&w->P, knobs, seed_of);
	w->zc = zmq_ctx_new();
	w->tx = forge_push(w->zc, w->P.ep, NULL);
	w->rx = forge_inbox(w->zc, NULL, w->inbox, sizeof w->inbox);
	sink_start(&w->sink);
	tu_pool_init(&w->d, "d", NULL, LAYERS, PAGES, ITEM);
	int n = lc_region_pack(w->d.region, w->desc, sizeof w->desc);
	TU_CHECK(n > 0, "lc_region_pack: %d", n);
	w->dlen = (size_t)n;
}

static void world_down(world_t *w)
{
	zmq_close(w->tx);
	zmq_close(w->rx);
	zmq_ctx_term(w->zc);
	sink_stop(&w->sink);
	tu_pool_fini(&w->d);
	adv_p_down(&w->P);
}

static uint64_t p_ctl(world_t *w, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_prefill_counter(w->P.pf, name, &v));
	return v;
}

static uint64_t p_ctx(world_t *w, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_ctx_counter_by_name(w->P.s.ctx, name, &v));
	return v;
}

/* P's control thread has counted `name` up to want, within 10 s. */
static void await_ctl(world_t *w, const char *name, uint64_t want)
{
	uint64_t got = 0;
	for (uint64_t dl = adv_now_ms() + 10000; adv_now_ms() < dl; usleep(5000))
		if ((got = p_ctl(w, name)) >= want)
			return;
	TU_CHECK(got >= want, "P counted %llu %s, expected %llu", (unsigned long long)got, name,
		 (unsigned long long)want);
}

/* The next message of type `type` at the inbox within 10 s (others are
 * dropped); false at the deadline. */
static bool next_msg(void *rx, int type, lc__msg_t *out)
{
	for (uint64_t dl = adv_now_ms() + 10000; adv_now_ms() < dl;) {
		zmq_pollitem_t it = {.socket = rx, .events = ZMQ_POLLIN};
		if (zmq_poll(&it, 1, 20) <= 0)
			continue;
		zmq_msg_t zm;
		zmq_msg_init(&zm);
		if (zmq_msg_recv(&zm, rx, 0) < 0) {
			zmq_msg_close(&zm);
			continue;
		}
		int rc = lc__msg_decode(zmq_msg_data(&zm), zmq_msg_size(&zm), out, NULL, 0);
		zmq_msg_close(&zm);
		if (rc)
			continue;
		if (out->type == type)
			return true;
		lc__msg_free(out);
	}
	return false;
}

/* No message of that type comes within ms (a refusal P must not answer). */
static bool no_msg(void *rx, int type, int ms)
{
	lc__msg_t m;
	for (uint64_t dl = adv_now_ms() + (uint64_t)ms; adv_now_ms() < dl;) {
		zmq_pollitem_t it = {.socket = rx, .events = ZMQ_POLLIN};
		if (zmq_poll(&it, 1, 20) <= 0)
			continue;
		zmq_msg_t zm;
		zmq_msg_init(&zm);
		if (zmq_msg_recv(&zm, rx, 0) < 0) {
			zmq_msg_close(&zm);
			continue;
		}
		int rc = lc__msg_decode(zmq_msg_data(&zm), zmq_msg_size(&zm), &m, NULL, 0);
		zmq_msg_close(&zm);
		if (rc)
			continue;
		bool hit = m.type == type;
		lc__msg_free(&m);
		if (hit)
			return false;
	}
	return true;
}

enum change {
	OK,
	ZERO_SECRET,
	FEWER_BUFFERS,
	ITEM_LEN,
	LAYER,
	KIND,
	FINGERPRINT,
	TP_PAIRS,    /* D TP 2, rank 0: half of every page */
	TP_NO_PAIR,  /* D TP 2 with a third of a page: no pairing */
	BAD_DATA_URL /* a scheme no transport has */
};

/* A REGISTER of `session` with D's geometry changed by `ch`, answering to
 * status_ep. */
static void send_register(world_t *w, const char *session, const char *status_ep,
			  const uint8_t *secret, enum change ch)
{
	lc__msg_buffer_t bufs[NBUF];
	const void *descs[1] = {w->desc};
	size_t lens[1] = {w->dlen};
	const lc_layout_t *l = w->d.layout;
	lc__msg_t m;
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_REGISTER;
	if (ch != ZERO_SECRET)
		memcpy(m.secret, secret, LC__MSG_SECRET_LEN);
	snprintf(m.reg.session, sizeof m.reg.session, "%s", session);
	snprintf(m.reg.status_ep, sizeof m.reg.status_ep, "%s", status_ep);
	snprintf(m.reg.data_url, sizeof m.reg.data_url, "%s",
		 ch == BAD_DATA_URL ? "nosuchscheme://127.0.0.1:1" : w->sink.url);
	m.reg.flags = LC__REG_HAS_TOKEN;
	m.reg.fingerprint = l->fingerprint + (ch == FINGERPRINT);
	for (uint32_t i = 0; i < l->nbuf; i++) {
		const lc_buffer_t *b = &l->bufs[i];
		bufs[i] = (lc__msg_buffer_t){
			.layer = b->layer,
			.kind = b->kind,
			.flags = b->flags,
			.item_len = b->item_len,
			.offset = (uint64_t)((uint8_t *)w->d.bases[i] - w->d.mem)};
	}
	m.reg.nbuffers = l->nbuf - (ch == FEWER_BUFFERS);
	if (ch == ITEM_LEN)
		bufs[3].item_len *= 2;
	if (ch == LAYER)
		bufs[5].layer++;
	if (ch == KIND)
		bufs[2].kind = bufs[2].kind == LC_BUFFER_K ? LC_BUFFER_V : LC_BUFFER_K;
	if (ch == TP_PAIRS || ch == TP_NO_PAIR) {
		m.reg.flags |= LC__REG_HAS_TP;
		m.reg.d_tp = 2;
		m.reg.d_rank = 0;
		m.reg.fingerprint ^= 0x5555; /* another TP's layout */
		for (uint32_t i = 0; i < l->nbuf; i++)
			bufs[i].item_len = ch == TP_PAIRS ? ITEM / 2 : ITEM / 3;
	}
	m.reg.buffers = bufs;
	m.reg.nregions = 1;
	m.reg.region_descs = descs;
	m.reg.region_desc_lens = lens;
	adv_send_msg(w->tx, &m, 0);
}

/* P's answer to one REGISTER: its result, and its reason to why. */
static int32_t reply_of(void *rx, char *why, size_t cap)
{
	lc__msg_t m;
	TU_CHECK(next_msg(rx, LC__MSG_REGISTER_REPLY, &m), "no REGISTER_REPLY within 10 s");
	int32_t rc = m.reply.result;
	snprintf(why, cap, "%s", m.reply.reason);
	lc__msg_free(&m);
	fprintf(stderr, "reply: %s %s\n", lc_err_name(rc), why);
	return rc;
}

static void expect_reply(world_t *w, const char *session, enum change ch, int32_t want,
			 const char *words)
{
	uint8_t secret[LC__MSG_SECRET_LEN];
	char why[LC__MSG_STR_MAX];
	guess(secret, 100 + (uint64_t)ch);
	send_register(w, session, w->inbox, secret, ch);
	int32_t rc = reply_of(w->rx, why, sizeof why);
	TU_CHECK(rc == want && (!words || strstr(why, words)),
		 "change %d: %s (%s), expected %s with \"%s\"", ch, lc_err_name(rc), why,
		 lc_err_name(want), words ? words : "");
}

static void case_register_refused(void)
{
	world_t w;
	world_up(&w, NULL);
	static const struct {
		enum change ch;
		int32_t want;
		const char *words;
	} t[] = {
		{ZERO_SECRET, LC_ERR_AUTH, "no session secret"},
		{FEWER_BUFFERS, LC_ERR_GEOMETRY, "buffer count differs"},
		{ITEM_LEN, LC_ERR_GEOMETRY, "item_len differs"},
		{LAYER, LC_ERR_GEOMETRY, "buffer 5 differs"},
		{KIND, LC_ERR_GEOMETRY, "buffer 2 differs"},
		{FINGERPRINT, LC_ERR_GEOMETRY, "fingerprint differs"},
		{TP_NO_PAIR, LC_ERR_GEOMETRY, NULL},
		{BAD_DATA_URL, 0, "session refused by the engine"},
	};
	size_t refused = 0;
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		char session[32];
		snprintf(session, sizeof session, "cold-%zu", i);
		/* The engine's own code for a URL no transport takes. */
		int32_t want = t[i].want;
		if (t[i].ch == BAD_DATA_URL) {
			uint8_t secret[LC__MSG_SECRET_LEN];
			char why[LC__MSG_STR_MAX];
			guess(secret, 7);
			send_register(&w, session, w.inbox, secret, BAD_DATA_URL);
			int32_t rc = reply_of(w.rx, why, sizeof why);
			TU_CHECK(rc != 0 && strstr(why, t[i].words), "bad data URL: %s (%s)",
				 lc_err_name(rc), why);
		} else {
			expect_reply(&w, session, t[i].ch, want, t[i].words);
		}
		refused++;
	}
	TU_CHECK(p_ctl(&w, "registrations_refused") == refused, "P counted %llu refusals",
		 (unsigned long long)p_ctl(&w, "registrations_refused"));
	/* D at TP 2, rank 0: half of every P page pairs; taken. */
	expect_reply(&w, "cold-tp", TP_PAIRS, 0, NULL);
	expect_reply(&w, "cold-ok", OK, 0, NULL);
	world_down(&w);
}

/* A transfer info of session/secret for room, D's pages 0..NPAGES-1. */
static void send_info(world_t *w, const char *session, const uint8_t *secret, uint64_t room,
		      bool dummy, uint32_t required)
{
	int64_t pages[NPAGES];
	for (int j = 0; j < NPAGES; j++)
		pages[j] = j;
	lc__msg_t m;
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_TRANSFER_INFO;
	memcpy(m.secret, secret, LC__MSG_SECRET_LEN);
	m.info.room = room;
	snprintf(m.info.session, sizeof m.info.session, "%s", session);
	snprintf(m.info.status_ep, sizeof m.info.status_ep, "%s", w->inbox);
	m.info.required_dst = required;
	m.info.aux_index = -1;
	m.info.prefix_len = 16;
	if (dummy) {
		m.info.flags = LC__INFO_DUMMY;
	} else {
		m.info.page_count = NPAGES;
		m.info.pages = pages;
	}
	adv_send_msg(w->tx, &m, 0);
}

static void send_cancel(world_t *w, const char *session, const uint8_t *secret, uint64_t room)
{
	lc__msg_t m;
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_CANCEL;
	memcpy(m.secret, secret, LC__MSG_SECRET_LEN);
	m.cancel.room = room;
	snprintf(m.cancel.session, sizeof m.cancel.session, "%s", session);
	snprintf(m.cancel.reason, sizeof m.cancel.reason, "out of pages");
	adv_send_msg(w->tx, &m, 0);
}

/* Register session with secret (seed); asserts it is taken. */
static void register_ok(world_t *w, const char *session, uint64_t seed, const char *status_ep,
			void *rx)
{
	uint8_t secret[LC__MSG_SECRET_LEN];
	char why[LC__MSG_STR_MAX];
	guess(secret, seed);
	send_register(w, session, status_ep, secret, OK);
	int32_t rc = reply_of(rx, why, sizeof why);
	TU_CHECK(rc == 0, "%s refused: %s (%s)", session, lc_err_name(rc), why);
}

/* The room's destination count at P reaches want within 10 s. */
static void await_dsts(world_t *w, uint64_t room, uint32_t want)
{
	lc_room_info_t info = {.size = sizeof info};
	for (uint64_t dl = adv_now_ms() + 10000; adv_now_ms() < dl; usleep(5000))
		if (!lc_engine_room_status(w->P.eng, room, &info) && info.dst_count >= want)
			return;
	TU_CHECK(info.dst_count >= want, "room %llu has %u destinations, expected %u",
		 (unsigned long long)room, info.dst_count, want);
}

static void case_sessions_full(void)
{
	world_t w;
	world_up(&w, "p_sessions_max=2,p_session_grace_ms=0"); /* recent ones may go */
	register_ok(&w, "cold-a", 1, w.inbox, w.rx);
	register_ok(&w, "cold-b", 2, w.inbox, w.rx);
	/* b is the more recently active: a goes. */
	uint8_t sb[LC__MSG_SECRET_LEN], sc[LC__MSG_SECRET_LEN];
	guess(sb, 2);
	guess(sc, 3);
	lc_sender_t *s1, *s2;
	TU_OK(lc_sender_create(w.P.pf, 11, &s1));
	send_info(&w, "cold-b", sb, 11, false, 1);
	await_dsts(&w, 11, 1);
	lc_sender_destroy(s1); /* b's room ends: idle again, but active later than a */
	register_ok(&w, "cold-c", 3, w.inbox, w.rx);
	TU_CHECK(p_ctx(&w, "sessions_evicted") == 1, "evicted %llu",
		 (unsigned long long)p_ctx(&w, "sessions_evicted"));
	/* a is gone: its info is answered "not registered"; b still works. */
	uint8_t sa[LC__MSG_SECRET_LEN];
	guess(sa, 1);
	send_info(&w, "cold-a", sa, 12, false, 1);
	lc__msg_t m;
	/* Room 11's own end (its sender went above) may come first: every
	 * session here shares one inbox. */
	bool got;
	while ((got = next_msg(w.rx, LC__MSG_STATUS, &m)) && m.status.room == 11)
		lc__msg_free(&m);
	TU_CHECK(got, "no STATUS for the evicted session");
	TU_CHECK(m.status.room == 12 && m.status.status == LC_ROOM_FAILED &&
			 m.status.fail_reason == LC_FAIL_SESSION_GONE,
		 "status of room 12: %u (%s)", m.status.fail_reason, m.status.reason);
	lc__msg_free(&m);
	/* b and c each hold a live room: a newcomer is refused. */
	TU_OK(lc_sender_create(w.P.pf, 21, &s1));
	TU_OK(lc_sender_create(w.P.pf, 22, &s2));
	send_info(&w, "cold-b", sb, 21, false, 1);
	send_info(&w, "cold-c", sc, 22, false, 1);
	await_dsts(&w, 21, 1);
	await_dsts(&w, 22, 1);
	char why[LC__MSG_STR_MAX];
	uint8_t sd[LC__MSG_SECRET_LEN];
	guess(sd, 4);
	send_register(&w, "cold-d", w.inbox, sd, OK);
	int32_t rc = reply_of(w.rx, why, sizeof why);
	TU_CHECK(rc == -ENOSPC && strstr(why, "live"), "a fifth session: %s (%s)", lc_err_name(rc),
		 why);
	TU_CHECK(p_ctx(&w, "sessions_refused_full") == 1, "refused_full %llu",
		 (unsigned long long)p_ctx(&w, "sessions_refused_full"));
	/* c again with its secret, from a new status endpoint: refreshed (no
	 * room needed), answered there. */
	char inbox2[LC__MSG_STR_MAX];
	void *rx2 = forge_inbox(w.zc, NULL, inbox2, sizeof inbox2);
	register_ok(&w, "cold-c", 3, inbox2, rx2);
	zmq_close(rx2);
	lc_sender_destroy(s1);
	lc_sender_destroy(s2);
	world_down(&w);
}

static void case_infos(void)
{
	world_t w;
	world_up(&w, NULL);
	uint8_t ghost[LC__MSG_SECRET_LEN], sa[LC__MSG_SECRET_LEN];
	guess(ghost, 99);
	lc__msg_t m;
	/* 1. Unregistered, not a dummy: dropped unanswered (P sends nothing to
	 * an endpoint no registered session named; issue 21, finding 7). */
	send_info(&w, "cold-ghost", ghost, 31, false, 1);
	await_ctl(&w, "transfer_infos", 1);
	TU_CHECK(no_msg(w.rx, LC__MSG_STATUS, 500), "a STATUS for an unregistered session");
	TU_CHECK(p_ctx(&w, "infos_refused_unregistered") == 1, "infos_refused_unregistered %llu",
		 (unsigned long long)p_ctx(&w, "infos_refused_unregistered"));
	/* 2. Unregistered dummy for a room P has no sender for: refused. */
	uint64_t before = p_ctx(&w, "infos_refused_unknown");
	send_info(&w, "cold-ghost", ghost, 32, true, 2);
	await_ctl(&w, "transfer_infos", 2);
	for (uint64_t dl = adv_now_ms() + 5000;
	     p_ctx(&w, "infos_refused_unknown") == before && adv_now_ms() < dl;)
		usleep(5000);
	TU_CHECK(p_ctx(&w, "infos_refused_unknown") == before + 1, "dummy not refused");
	TU_CHECK(lc_engine_room_status(
			 w.P.eng, 32, &(lc_room_info_t){.size = sizeof(lc_room_info_t)}) == -ENOENT,
		 "a refused dummy opened room 32");
	/* 3. The same for a room P has a sender for: taken. */
	lc_sender_t *s;
	TU_OK(lc_sender_create(w.P.pf, 33, &s));
	send_info(&w, "cold-ghost", ghost, 33, true, 2);
	await_dsts(&w, 33, 1);
	/* 4. A registered session's info twice: the second is refused by the
	 * engine, counted, and not answered (a Failed STATUS would fail at D
	 * the room P goes on serving for the first). Another session's info
	 * for the room, which has every destination: refused, and that D told
	 * on its own channel. */
	register_ok(&w, "cold-a", 5, w.inbox, w.rx);
	guess(sa, 5);
	send_info(&w, "cold-a", sa, 33, false, 2);
	await_dsts(&w, 33, 2);
	uint64_t claimed = p_ctx(&w, "infos_refused_claimed");
	send_info(&w, "cold-a", sa, 33, false, 2);
	for (uint64_t dl = adv_now_ms() + 5000;
	     p_ctx(&w, "infos_refused_claimed") == claimed && adv_now_ms() < dl;)
		usleep(5000);
	TU_CHECK(p_ctx(&w, "infos_refused_claimed") == claimed + 1, "the repeat not refused");
	TU_CHECK(no_msg(w.rx, LC__MSG_STATUS, 300), "a STATUS for a repeat");
	uint8_t sb[LC__MSG_SECRET_LEN];
	register_ok(&w, "cold-b", 6, w.inbox, w.rx);
	guess(sb, 6);
	send_info(&w, "cold-b", sb, 33, false, 2);
	TU_CHECK(next_msg(w.rx, LC__MSG_STATUS, &m), "no STATUS for a refused info");
	TU_CHECK(m.status.room == 33 && m.status.fail_reason == LC_FAIL_BAD_INPUT &&
			 strstr(m.status.reason, "transfer info refused by P rank 0") &&
			 strstr(m.status.reason, "claimed"),
		 "status %u (%s)", m.status.fail_reason, m.status.reason);
	lc__msg_free(&m);
	TU_CHECK(p_ctx(&w, "infos_refused_claimed") == claimed + 2, "claimed %llu",
		 (unsigned long long)p_ctx(&w, "infos_refused_claimed"));
	/* 5. A dummy from a registered session for a room without a sender:
	 * parked (no engine room), taken once the sender comes. */
	uint64_t parked = p_ctx(&w, "infos_parked");
	send_info(&w, "cold-a", sa, 34, true, 1);
	for (uint64_t dl = adv_now_ms() + 5000;
	     p_ctx(&w, "infos_parked") == parked && adv_now_ms() < dl;)
		usleep(5000);
	TU_CHECK(p_ctx(&w, "infos_parked") == parked + 1, "the dummy not parked");
	TU_CHECK(lc_engine_room_status(
			 w.P.eng, 34, &(lc_room_info_t){.size = sizeof(lc_room_info_t)}) == -ENOENT,
		 "a parked dummy opened room 34");
	lc_sender_t *s34;
	TU_OK(lc_sender_create(w.P.pf, 34, &s34));
	await_dsts(&w, 34, 1);
	lc_sender_destroy(s34);
	lc_sender_destroy(s);
	world_down(&w);
}

static void case_cancels(void)
{
	world_t w;
	world_up(&w, NULL);
	uint8_t sa[LC__MSG_SECRET_LEN], sb[LC__MSG_SECRET_LEN], ghost[LC__MSG_SECRET_LEN];
	guess(sa, 1);
	guess(sb, 2);
	guess(ghost, 3);
	register_ok(&w, "cold-a", 1, w.inbox, w.rx);
	register_ok(&w, "cold-b", 2, w.inbox, w.rx);
	lc_sender_t *s41, *s42, *s43;
	TU_OK(lc_sender_create(w.P.pf, 41, &s41));
	TU_OK(lc_sender_create(w.P.pf, 42, &s42));
	TU_OK(lc_sender_create(w.P.pf, 43, &s43));
	/* 1. a refuses room 41 before any info: P fails it at once. */
	send_cancel(&w, "cold-a", sa, 41);
	lc_room_info_t info = {.size = sizeof info};
	int st = LC_ROOM_BOOTSTRAPPING;
	for (uint64_t dl = adv_now_ms() + 10000;
	     (st = lc_sender_poll(s41, &info)) == LC_ROOM_BOOTSTRAPPING && adv_now_ms() < dl;)
		usleep(5000);
	TU_CHECK(st == LC_ROOM_FAILED && strstr(info.reason, "refused the room") &&
			 strstr(info.reason, "out of pages"),
		 "room 41: %s (%s)", lc_room_status_name(st), info.reason);
	/* 2. b's room 42: a may not cancel it. */
	send_info(&w, "cold-b", sb, 42, false, 1);
	await_dsts(&w, 42, 1);
	uint64_t refused = p_ctl(&w, "cancels");
	send_cancel(&w, "cold-a", sa, 42);
	send_cancel(&w, "cold-ghost", ghost, 42);
	await_ctl(&w, "cancels", refused + 2);
	uint64_t n = 0;
	for (uint64_t dl = adv_now_ms() + 5000; adv_now_ms() < dl; usleep(5000))
		if (!lc_prefill_counter(w.P.pf, "cancels_refused", &n) && n >= 2)
			break;
	TU_CHECK(n == 2, "cancels_refused %llu", (unsigned long long)n);
	TU_CHECK(lc_sender_poll(s42, NULL) == LC_ROOM_BOOTSTRAPPED, "room 42 was cancelled");
	/* 3. a cancels its own room 43. */
	send_info(&w, "cold-a", sa, 43, false, 1);
	await_dsts(&w, 43, 1);
	send_cancel(&w, "cold-a", sa, 43);
	for (uint64_t dl = adv_now_ms() + 10000;
	     (st = lc_sender_poll(s43, &info)) != LC_ROOM_FAILED && adv_now_ms() < dl;)
		usleep(5000);
	TU_CHECK(st == LC_ROOM_FAILED && info.fail_reason == LC_FAIL_CANCELLED, "room 43: %s (%s)",
		 lc_room_status_name(st), info.reason);
	lc_sender_destroy(s41);
	lc_sender_destroy(s42);
	lc_sender_destroy(s43);
	world_down(&w);
}

static void case_garbage(void)
{
	world_t w;
	world_up(&w, NULL);
	static const char junk[] = "GET / HTTP/1.1\r\n\r\n"; /* no magic: not any version */
	zmq_send(w.tx, junk, sizeof junk - 1, 0);
	lc__msg_t m;
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_STATUS;
	guess(m.secret, 1);
	m.status.room = 5;
	m.status.status = LC_ROOM_FAILED;
	m.status.fail_reason = LC_FAIL_TRANSFER;
	adv_send_msg(w.tx, &m, 0);
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_REGISTER_REPLY;
	guess(m.secret, 1);
	snprintf(m.reply.session, sizeof m.reply.session, "cold");
	adv_send_msg(w.tx, &m, 0);
	await_ctl(&w, "msgs_received", 3);
	await_ctl(&w, "msgs_malformed", 1);
	await_ctl(&w, "msgs_unexpected", 2);
	/* P still serves. */
	register_ok(&w, "cold-a", 1, w.inbox, w.rx);
	world_down(&w);
}

static void case_bad_endpoint(void)
{
	world_t w;
	world_up(&w, NULL);
	static const char nowhere[] = "tcp://127.0.0.1"; /* no port: zmq_connect refuses it */
	uint8_t secret[LC__MSG_SECRET_LEN];
	guess(secret, 8);
	/* 1. Refused, and the refusal cannot be delivered. */
	send_register(&w, "cold-noep", nowhere, secret, ZERO_SECRET);
	await_ctl(&w, "registrations_refused", 1);
	/* 2. Accepted, but P has no channel to it: no reply. */
	send_register(&w, "cold-noep", nowhere, secret, OK);
	await_ctl(&w, "registrations", 2);
	TU_CHECK(p_ctl(&w, "registrations_refused") == 1, "the second REGISTER was refused");
	/* 3. Its info twice for room 51: the second one is refused, and the
	 * refusal goes nowhere (P answers only at the session's own status
	 * endpoint, which it cannot reach; never at one an info names). */
	lc_sender_t *snd;
	TU_OK(lc_sender_create(w.P.pf, 51, &snd));
	send_info(&w, "cold-noep", secret, 51, false, 1);
	await_dsts(&w, 51, 1);
	send_info(&w, "cold-noep", secret, 51, false, 1);
	await_ctl(&w, "transfer_infos", 2);
	TU_CHECK(no_msg(w.rx, LC__MSG_STATUS, 500), "a STATUS at the info's own endpoint");
	lc_sender_destroy(snd);
	/* P still serves. */
	register_ok(&w, "cold-a", 1, w.inbox, w.rx);
	world_down(&w);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: adversarial_cold <case>\n");
		return 2;
	}
	tu_watchdog(100);
	if (!tu_transport_built("tcp")) {
		fprintf(stderr, "skip: no tcp transport\n");
		return TU_SKIP;
	}
	const char *n = argv[1];
	if (!strcmp(n, "register_refused"))
		case_register_refused();
	else if (!strcmp(n, "sessions_full"))
		case_sessions_full();
	else if (!strcmp(n, "infos"))
		case_infos();
	else if (!strcmp(n, "cancels"))
		case_cancels();
	else if (!strcmp(n, "garbage"))
		case_garbage();
	else if (!strcmp(n, "bad_endpoint"))
		case_bad_endpoint();
	else {
		fprintf(stderr, "unknown case %s\n", n);
		return 2;
	}
	printf("adversarial_cold %s: ok\n", n);
	return 0;
}
