/*
 * The prefill, decode and bootstrap APIs misused, and the folders and
 * addresses they are given: real P, D and bootstrap servers on 127.0.0.1
 * (and ::1), in this process. Every refusal is an error code (no output
 * written), and what is taken works.
 *
 *     adversarial_api <case>
 *
 *   prefill    lc_prefill_create's refusals (-EINVAL for each missing or
 *              inconsistent parameter; a bootstrap server that refuses
 *              connections fails the create, after its retries); a P
 *              publishing on /metrics shows its rank there
 *   bootstrap  lc_bootstrap_start's refusals: no output, a port out of
 *              range, a host name where a numeric address belongs, a
 *              secret too long, a port in use; the port from the
 *              context's knob; a server on ::1, which a P registers at
 *   decode     lc_decode_create's and the receivers' refusals: each
 *              missing or inconsistent parameter, a session id too
 *              long, a buffer outside the given regions, a bootstrap
 *              address without a port, page lists that do not add
 *              up, metadata before Success, a second cancel
 *   secret_dir  LAYERCAKE_SECRET_DIR with half a keypair (P runs without
 *              CURVE), with malformed or unreadable key files (the
 *              create fails), with a keypair and authorized_keys that
 *              hold a comment and a malformed line (ignored, CURVE
 *              on); a host this machine does not have: bind fails
 *
 * Exit 0 pass, 1 fail, 77 skipped.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "harness.h"
#include "rooms.h"
#include "testutil.h"

/* GET path from the bootstrap server at addr ("host:port"): the whole
 * response, NUL-terminated, in buf. */
static void http_get(const char *addr, const char *path, char *buf, size_t cap)
{
	char host[64];
	int port = 0;
	TU_CHECK(sscanf(addr, "%63[^:]:%d", host, &port) == 2, "address %s", addr);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	TU_CHECK(inet_pton(AF_INET, host, &sa.sin_addr) == 1, "host %s", host);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct timeval tv = {10, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	TU_CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "connect %s",
		 addr);
	char req[256];
	int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr);
	TU_CHECK(write(fd, req, (size_t)n) == n, "request");
	size_t got = 0;
	ssize_t k;
	while (got + 1 < cap && (k = read(fd, buf + got, cap - 1 - got)) > 0)
		got += (size_t)k;
	buf[got] = '\0';
	close(fd);
}

static void case_prefill_api(void)
{
	lc_bootstrap_t *b;
	char addr[64];
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
	TU_OK(lc_bootstrap_start(&bp, &b));
	TU_OK(lc_bootstrap_addr(b, addr, sizeof addr));
	tu_pool_t s;
	tu_pool_init(&s, "p0", NULL, LAYERS, PAGES, ITEM);
	lc_prefill_t *pf = NULL;
	const lc_prefill_params_t good = {.size = sizeof good,
					  .layout = s.layout,
					  .bootstrap = addr,
					  .name = "p0",
					  .world_size = 2,
					  .dp_size = 1,
					  .engine_rank = 1,
					  .metrics_server = b};
	lc_prefill_params_t p = good;
	TU_CHECK(lc_prefill_create(NULL, &p, &pf) == -EINVAL, "NULL ctx");
	TU_CHECK(lc_prefill_create(s.ctx, &p, NULL) == -EINVAL, "NULL out");
	TU_CHECK(lc_prefill_create(s.ctx, NULL, &pf) == -EINVAL, "NULL params");
	p.layout = NULL;
	TU_CHECK(lc_prefill_create(s.ctx, &p, &pf) == -EINVAL, "no layout");
	p = good;
	p.bootstrap = NULL;
	TU_CHECK(lc_prefill_create(s.ctx, &p, &pf) == -EINVAL, "no bootstrap");
	static const int bad[][3] = {{0, 1, 0}, {2, 0, 0}, {3, 2, 0}, {2, 1, -1}, {2, 1, 2}};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		p = good;
		p.world_size = bad[i][0];
		p.dp_size = bad[i][1];
		p.engine_rank = bad[i][2];
		TU_CHECK(lc_prefill_create(s.ctx, &p, &pf) == -EINVAL,
			 "world %d dp %d rank %d taken", bad[i][0], bad[i][1], bad[i][2]);
	}
	TU_CHECK(pf == NULL, "a refused create wrote its output");
	/* A bootstrap server that refuses connections: the create fails. */
	p = good;
	p.bootstrap = "127.0.0.1:1";
	p.metrics_server = NULL;
	uint64_t t0 = adv_now_ms();
	int rc = lc_prefill_create(s.ctx, &p, &pf);
	TU_CHECK(rc != 0 && pf == NULL, "a P with no bootstrap server: %s", lc_err_name(rc));
	fprintf(stderr, "no bootstrap server: %s after %llu ms\n", lc_err_name(rc),
		(unsigned long long)(adv_now_ms() - t0));
	/* Rank 1 of 2, publishing on /metrics. */
	TU_OK(lc_prefill_create(s.ctx, &good, &pf));
	char ep[8];
	TU_CHECK(lc_prefill_endpoint(pf, ep, sizeof ep) == -ENOSPC, "a short endpoint buffer");
	TU_CHECK(lc_prefill_endpoint(NULL, ep, sizeof ep) == -EINVAL, "NULL prefill");
	uint64_t v;
	TU_CHECK(lc_prefill_counter(pf, "no_such_counter", &v) == -ENOENT, "unknown counter");
	TU_CHECK(lc_prefill_counter(pf, NULL, &v) == -EINVAL, "NULL name");
	lc_engine_t *eng;
	TU_CHECK(lc_prefill_engine(NULL, &eng) == -EINVAL, "NULL prefill");
	static char body[1 << 16];
	http_get(addr, "/metrics", body, sizeof body);
	TU_CHECK(strstr(body, " 200 ") && strstr(body, "layercake_rooms_active{rank=\"1\"}"),
		 "P rank 1 is not on /metrics:\n%.2000s", body);
	lc_prefill_destroy(pf);
	/* Gone from /metrics with it. */
	http_get(addr, "/metrics", body, sizeof body);
	TU_CHECK(!strstr(body, "rank=\"1\""), "P rank 1 is still on /metrics");
	tu_pool_fini(&s);
	lc_bootstrap_stop(b);
}

static void put_file(const char *dir, const char *name, const char *text)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	TU_CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "writing %s", path);
}

/* A P rank created with LAYERCAKE_SECRET_DIR=dir (and host): its result,
 * the P destroyed again. */
static int p_with(lc_ctx_t *ctx, const lc_layout_t *layout, const char *addr, const char *dir,
		  const char *host)
{
	setenv("LAYERCAKE_SECRET_DIR", dir, 1);
	lc_prefill_params_t p = {.size = sizeof p,
				 .layout = layout,
				 .bootstrap = addr,
				 .host = host,
				 .world_size = 1,
				 .dp_size = 1};
	lc_prefill_t *pf = NULL;
	int rc = lc_prefill_create(ctx, &p, &pf);
	unsetenv("LAYERCAKE_SECRET_DIR");
	lc_prefill_destroy(pf);
	fprintf(stderr, "secret dir %s, host %s: %s\n", dir, host ? host : "-", lc_err_name(rc));
	return rc;
}

static void case_secret_dir(void)
{
	lc_bootstrap_t *b;
	char addr[64], dir[64] = "/tmp/lc-cold-XXXXXX";
	/* One P after another on rank 0: each finds the last one's route until it
	 * lapses (and waits for that), so let routes live briefly. */
	setenv("LAYERCAKE_ROUTE_TTL_MS", "300", 1);
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
	TU_OK(lc_bootstrap_start(&bp, &b));
	TU_OK(lc_bootstrap_addr(b, addr, sizeof addr));
	tu_pool_t s;
	tu_pool_init(&s, "p0", NULL, LAYERS, PAGES, ITEM);
	TU_CHECK(mkdtemp(dir), "mkdtemp");
	char pub[41], sec[41], other[41], junk[41];
	TU_CHECK(zmq_curve_keypair(pub, sec) == 0 && zmq_curve_keypair(other, junk) == 0,
		 "zmq_curve_keypair");
	/* 1. Half a keypair: no CURVE, P still runs. */
	put_file(dir, "curve.public", pub);
	TU_OK(p_with(s.ctx, s.layout, addr, dir, NULL));
	/* 2. Malformed key files. */
	put_file(dir, "curve.secret", "too short\n");
	TU_CHECK(p_with(s.ctx, s.layout, addr, dir, NULL) == -EINVAL, "a short secret");
	/* 3. A key file that cannot be read. */
	char path[512];
	snprintf(path, sizeof path, "%s/curve.secret", dir);
	unlink(path);
	TU_CHECK(mkdir(path, 0700) == 0, "mkdir");
	TU_CHECK(p_with(s.ctx, s.layout, addr, dir, NULL) != 0, "an unreadable secret");
	rmdir(path);
	/* 4. A keypair, and authorized_keys with a comment, a blank line, a
	 * malformed key and a good one: the bad line is ignored. */
	put_file(dir, "curve.secret", sec);
	char keys[256];
	snprintf(keys, sizeof keys, "# the D ranks\n\nnot-a-key\n%s\n", other);
	put_file(dir, "authorized_keys", keys);
	TU_OK(p_with(s.ctx, s.layout, addr, dir, NULL));
	snprintf(path, sizeof path, "rm -rf %s", dir);
	TU_CHECK(system(path) == 0, "rm");
	/* 5. An address this host does not have (TEST-NET-1: nothing is sent). */
	TU_CHECK(p_with(s.ctx, s.layout, addr, "", "192.0.2.1") != 0,
		 "bound an address this host does not have");
	tu_pool_fini(&s);
	lc_bootstrap_stop(b);
}

static void case_bootstrap_api(void)
{
	lc_bootstrap_t *b = NULL, *b2 = NULL;
	char addr[64];
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
	TU_CHECK(lc_bootstrap_start(&bp, NULL) == -EINVAL, "NULL out");
	bp.port = 70000;
	TU_CHECK(lc_bootstrap_start(&bp, &b) == -EINVAL, "port 70000");
	bp.port = -2;
	TU_CHECK(lc_bootstrap_start(&bp, &b) == -EINVAL, "port -2");
	bp.port = 0;
	bp.host = "localhost";
	TU_CHECK(lc_bootstrap_start(&bp, &b) == -EINVAL, "a host name");
	bp.host = "127.0.0.1";
	static char long_secret[400];
	memset(long_secret, 's', sizeof long_secret - 1);
	bp.secret = long_secret;
	TU_CHECK(lc_bootstrap_start(&bp, &b) < 0, "a secret too long");
	bp.secret = NULL;
	TU_CHECK(!b, "a refused start wrote its output");
	TU_CHECK(lc_bootstrap_addr(NULL, addr, sizeof addr) == -EINVAL, "NULL server");
	/* A port in use. */
	TU_OK(lc_bootstrap_start(&bp, &b));
	TU_OK(lc_bootstrap_addr(b, addr, sizeof addr));
	const char *colon = strrchr(addr, ':');
	bp.port = atoi(colon + 1);
	TU_CHECK(lc_bootstrap_start(&bp, &b2) < 0 && !b2, "a second server on %s", addr);
	lc_bootstrap_stop(b);
	/* The port from the context's knob (0: any). */
	lc_ctx_t *ctx;
	TU_OK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t)}, &ctx));
	TU_OK(lc_ctx_config_set(ctx, "bootstrap_port", "0"));
	lc_bootstrap_params_t kp = {.size = sizeof kp, .host = "127.0.0.1", .port = -1, .ctx = ctx};
	TU_OK(lc_bootstrap_start(&kp, &b));
	lc_bootstrap_stop(b);
	lc_ctx_destroy(ctx);
	/* On ::1 (skipped where there is no IPv6 loopback), with a P on it. */
	lc_bootstrap_params_t v6 = {.size = sizeof v6, .host = "::1", .port = 0};
	if (lc_bootstrap_start(&v6, &b)) {
		fprintf(stderr, "no IPv6 loopback: the ::1 half is skipped\n");
		return;
	}
	TU_OK(lc_bootstrap_addr(b, addr, sizeof addr));
	TU_CHECK(strstr(addr, "::1"), "the server says %s", addr);
	tu_pool_t s;
	tu_pool_init(&s, "p0", NULL, LAYERS, PAGES, ITEM);
	lc_prefill_params_t pp = {.size = sizeof pp,
				  .layout = s.layout,
				  .bootstrap = addr,
				  .host = "::1",
				  .world_size = 1,
				  .dp_size = 1};
	lc_prefill_t *pf;
	TU_OK(lc_prefill_create(s.ctx, &pp, &pf));
	char ep[300];
	TU_CHECK(lc_prefill_endpoint(pf, ep, sizeof ep) > 0 && strstr(ep, "::1"), "P at %s", ep);
	lc_prefill_destroy(pf);
	tu_pool_fini(&s);
	lc_bootstrap_stop(b);
}

static void case_decode_api(void)
{
	lc_bootstrap_t *b;
	char addr[64];
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
	TU_OK(lc_bootstrap_start(&bp, &b));
	TU_OK(lc_bootstrap_addr(b, addr, sizeof addr));
	tu_pool_t s, other;
	tu_pool_init(&s, "d", NULL, LAYERS, PAGES, ITEM);
	tu_pool_init(&other, "x", NULL, LAYERS, PAGES, ITEM);
	lc_region_t *regs[1] = {s.region}, *wrong[1] = {other.region};
	const lc_decode_params_t good = {.size = sizeof good,
					 .layout = s.layout,
					 .regions = regs,
					 .region_count = 1,
					 .listen_url = "tcp://127.0.0.1:0",
					 .host = "127.0.0.1"};
	lc_decode_params_t p = good;
	lc_decode_t *d = NULL;
	TU_CHECK(lc_decode_create(NULL, &p, &d) == -EINVAL, "NULL ctx");
	TU_CHECK(lc_decode_create(s.ctx, NULL, &d) == -EINVAL, "NULL params");
	TU_CHECK(lc_decode_create(s.ctx, &p, NULL) == -EINVAL, "NULL out");
	p.layout = NULL;
	TU_CHECK(lc_decode_create(s.ctx, &p, &d) == -EINVAL, "no layout");
	p = good;
	p.region_count = 0;
	TU_CHECK(lc_decode_create(s.ctx, &p, &d) == -EINVAL, "no regions");
	p = good;
	p.listen_url = NULL;
	TU_CHECK(lc_decode_create(s.ctx, &p, &d) == -EINVAL, "no listener");
	p = good;
	p.tp_size = 2;
	p.tp_rank = 2;
	TU_CHECK(lc_decode_create(s.ctx, &p, &d) == -EINVAL, "rank 2 of 2");
	p = good;
	static char long_session[600];
	memset(long_session, 'x', sizeof long_session - 1);
	p.session = long_session;
	TU_CHECK(lc_decode_create(s.ctx, &p, &d) == -EINVAL, "a session id too long");
	p = good;
	p.regions = wrong; /* registered, but not where the layout's buffers are */
	TU_CHECK(lc_decode_create(s.ctx, &p, &d) == -EINVAL, "buffers outside the regions");
	TU_CHECK(d == NULL, "a refused create wrote its output");
	TU_OK(lc_decode_create(s.ctx, &good, &d));
	char ep[8];
	uint64_t v;
	TU_CHECK(lc_decode_endpoint(d, ep, sizeof ep) == -ENOSPC, "a short endpoint buffer");
	TU_CHECK(lc_decode_endpoint(NULL, ep, sizeof ep) == -EINVAL, "NULL decode");
	TU_CHECK(lc_decode_counter(d, "no_such_counter", &v) == -ENOENT, "unknown counter");
	TU_CHECK(lc_decode_counter(d, NULL, &v) == -EINVAL, "NULL name");
	lc_receiver_t *r = NULL;
	TU_CHECK(lc_receiver_create(NULL, addr, 1, &r) == -EINVAL, "NULL decode");
	TU_CHECK(lc_receiver_create(d, addr, 1, NULL) == -EINVAL, "NULL out");
	TU_CHECK(lc_receiver_create(d, "127.0.0.1", 1, &r) == -EINVAL, "an address without a port");
	TU_CHECK(r == NULL, "a refused receiver was written");
	TU_OK(lc_receiver_create(d, addr, 1, &r)); /* no P there: it stays Bootstrapping */
	int64_t pages[2] = {0, 1};
	lc_receiver_pages_t pg = {
		.size = sizeof pg, .pages = pages, .page_count = 2, .aux_index = -1};
	TU_CHECK(lc_receiver_send(NULL, &pg) == -EINVAL, "NULL receiver");
	TU_CHECK(lc_receiver_send(r, NULL) == -EINVAL, "NULL pages");
	lc_receiver_pages_t bad = pg;
	bad.size = sizeof(size_t);
	TU_CHECK(lc_receiver_send(r, &bad) == -EINVAL, "a struct too short");
	bad = pg;
	bad.pages = NULL;
	TU_CHECK(lc_receiver_send(r, &bad) == -EINVAL, "a count without pages");
	bad = pg;
	bad.aux_index = -2;
	TU_CHECK(lc_receiver_send(r, &bad) == -EINVAL, "aux index -2");
	bad = pg;
	bad.state_slot_count = 1;
	TU_CHECK(lc_receiver_send(r, &bad) == -EINVAL, "slots without an array");
	TU_CHECK(lc_receiver_poll(NULL, NULL) == -EINVAL, "NULL receiver");
	TU_CHECK(lc_receiver_layers_ready(NULL) == -EINVAL, "NULL receiver");
	TU_CHECK(lc_receiver_layers_ready(r) == 0, "layers before any transfer");
	char meta[16];
	TU_CHECK(lc_receiver_metadata(NULL, meta, sizeof meta) == -EINVAL, "NULL receiver");
	TU_CHECK(lc_receiver_metadata(r, NULL, sizeof meta) == -EINVAL, "NULL buffer");
	TU_CHECK(lc_receiver_metadata(r, meta, sizeof meta) == LC_ERR_STATE, "metadata early");
	TU_CHECK(lc_receiver_cancel(NULL, "x") == -EINVAL, "NULL receiver");
	TU_OK(lc_receiver_cancel(r, "the test"));
	TU_CHECK(lc_receiver_cancel(r, "again") == LC_ERR_STATE, "a second cancel");
	lc_room_info_t info = {.size = sizeof info};
	TU_CHECK(lc_receiver_poll(r, &info) == LC_ROOM_FAILED &&
			 info.fail_reason == LC_FAIL_CANCELLED,
		 "a cancelled receiver: %s", info.reason);
	lc_receiver_destroy(r);
	lc_receiver_destroy(NULL);
	lc_decode_destroy(d);
	lc_decode_destroy(NULL);
	tu_pool_fini(&other);
	tu_pool_fini(&s);
	lc_bootstrap_stop(b);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: adversarial_api <case>\n");
		return 2;
	}
	tu_watchdog(100);
	if (!tu_transport_built("tcp")) {
		fprintf(stderr, "skip: no tcp transport\n");
		return TU_SKIP;
	}
	const char *n = argv[1];
	if (!strcmp(n, "prefill"))
		case_prefill_api();
	else if (!strcmp(n, "secret_dir"))
		case_secret_dir();
	else if (!strcmp(n, "bootstrap"))
		case_bootstrap_api();
	else if (!strcmp(n, "decode"))
		case_decode_api();
	else {
		fprintf(stderr, "unknown case %s\n", n);
		return 2;
	}
	printf("adversarial_api %s: ok\n", n);
	return 0;
}
