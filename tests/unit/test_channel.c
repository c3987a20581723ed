/* The control channel (control/channel.c) on loopback: CURVE key files
 * that are missing, short or unreadable; authorized_keys with comments and
 * junk; the ZAP handler refusing an unknown client key and naming a known
 * one; inboxes bound on IPv4, IPv6 and an address not of this host; a
 * multi-part message no peer of ours sends; a PUSH's link going up and down;
 * an inbox past its caps evicting what proved nothing, never what did. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "control/bootstrap.h"
#include "control/channel.h"
#include "testutil.h"

#ifdef LC_HAVE_ZMQ
#include <zmq.h>

static char dirs[16][64];
static int ndirs;

/* A fresh secret folder with files name=content (NULL content: a folder by
 * that name). */
static const char *secret_dir(const char *const *files)
{
	char *d = dirs[ndirs++];
	snprintf(d, 64, "/tmp/lc-chan-XXXXXX");
	assert_non_null(mkdtemp(d));
	for (int i = 0; files && files[i]; i += 2) {
		char path[128];
		snprintf(path, sizeof path, "%s/%s", d, files[i]);
		if (!files[i + 1]) {
			assert_int_equal(mkdir(path, 0700), 0);
			continue;
		}
		FILE *f = fopen(path, "w");
		assert_non_null(f);
		fputs(files[i + 1], f);
		fclose(f);
	}
	return d;
}

static void rm_dir(const char *d)
{
	char cmd[160];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
	assert_int_equal(system(cmd), 0);
}

static int create_in(const char *dir, lc__zctx_t **z)
{
	setenv("LAYERCAKE_SECRET_DIR", dir, 1);
	int rc = lc__zctx_create(NULL, z);
	unsetenv("LAYERCAKE_SECRET_DIR");
	return rc;
}

static void test_key_files(void **state)
{
	(void)state;
	char pub[41], sec[41];
	assert_int_equal(zmq_curve_keypair(pub, sec), 0);
	lc__zctx_t *z = NULL;
	/* One file of the pair: no CURVE, said at info level. */
	const char *only_pub[] = {"curve.public", pub, NULL};
	const char *d = secret_dir(only_pub);
	assert_int_equal(create_in(d, &z), 0);
	assert_string_equal(lc__zctx_public_key(z), "");
	lc__zctx_destroy(z);
	rm_dir(d);
	/* Short keys, and a folder where a key file should be: refused. */
	const char *shorter[] = {"curve.public", "short\n", "curve.secret", "short\n", NULL};
	d = secret_dir(shorter);
	z = NULL;
	assert_int_equal(create_in(d, &z), -EINVAL);
	assert_null(z);
	rm_dir(d);
	/* Forty characters that are not z85. */
	const char *not_z85[] = {"curve.public", "~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~",
				 "curve.secret", sec, NULL};
	d = secret_dir(not_z85);
	assert_int_equal(create_in(d, &z), -EINVAL);
	rm_dir(d);
	const char *folder[] = {"curve.public", NULL, "curve.secret", sec, NULL};
	d = secret_dir(folder);
	assert_true(create_in(d, &z) < 0);
	rm_dir(d);
}

/* A pair of contexts with their own keys: A authorizes `allowed` (z85)
 * beside its own. */
static void test_auth(void **state)
{
	(void)state;
	char pa[41], sa[41], pb[41], sb[41], pc[41], sc[41];
	assert_int_equal(zmq_curve_keypair(pa, sa), 0);
	assert_int_equal(zmq_curve_keypair(pb, sb), 0);
	assert_int_equal(zmq_curve_keypair(pc, sc), 0);
	char auth[256];
	snprintf(auth, sizeof auth, "# the keys A lets in\n\nnot-a-key\n%s\n", pc);
	const char *fa[] = {"curve.public", pa, "curve.secret", sa, "authorized_keys", auth, NULL};
	const char *fb[] = {"curve.public", pb, "curve.secret", sb, NULL};
	const char *fc[] = {"curve.public", pc, "curve.secret", sc, NULL};
	const char *da = secret_dir(fa), *db = secret_dir(fb), *dc = secret_dir(fc);
	lc__zctx_t *a, *b, *c;
	assert_int_equal(create_in(da, &a), 0);
	assert_int_equal(create_in(db, &b), 0);
	assert_int_equal(create_in(dc, &c), 0);
	assert_string_equal(lc__zctx_public_key(a), pa);
	lc__pull_t *in;
	char ep[128];
	assert_int_equal(lc__pull_bind(a, "127.0.0.1", &in, ep, sizeof ep), 0);
	/* A server key that is no key: refused at connect. */
	lc__push_t *px;
	assert_int_equal(lc__push_connect(b, ep, "too-short", &px), -EINVAL);
	/* B is not authorized at A: its message never arrives, counted. */
	lc__push_t *pbx, *pcx;
	assert_int_equal(lc__push_connect(b, ep, pa, &pbx), 0);
	assert_int_equal(lc__push_send(pbx, "from b", 6, 1000), 0);
	for (int i = 0; i < 2000 && !lc__zctx_auth_refused(a); i++)
		usleep(5000);
	assert_true(lc__zctx_auth_refused(a) >= 1);
	/* C is: its message arrives with C's key as the sender. */
	assert_int_equal(lc__push_connect(c, ep, pa, &pcx), 0);
	assert_int_equal(lc__push_send(pcx, "from c", 6, 1000), 0);
	void *buf = NULL;
	size_t len = 0;
	char who[64] = "";
	int got = 0;
	for (int i = 0; i < 2000 && got == 0; i++) {
		got = lc__pull_recv_from(in, &buf, &len, who, sizeof who);
		if (!got)
			usleep(5000);
	}
	assert_int_equal(got, 1);
	assert_int_equal(len, 6);
	assert_memory_equal(buf, "from c", 6);
	assert_string_equal(who, pc);
	free(buf);
	lc__push_close_now(pbx);
	lc__push_close(pcx);
	lc__pull_close(in);
	lc__zctx_destroy(c);
	lc__zctx_destroy(b);
	lc__zctx_destroy(a);
	rm_dir(da);
	rm_dir(db);
	rm_dir(dc);
}

static void test_binds(void **state)
{
	(void)state;
	unsetenv("LAYERCAKE_SECRET_DIR");
	lc__zctx_t *z;
	assert_int_equal(lc__zctx_create(NULL, &z), 0);
	lc__pull_t *in;
	char ep[128], tiny[8];
	/* An address of no interface here (TEST-NET-1): the bind fails. */
	assert_true(lc__pull_bind(z, "192.0.2.1", &in, ep, sizeof ep) < 0);
	/* The endpoint does not fit. */
	assert_int_equal(lc__pull_bind(z, "127.0.0.1", &in, tiny, sizeof tiny), -ENOSPC);
	/* IPv6 loopback, bracketed. */
	if (lc__pull_bind(z, "::1", &in, ep, sizeof ep) == 0) {
		assert_true(!strncmp(ep, "tcp://[::1]:", 12));
		lc__pull_close(in);
	}
	/* IPv4: a multi-part message (no peer of ours sends one) is read as
	 * an empty message and drained; the next one is whole. */
	assert_int_equal(lc__pull_bind(z, "127.0.0.1", &in, ep, sizeof ep), 0);
	assert_true(!strncmp(ep, "tcp://127.0.0.1:", 16));
	void *zc = zmq_ctx_new();
	void *raw = zmq_socket(zc, ZMQ_PUSH);
	int linger = 0;
	zmq_setsockopt(raw, ZMQ_LINGER, &linger, sizeof linger);
	assert_int_equal(zmq_connect(raw, ep), 0);
	zmq_send(raw, "a", 1, ZMQ_SNDMORE);
	zmq_send(raw, "b", 1, ZMQ_SNDMORE);
	zmq_send(raw, "c", 1, 0);
	zmq_send(raw, "whole", 5, 0);
	void *buf;
	size_t len;
	int got = 0;
	for (int i = 0; i < 2000 && !got; i++)
		if (!(got = lc__pull_recv(in, &buf, &len)))
			usleep(5000);
	assert_int_equal(got, 1);
	assert_int_equal(len, 0);
	free(buf);
	uint64_t v = 1;
	assert_true(lc__pull_counter(in, LC__CTL_inbox_conns_refused, &v));
	assert_int_equal(v, 0);
	v = 1;
	assert_true(lc__pull_counter(NULL, LC__CTL_inbox_conns_evicted, &v));
	assert_int_equal(v, 0);
	assert_false(lc__pull_counter(in, LC__CTL_msgs_received, &v));
	got = 0;
	for (int i = 0; i < 2000 && !got; i++)
		if (!(got = lc__pull_recv(in, &buf, &len)))
			usleep(5000);
	assert_int_equal(got, 1);
	assert_int_equal(len, 5);
	assert_memory_equal(buf, "whole", 5);
	free(buf);
	zmq_close(raw);
	zmq_ctx_term(zc);
	/* A watched PUSH is up once the handshake is done and down once the
	 * inbox is gone. */
	lc__zctx_watch_pushes(z, 100, 300);
	lc__push_t *p;
	assert_int_equal(lc__push_connect(z, ep, NULL, &p), 0);
	int up = 0;
	for (int i = 0; i < 2000 && !up; i++)
		if (!(up = lc__push_up(p)))
			usleep(5000);
	assert_int_equal(up, 1);
	lc__pull_close(in);
	for (int i = 0; i < 2000 && up; i++)
		if ((up = lc__push_up(p)))
			usleep(5000);
	assert_int_equal(up, 0);
	lc__push_close_now(p);
	lc__push_close_now(NULL);
	lc__zctx_destroy(z);
}

/* A raw PUSH from source address src to ep that never reconnects: a
 * connection the inbox ends stays ended, so what it sends then never
 * arrives. */
static void *push_from(void *zc, const char *src, const char *ep)
{
	char url[160];
	void *s = zmq_socket(zc, ZMQ_PUSH);
	int linger = 0, never = -1;
	zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
	zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &never, sizeof never);
	snprintf(url, sizeof url, "tcp://%s:0;%s", src, ep + strlen("tcp://"));
	assert_int_equal(zmq_connect(s, url), 0);
	return s;
}

static uint64_t inbox_count(lc__pull_t *in, int ctl)
{
	uint64_t v = 0;
	assert_true(lc__pull_counter(in, ctl, &v));
	return v;
}

/* Until the inbox holds `held` connections and has evicted `evicted`. */
static void wait_table(lc__pull_t *in, uint64_t held, uint64_t evicted)
{
	for (int i = 0; i < 2000; i++) {
		if (lc__pull_conns_held(in) == held &&
		    inbox_count(in, LC__CTL_inbox_conns_evicted) == evicted)
			return;
		usleep(2000);
	}
	fail_msg("inbox holds %llu (want %llu), evicted %llu (want %llu)",
		 (unsigned long long)lc__pull_conns_held(in), (unsigned long long)held,
		 (unsigned long long)inbox_count(in, LC__CTL_inbox_conns_evicted),
		 (unsigned long long)evicted);
}

/* What arrives within ms (until want messages have), one letter per
 * message (names[] gets them in order, NUL-terminated), each message's
 * connection vouched for. */
static void take(lc__pull_t *in, int ms, size_t want, char *names, size_t cap)
{
	size_t n = 0;
	for (int i = 0; i < ms / 2 && n < want; i++) {
		void *buf;
		size_t len;
		if (lc__pull_recv(in, &buf, &len) <= 0) {
			usleep(2000);
			continue;
		}
		if (len == 1 && n + 1 < cap)
			names[n++] = *(char *)buf;
		free(buf);
		lc__pull_vouch(in);
	}
	names[n] = '\0';
}

/* inbox_guard.h: past a cap, a newcomer takes the place of the oldest
 * connection that proved nothing (its address's own past
 * inbox_conns_per_addr, else the inbox's); a vouched connection keeps its
 * place; full of vouched ones, the door shuts until one ends. */
static void test_inbox_evicts(void **state)
{
	(void)state;
	setenv("LAYERCAKE_INBOX_CONNS_MAX", "4", 1);
	setenv("LAYERCAKE_INBOX_CONNS_PER_ADDR", "3", 1);
	lc__zctx_t *z;
	lc__pull_t *in;
	char ep[128], got[32];
	assert_int_equal(lc__zctx_create(NULL, &z), 0);
	assert_int_equal(lc__pull_bind(z, "127.0.0.1", &in, ep, sizeof ep), 0);
	unsetenv("LAYERCAKE_INBOX_CONNS_MAX");
	unsetenv("LAYERCAKE_INBOX_CONNS_PER_ADDR");
	void *zc = zmq_ctx_new();
	/* k proves itself; a, b, c from another address say nothing. */
	void *k = push_from(zc, "127.0.0.1", ep);
	assert_int_equal(zmq_send(k, "k", 1, 0), 1);
	take(in, 2000, 1, got, sizeof got);
	assert_string_equal(got, "k");
	void *a = push_from(zc, "127.0.0.2", ep);
	wait_table(in, 2, 0);
	void *b = push_from(zc, "127.0.0.2", ep);
	wait_table(in, 3, 0);
	void *c = push_from(zc, "127.0.0.2", ep);
	wait_table(in, 4, 0);
	/* Its address holds its share: its own oldest (a) goes. */
	void *d = push_from(zc, "127.0.0.2", ep);
	wait_table(in, 4, 1);
	/* The inbox is full: its oldest unproven (b, not k) goes. */
	void *e = push_from(zc, "127.0.0.3", ep);
	wait_table(in, 4, 2);
	assert_int_equal(inbox_count(in, LC__CTL_inbox_conns_refused), 0);
	assert_int_equal(inbox_count(in, LC__CTL_inbox_door_shut), 0);
	void *all[] = {a, b, c, d, e, k};
	for (size_t i = 0; i < 6; i++)
		assert_int_equal(zmq_send(all[i], (char[]){"abcdek"[i]}, 1, ZMQ_DONTWAIT), 1);
	take(in, 600, 6, got, sizeof got);
	assert_null(strchr(got, 'a'));
	assert_null(strchr(got, 'b'));
	assert_int_equal(strlen(got), 4); /* c, d, e and k, each vouched for */
	/* Full of proven connections: nothing to evict, the door shuts; a
	 * newcomer gets in once one of them has gone. */
	assert_int_equal(inbox_count(in, LC__CTL_inbox_door_shut), 1);
	void *f = push_from(zc, "127.0.0.4", ep);
	assert_int_equal(zmq_send(f, "f", 1, ZMQ_DONTWAIT), 1);
	take(in, 300, 1, got, sizeof got);
	assert_string_equal(got, "");
	zmq_close(c);
	take(in, 8000, 1, got, sizeof got);
	assert_string_equal(got, "f");
	assert_int_equal(inbox_count(in, LC__CTL_inbox_conns_evicted), 2);
	void *rest[] = {a, b, d, e, f, k};
	for (size_t i = 0; i < 6; i++)
		zmq_close(rest[i]);
	zmq_ctx_term(zc);
	lc__pull_close(in);
	lc__zctx_destroy(z);
}
#endif

int main(void)
{
#ifndef LC_HAVE_ZMQ
	return TU_SKIP;
#else
	lc_log_set_level(LC_LOG_OFF);
	tu_watchdog(110);
	unsetenv("LAYERCAKE_SECRET_DIR");
	if (!zmq_has("curve")) {
		fprintf(stderr, "skip: libzmq without CURVE\n");
		return TU_SKIP;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_key_files),
		cmocka_unit_test(test_auth),
		cmocka_unit_test(test_binds),
		cmocka_unit_test(test_inbox_evicts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
#endif
}
