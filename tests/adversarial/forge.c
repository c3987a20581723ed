/* The attacker of the sessions cases (forge.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <zmq.h>

#include "core/layout.h"
#include "forge.h"
#include "harness.h"
#include "rooms.h"
#include "testutil.h"

static void *sink_main(void *arg)
{
	sink_t *k = arg;
	int conns[64], n = 0;
	while (!atomic_load(&k->stop)) {
		fd_set fds;
		FD_ZERO(&fds);
		FD_SET(k->fd, &fds);
		int top = k->fd;
		for (int i = 0; i < n; i++) {
			FD_SET(conns[i], &fds);
			top = conns[i] > top ? conns[i] : top;
		}
		struct timeval tv = {0, 20000};
		if (select(top + 1, &fds, NULL, NULL, &tv) <= 0)
			continue;
		if (FD_ISSET(k->fd, &fds) && n < 64) {
			int c = accept(k->fd, NULL, NULL);
			if (c >= 0)
				conns[n++] = c;
		}
		for (int i = 0; i < n; i++) {
			char buf[4096];
			ssize_t got;
			if (FD_ISSET(conns[i], &fds) && (got = read(conns[i], buf, sizeof buf)) > 0)
				atomic_fetch_add(&k->bytes, (uint64_t)got);
		}
	}
	for (int i = 0; i < n; i++)
		close(conns[i]);
	return NULL;
}

void sink_start(sink_t *k)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof a;
	memset(k, 0, sizeof *k);
	k->fd = socket(AF_INET, SOCK_STREAM, 0);
	TU_CHECK(k->fd >= 0 && bind(k->fd, (struct sockaddr *)&a, sizeof a) == 0 &&
			 listen(k->fd, 64) == 0 &&
			 getsockname(k->fd, (struct sockaddr *)&a, &alen) == 0,
		 "sink: %s", strerror(errno));
	snprintf(k->url, sizeof k->url, "tcp://127.0.0.1:%d", ntohs(a.sin_port));
	TU_CHECK(pthread_create(&k->th, NULL, sink_main, k) == 0, "sink thread");
}

uint64_t sink_stop(sink_t *k)
{
	atomic_store(&k->stop, true);
	pthread_join(k->th, NULL);
	close(k->fd);
	uint64_t n = atomic_load(&k->bytes);
	fprintf(stderr, "attacker's data listener got %llu bytes\n", (unsigned long long)n);
	return n;
}

static void curve_client(void *s, const keys_t *k)
{
	if (!k)
		return;
	TU_CHECK(!zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, k->server, 40) &&
			 !zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, k->pub, 40) &&
			 !zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, k->sec, 40),
		 "curve client");
}

/* A PUSH to ep (a CURVE client with keys k when given). */
void *forge_push(void *zc, const char *ep, const keys_t *k)
{
	void *tx = zmq_socket(zc, ZMQ_PUSH);
	int linger = 1000;
	zmq_setsockopt(tx, ZMQ_LINGER, &linger, sizeof linger);
	curve_client(tx, k);
	TU_CHECK(zmq_connect(tx, ep) == 0, "connect %s", ep);
	return tx;
}

/* The attacker's inbox on loopback (a CURVE server with keys k when given). */
void *forge_inbox(void *zc, const keys_t *k, char *ep, size_t cap)
{
	void *rx = zmq_socket(zc, ZMQ_PULL);
	int one = 1, linger = 0;
	size_t n = cap;
	zmq_setsockopt(rx, ZMQ_LINGER, &linger, sizeof linger);
	if (k)
		TU_CHECK(!zmq_setsockopt(rx, ZMQ_CURVE_SERVER, &one, sizeof one) &&
				 !zmq_setsockopt(rx, ZMQ_CURVE_SECRETKEY, k->sec, 40),
			 "curve server");
	TU_CHECK(zmq_bind(rx, "tcp://127.0.0.1:*") == 0, "bind");
	TU_CHECK(zmq_getsockopt(rx, ZMQ_LAST_ENDPOINT, ep, &n) == 0, "endpoint");
	return rx;
}

/* What the attacker's inbox gets within ms: counts by type, and the result
 * of the last REGISTER_REPLY (1 when none). Stops early at a reply when
 * until_reply. */
int32_t inbox_drain(void *rx, int ms, int *counts, bool until_reply)
{
	int32_t result = 1;
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
		lc__msg_t m;
		if (!lc__msg_decode(zmq_msg_data(&zm), zmq_msg_size(&zm), &m, NULL, 0)) {
			counts[m.type]++;
			if (m.type == LC__MSG_REGISTER_REPLY) {
				result = m.reply.result;
				fprintf(stderr, "attacker: reply %s %s\n", lc_err_name(result),
					m.reply.reason);
			}
			lc__msg_free(&m);
		}
		zmq_msg_close(&zm);
		if (until_reply && result != 1)
			break;
	}
	return result;
}

/* A REGISTER of D's session id that P's geometry check takes, with the
 * attacker's endpoints, secret and (CURVE) key; sent on tx. */
void forge_register(void *tx, const char *status_ep, const char *data_url, const uint8_t *secret,
		    const keys_t *k)
{
	forge_register_n(tx, 1, D_SESSION, status_ep, data_url, secret, k);
}

void forge_register_as(void *tx, const char *session, const char *status_ep, const char *data_url,
		       const uint8_t *secret, const keys_t *k)
{
	forge_register_n(tx, 1, session, status_ep, data_url, secret, k);
}

void forge_register_n(void *tx, int copies, const char *session, const char *status_ep,
		      const char *data_url, const uint8_t *secret, const keys_t *k)
{
	tu_pool_t s;
	static uint8_t desc[LC_REGION_DESC_MAX];
	tu_pool_init(&s, "mallory", NULL, LAYERS, PAGES, ITEM);
	int n = lc_region_pack(s.region, desc, sizeof desc);
	TU_CHECK(n > 0, "lc_region_pack: %d", n);
	const void *descs[1] = {desc};
	size_t lens[1] = {(size_t)n};
	lc__msg_buffer_t bufs[NBUF];
	lc__msg_t m;
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_REGISTER;
	memcpy(m.secret, secret, LC__MSG_SECRET_LEN);
	snprintf(m.reg.session, sizeof m.reg.session, "%s", session);
	snprintf(m.reg.status_ep, sizeof m.reg.status_ep, "%s", status_ep);
	snprintf(m.reg.data_url, sizeof m.reg.data_url, "%s", data_url);
	m.reg.flags = LC__REG_HAS_TOKEN | (k ? LC__REG_HAS_CURVE_KEY : 0);
	if (k)
		snprintf(m.reg.curve_key, sizeof m.reg.curve_key, "%s", k->pub);
	m.reg.fingerprint = s.layout->fingerprint;
	for (uint32_t i = 0; i < s.layout->nbuf; i++) {
		const lc_buffer_t *b = &s.layout->bufs[i];
		bufs[i] = (lc__msg_buffer_t){.layer = b->layer,
					     .kind = b->kind,
					     .flags = b->flags,
					     .item_len = b->item_len,
					     .offset = (uint64_t)((uint8_t *)s.bases[i] - s.mem)};
	}
	m.reg.nbuffers = s.layout->nbuf;
	m.reg.buffers = bufs;
	m.reg.nregions = 1;
	m.reg.region_descs = descs;
	m.reg.region_desc_lens = lens;
	uint8_t *buf;
	size_t len;
	TU_OK(lc__msg_encode(&m, &buf, &len));
	for (int i = 0; i < copies; i++)
		zmq_send(tx, buf, len, 0);
	free(buf);
	tu_pool_fini(&s);
}

void forge_cancel(void *tx, uint64_t room, const uint8_t *secret)
{
	lc__msg_t m;
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_CANCEL;
	memcpy(m.secret, secret, LC__MSG_SECRET_LEN);
	m.cancel.room = room;
	snprintf(m.cancel.session, sizeof m.cancel.session, "%s", D_SESSION);
	snprintf(m.cancel.reason, sizeof m.cancel.reason, "forged");
	adv_send_msg(tx, &m, 0);
}

/* A transfer info for D's room i with D's page ids, answers to status_ep. */
void forge_info(void *tx, uint64_t room_id, int i, const uint8_t *secret, const char *status_ep)
{
	int64_t pages[NPAGES];
	for (int j = 0; j < NPAGES; j++)
		pages[j] = adv_d_page(i, j);
	lc__msg_t m;
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_TRANSFER_INFO;
	memcpy(m.secret, secret, LC__MSG_SECRET_LEN);
	m.info.room = room_id;
	snprintf(m.info.session, sizeof m.info.session, "%s", D_SESSION);
	snprintf(m.info.status_ep, sizeof m.info.status_ep, "%s", status_ep);
	m.info.required_dst = 1;
	m.info.aux_index = i;
	m.info.page_count = NPAGES;
	m.info.pages = pages;
	adv_send_msg(tx, &m, 0);
}

/* P's forgeries at D: a refusal of D's registration, or a room's STATUS
 * Failed and LAYERS; never with D's secret. */
void forge_reply(void *tx, const uint8_t *secret)
{
	lc__msg_t m;
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_REGISTER_REPLY;
	memcpy(m.secret, secret, LC__MSG_SECRET_LEN);
	snprintf(m.reply.session, sizeof m.reply.session, "%s", D_SESSION);
	m.reply.result = LC_ERR_GEOMETRY;
	snprintf(m.reply.reason, sizeof m.reply.reason, "forged refusal");
	adv_send_msg(tx, &m, ZMQ_DONTWAIT);
}

void forge_p_room(void *tx, uint64_t room, const uint8_t *secret)
{
	lc__msg_t m;
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_STATUS;
	memcpy(m.secret, secret, LC__MSG_SECRET_LEN);
	m.status.room = room;
	m.status.status = LC_ROOM_FAILED;
	m.status.fail_reason = LC_FAIL_TRANSFER;
	snprintf(m.status.reason, sizeof m.status.reason, "forged failure");
	adv_send_msg(tx, &m, 0);
	memset(&m, 0, sizeof m);
	m.type = LC__MSG_LAYERS;
	memcpy(m.secret, secret, LC__MSG_SECRET_LEN);
	m.layers.room = room;
	m.layers.layers = LAYERS;
	adv_send_msg(tx, &m, 0);
}

void guess(uint8_t *secret, uint64_t seed)
{
	tu_fill(secret, LC__MSG_SECRET_LEN, seed);
}
