/*
 * Adversarial tests of D's liveness check (issue 13, finding 9): D must
 * judge P by P's own control channel, never by P's bootstrap server. Real
 * processes on 127.0.0.1: a standalone bootstrap server (`layercake
 * bootstrap`), one P rank registered with it, one D, and the parent playing
 * the fault. D's heartbeat is short (200 ms, 2 misses: the old HTTP probe
 * failed every room within 0.6 s of the bootstrap server going away); each
 * fault lasts well past that before P computes.
 *
 *     adversarial_liveness <case> <layercake cli>
 *
 *   bootstrap_killed  wave 0's rooms registered and sent, then the bootstrap
 *                     server SIGKILLed; 1.5 s later P computes: wave 0
 *                     succeeds byte-exact; then wave 1, new rooms whose P
 *                     D already knows, succeeds too with the server gone.
 *   bootstrap_slow    the same with the server alive but 300 connections
 *                     held open to it, each a request never finished (its
 *                     connection slots full, the rest in its backlog).
 *   p_killed          wave 0 sent, then P SIGKILLed: each of D's rooms fails
 *                     (session_gone) within P_DEAD_BOUND_MS, with a reason
 *                     naming P's address.
 *   p_killed_mid      D with the default heartbeat (5 s, 2 misses), P
 *                     SIGKILLed mid-transfer (two of four layers written):
 *                     D's lanes from P close and P's control channel is
 *                     down, so each room fails within P_GONE_BOUND_MS
 *                     (issue 20, point 6: it took the heartbeats' 8-10 s).
 *   lane_closed       a lane into D (D's own token, its handshake done) closed
 *                     by its peer while wave 0 is in flight, P alive: the
 *                     listener reports it (lanes_closed), but P's control
 *                     channel is up, so the rooms succeed byte-exact.
 *
 * Exit 0 pass, 1 fail, 77 skipped (a facility missing here).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "pd/decode_int.h"
#include "rooms.h"
#include "testutil.h"
#include "transport/tcp/wire.h"

#define WAVES 2
#define SLOW_CONNS 300
#define FAULT_MS 1500        /* the fault lasts this long before P computes */
#define P_DEAD_BOUND_MS 2000 /* (misses + 1) x interval = 600 ms, and slack */
#define P_GONE_BOUND_MS 1000 /* the data path's word: tens of ms, and slack */
#define D_KNOBS "heartbeat_interval_ms=200,heartbeat_misses=2"

enum fault { BOOTSTRAP_KILLED, BOOTSTRAP_SLOW, P_KILLED, P_KILLED_MID, LANE_CLOSED };
static enum fault the_fault; /* set before the children fork */

#define say(...) tu_say(adv_status_fd, __VA_ARGS__)

/* Room k (wave * ROOMS + i) of the run. */
static uint64_t room_of(int k)
{
	return ROOM0 + (uint64_t)k;
}

/* ==== P process: one rank, registered with the standalone server ==== */

/* One forward of wave w's rooms, recorded layer by layer; failures back. */
static int p_forward(lc_engine_t *eng, lc_sender_t **snd, int w)
{
	int64_t pages[NPAGES];
	for (int j = 0; j < NPAGES; j++)
		pages[j] = 1 + j;
	TU_OK(lc_engine_batch_begin(eng, 0));
	for (int i = 0; i < ROOMS; i++) {
		lc_chunk_t ch = {.size = sizeof ch,
				 .room = room_of(w * ROOMS + i),
				 .pages = pages,
				 .page_count = NPAGES,
				 .is_last = 1};
		if (lc_sender_poll(snd[i], NULL) != LC_ROOM_FAILED)
			lc_engine_chunk_add(eng, &ch);
	}
	TU_OK(lc_engine_batch_end(eng));
	for (int l = 0; l < LAYERS; l++) {
		usleep(2000);
		TU_OK(lc_engine_record_cache(eng));
		if (the_fault == P_KILLED_MID && l == 1) {
			usleep(200000); /* the two layers written */
			say("p-mid %d", w);
			pause(); /* killed here */
		}
	}
	TU_OK(lc_engine_record_aux(eng));
	for (int i = 0; i < ROOMS; i++) {
		uint8_t meta[META_LEN];
		tu_fill(meta, sizeof meta, room_of(w * ROOMS + i));
		lc_sender_metadata_set(snd[i], meta, sizeof meta);
	}
	int failures = 0;
	uint64_t dl = adv_now_ms() + 15000;
	for (int i = 0; i < ROOMS; i++) {
		lc_room_info_t info = {.size = sizeof info};
		int st;
		while ((st = lc_sender_poll(snd[i], &info)) != LC_ROOM_SUCCESS &&
		       st != LC_ROOM_FAILED && adv_now_ms() < dl)
			usleep(2000);
		fprintf(stderr, "P room %llu: %s %s\n", (unsigned long long)room_of(w * ROOMS + i),
			lc_room_status_name(st), info.reason);
		failures += st != LC_ROOM_SUCCESS;
	}
	return failures;
}

/* Per wave: 'g' opens the senders (then "p-bootstrapped W" once D's infos
 * are in), 'g' again computes ("p-done W FAILURES"); 'q' quits. */
static int p_child(void *arg, int go_fd)
{
	const char *bs_addr = arg;
	tu_pool_t s;
	lc_prefill_t *pf;
	lc_engine_t *eng;
	lc_sender_t *snd[WAVES][ROOMS] = {{0}};
	int failures = 0;
	tu_pool_init(&s, "p0", NULL, LAYERS, PAGES, ITEM);
	for (int k = 0; k < NBUF; k++)
		for (int p = 0; p < PAGES; p++)
			tu_fill((uint8_t *)s.bases[k] + (size_t)p * ITEM, ITEM, adv_seed_of(k, p));
	lc_prefill_params_t pp = {.size = sizeof pp,
				  .layout = s.layout,
				  .bootstrap = bs_addr,
				  .name = "p0",
				  .world_size = 1,
				  .dp_size = 1};
	int rc = lc_prefill_create(s.ctx, &pp, &pf);
	if (rc == LC_ENOTSUP || rc == LC_ERR_NO_TRANSPORT) {
		fprintf(stderr, "skip: %s\n", lc_strerror(rc));
		return TU_SKIP;
	}
	TU_OK(rc);
	TU_OK(lc_prefill_engine(pf, &eng));
	say("p-up");
	for (int w = 0; w < WAVES && adv_wait_byte(go_fd) == 'g'; w++) {
		for (int i = 0; i < ROOMS; i++)
			TU_OK(lc_sender_create(pf, room_of(w * ROOMS + i), &snd[w][i]));
		uint64_t dl = adv_now_ms() + 15000;
		for (int i = 0; i < ROOMS; i++)
			while (lc_sender_poll(snd[w][i], NULL) == LC_ROOM_BOOTSTRAPPING &&
			       adv_now_ms() < dl)
				usleep(2000);
		say("p-bootstrapped %d", w);
		if (adv_wait_byte(go_fd) != 'g')
			break;
		int f = p_forward(eng, snd[w], w);
		failures += f;
		say("p-done %d %d", w, f);
	}
	adv_wait_byte(go_fd); /* quit */
	for (int w = 0; w < WAVES; w++)
		for (int i = 0; i < ROOMS; i++)
			lc_sender_destroy(snd[w][i]);
	lc_prefill_destroy(pf);
	tu_pool_fini(&s);
	return failures ? 1 : 0;
}

/* ==== D process ==== */

/* Room k final: "d-final K STATUS REASON|TEXT", then its bytes checked. */
static int d_check_room(lc_receiver_t *rcv, const tu_pool_t *s, int k)
{
	lc_room_info_t info = {.size = sizeof info};
	int st;
	uint64_t dl = adv_now_ms() + 15000;
	while ((st = lc_receiver_poll(rcv, &info)) != LC_ROOM_SUCCESS && st != LC_ROOM_FAILED &&
	       adv_now_ms() < dl)
		usleep(1000);
	say("d-final %d %s %s|%s", k, lc_room_status_name(st),
	    lc_fail_reason_name(info.fail_reason), info.reason);
	if (st != LC_ROOM_SUCCESS)
		return 1;
	int bad = 0;
	for (int b = 0; b < NBUF; b++)
		for (int j = 0; j < NPAGES; j++) {
			const uint8_t *pg = (const uint8_t *)s->bases[b] + adv_d_page(k, j) * ITEM;
			bad += tu_verify(pg, ITEM, adv_seed_of(b, 1 + j)) >= 0;
		}
	if (bad)
		fprintf(stderr, "D room %d: %d pages differ from P's\n", k, bad);
	return bad ? 1 : 0;
}

/* Wave w's receivers, each sent once Bootstrapped; "d-sent W". */
static void d_open_wave(lc_decode_t *d, const char *bs_addr, lc_receiver_t **rcv, int w)
{
	bool sent[ROOMS] = {0};
	for (int i = 0; i < ROOMS; i++)
		TU_OK(lc_receiver_create(d, bs_addr, room_of(w * ROOMS + i), &rcv[i]));
	uint64_t dl = adv_now_ms() + 15000;
	for (int left = ROOMS; left && adv_now_ms() < dl; usleep(1000))
		for (int i = 0; i < ROOMS; i++) {
			int k = w * ROOMS + i;
			int st = sent[i] ? -1 : lc_receiver_poll(rcv[i], NULL);
			if (st != LC_ROOM_BOOTSTRAPPED && st != LC_ROOM_FAILED)
				continue;
			int64_t pages[NPAGES];
			for (int j = 0; j < NPAGES; j++)
				pages[j] = adv_d_page(k, j);
			lc_receiver_pages_t pg = {.size = sizeof pg,
						  .pages = pages,
						  .page_count = NPAGES,
						  .aux_index = k};
			if (st == LC_ROOM_BOOTSTRAPPED)
				TU_OK(lc_receiver_send(rcv[i], &pg));
			sent[i] = true;
			left--;
		}
	say("d-sent %d", w);
}

/* A lane into D's own listener with the token D gave P's rank 0: HELLO,
 * its reply, then closed by this side (the listener sees its peer go). */
static void d_lane_closed(lc_decode_t *d)
{
	char host[64];
	int port = 0;
	pthread_mutex_lock(&d->lock);
	TU_CHECK(d->npeers == 1 && d->peers[0]->ranks && d->peers[0]->ranks[0].has_token,
		 "P rank 0 holds no token of D's");
	lc_token_t token = d->peers[0]->ranks[0].token;
	pthread_mutex_unlock(&d->lock);
	TU_CHECK(sscanf(d->data_url, "tcp://%63[^:]:%d", host, &port) == 2, "%s", d->data_url);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, host, &sa.sin_addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	TU_CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "connect %s",
		 d->data_url);
	uint8_t f[LC__TCP_CTRL_LEN];
	lc__tcp_ctrl_t hello = {.type = LC__TCP_HELLO,
				.status = LC__TCP_HELLO_TOKEN,
				.a = lc__get_u64(token.bytes),
				.b = lc__get_u64(token.bytes + 8)};
	lc__tcp_encode_ctrl(f, &hello);
	TU_CHECK(send(fd, f, sizeof f, MSG_NOSIGNAL) == (ssize_t)sizeof f, "HELLO");
	size_t got = 0;
	struct pollfd p = {.fd = fd, .events = POLLIN};
	while (got < sizeof f && poll(&p, 1, 5000) == 1) {
		ssize_t n = recv(fd, f + got, sizeof f - got, 0);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	lc__tcp_ctrl_t reply;
	lc__tcp_decode_ctrl(f, &reply);
	TU_CHECK(got == sizeof f && reply.type == LC__TCP_HELLO_REPLY && reply.status == 0,
		 "HELLO_REPLY (%zu bytes, status %d)", got, reply.status);
	close(fd);
	usleep(300000); /* well inside D's window for a P gone */
}

/* Per wave on 'g': open, send, wait, check; "d-done W FAILURES". */
static int d_child(void *arg, int go_fd)
{
	const char *bs_addr = arg;
	tu_pool_t s;
	lc_decode_t *d;
	lc_receiver_t *rcv[WAVES][ROOMS] = {{0}};
	int failures = 0;
	tu_pool_init(&s, "d0", the_fault == P_KILLED_MID ? NULL : D_KNOBS, LAYERS, PAGES, ITEM);
	memset(s.mem, CANARY, s.len);
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = s.layout,
				 .regions = &s.region,
				 .region_count = 1,
				 .listen_url = "tcp://127.0.0.1:0"};
	int rc = lc_decode_create(s.ctx, &dp, &d);
	if (rc == LC_ERR_NO_TRANSPORT || rc == LC_ENOTSUP) {
		fprintf(stderr, "skip: %s\n", lc_strerror(rc));
		return TU_SKIP;
	}
	TU_OK(rc);
	say("d-up");
	for (int w = 0; w < WAVES && adv_wait_byte(go_fd) == 'g'; w++) {
		d_open_wave(d, bs_addr, rcv[w], w);
		if (the_fault == LANE_CLOSED && w == 0) {
			d_lane_closed(d);
			uint64_t n = 0;
			TU_OK(lc_decode_counter(d, "lanes_closed", &n));
			say("d-lanes %llu", (unsigned long long)n);
		}
		int f = 0;
		for (int i = 0; i < ROOMS; i++)
			f += d_check_room(rcv[w][i], &s, w * ROOMS + i);
		failures += f;
		say("d-done %d %d", w, f);
	}
	for (int w = 0; w < WAVES; w++)
		for (int i = 0; i < ROOMS; i++)
			lc_receiver_destroy(rcv[w][i]);
	lc_decode_destroy(d);
	tu_pool_fini(&s);
	return failures ? 1 : 0;
}

/* ==== the standalone bootstrap server ==== */

static pid_t server_pid;

static void server_kill(void)
{
	if (server_pid > 0) {
		kill(server_pid, SIGKILL);
		waitpid(server_pid, NULL, 0);
		server_pid = 0;
	}
}

/* `cli bootstrap` on port 0; its address ("127.0.0.1:PORT") in addr. */
static void server_start(const char *cli, char *addr, size_t cap)
{
	int out[2];
	TU_CHECK(pipe(out) == 0, "pipe: %s", strerror(errno));
	server_pid = fork();
	TU_CHECK(server_pid >= 0, "fork: %s", strerror(errno));
	if (server_pid == 0) {
		dup2(out[1], 1);
		close(out[0]);
		setenv("LAYERCAKE_LOG", "warn", 1);
		execl(cli, cli, "bootstrap", "--host", "127.0.0.1", "--port", "0", (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	atexit(server_kill);
	char line[128] = "";
	size_t n = 0;
	struct pollfd p = {.fd = out[0], .events = POLLIN};
	while (n < sizeof line - 1 && poll(&p, 1, 10000) == 1) {
		if (read(out[0], line + n, 1) != 1 || line[n] == '\n')
			break;
		n++;
	}
	line[n] = '\0';
	close(out[0]);
	if (strstr(line, "not built") || strstr(line, "not supported")) {
		server_kill();
		exit(TU_SKIP);
	}
	char a[64];
	TU_CHECK(sscanf(line, "listening %63s", a) == 1, "server said \"%s\"", line);
	snprintf(addr, cap, "%s", a);
}

/* SLOW_CONNS connections to addr, each with a request never finished. */
static int slow_clients(const char *addr, int *fds)
{
	char host[64];
	int port = 0, n = 0;
	TU_CHECK(sscanf(addr, "%63[^:]:%d", host, &port) == 2, "address %s", addr);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, host, &sa.sin_addr);
	static const char partial[] = "GET /health HTTP/1.1\r\nHost: x\r\n";
	for (int i = 0; i < SLOW_CONNS; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		if (fds[i] < 0)
			continue;
		/* Non-blocking: the ones past the server's backlog stay pending. */
		if (connect(fds[i], (struct sockaddr *)&sa, sizeof sa) == 0 || errno == EINPROGRESS)
			n++;
	}
	usleep(100000);
	for (int i = 0; i < SLOW_CONNS; i++)
		if (fds[i] >= 0 && send(fds[i], partial, sizeof partial - 1, MSG_NOSIGNAL) < 0 &&
		    errno != EAGAIN && errno != ENOTCONN)
			fprintf(stderr, "slow client %d: %s\n", i, strerror(errno));
	return n;
}

/* ==== the parent ==== */

/* "d-final" lines of one wave: rooms that failed; with want_fail each must
 * have failed as session_gone, naming P's address, in time. */
static int check_finals(adv_proc_t *d, int w, bool want_fail, const char *bs_addr, uint64_t t0,
			int bound_ms)
{
	int bad = 0;
	char line[512];
	for (int i = 0; i < ROOMS; i++) {
		if (!adv_wait_line(d, "d-final ", 20000, line, sizeof line)) {
			fprintf(stderr, "wave %d: D room %d never final\n", w, i);
			return bad + 1;
		}
		uint64_t ms = adv_now_ms() - t0;
		fprintf(stderr, "wave %d, %llu ms after the fault: %s\n", w, (unsigned long long)ms,
			line);
		bool success = strstr(line, " Success ") != NULL;
		if (!want_fail) {
			bad += !success;
			continue;
		}
		char named[96];
		snprintf(named, sizeof named, "P at %s", bs_addr);
		if (success || !strstr(line, "session_gone") || !strstr(line, named)) {
			fprintf(stderr, "want Failed (session_gone) naming \"%s\"\n", named);
			bad++;
		}
		if (ms > (uint64_t)bound_ms) {
			fprintf(stderr, "failed %llu ms after P died (bound %d ms)\n",
				(unsigned long long)ms, bound_ms);
			bad++;
		}
	}
	return bad;
}

/* One wave: D registers and sends, P bootstraps, the fault (wave 0), P
 * computes, D's rooms are checked. */
static int run_wave(adv_proc_t *p, adv_proc_t *d, int w, enum fault f, const char *bs_addr,
		    int *slow)
{
	char line[256];
	adv_go(p);
	adv_go(d);
	snprintf(line, sizeof line, "d-sent %d", w);
	TU_CHECK(adv_wait_line(d, line, 20000, NULL, 0), "D never sent wave %d", w);
	snprintf(line, sizeof line, "p-bootstrapped %d", w);
	TU_CHECK(adv_wait_line(p, line, 20000, NULL, 0), "P never bootstrapped wave %d", w);
	uint64_t t0 = adv_now_ms();
	if (w == 0 && f == BOOTSTRAP_KILLED)
		server_kill();
	if (w == 0 && f == BOOTSTRAP_SLOW)
		fprintf(stderr, "%d slow connections held\n", slow_clients(bs_addr, slow));
	if (w == 0 && f == P_KILLED) {
		kill(p->pid, SIGKILL);
		return check_finals(d, w, true, bs_addr, t0, P_DEAD_BOUND_MS);
	}
	if (w == 0 && f == P_KILLED_MID) {
		adv_go(p);
		TU_CHECK(adv_wait_line(p, "p-mid 0", 20000, NULL, 0), "P never got mid-transfer");
		t0 = adv_now_ms();
		kill(p->pid, SIGKILL);
		return check_finals(d, w, true, bs_addr, t0, P_GONE_BOUND_MS);
	}
	if (w == 0 && f == LANE_CLOSED) {
		unsigned long long n = 0;
		if (!adv_wait_line(d, "d-lanes ", 20000, line, sizeof line) ||
		    sscanf(line, "d-lanes %llu", &n) != 1 || !n) {
			fprintf(stderr, "D: '%s' (want lanes_closed counted)\n", line);
			return 1;
		}
	} else if (w == 0) {
		usleep(FAULT_MS * 1000); /* longer than the heartbeat's patience */
	}
	adv_go(p);
	int bad = check_finals(d, w, false, bs_addr, t0, 0);
	int pf = -1;
	snprintf(line, sizeof line, "p-done %d", w);
	if (!adv_wait_line(p, line, 20000, line, sizeof line) ||
	    sscanf(line, "p-done %*d %d", &pf) != 1 || pf) {
		fprintf(stderr, "P: '%s' (want p-done %d 0)\n", line, w);
		bad++;
	}
	return bad;
}

static int run_case(enum fault f, const char *cli)
{
	char bs_addr[64];
	int slow[SLOW_CONNS];
	adv_proc_t p, d;
	for (int i = 0; i < SLOW_CONNS; i++)
		slow[i] = -1;
	the_fault = f;
	server_start(cli, bs_addr, sizeof bs_addr);
	adv_spawn(&p, p_child, bs_addr);
	TU_CHECK(adv_wait_line(&p, "p-up", 15000, NULL, 0), "P did not start");
	adv_spawn(&d, d_child, bs_addr);
	TU_CHECK(adv_wait_line(&d, "d-up", 15000, NULL, 0), "D did not start");
	int bad = run_wave(&p, &d, 0, f, bs_addr, slow);
	bool killed = f == P_KILLED || f == P_KILLED_MID;
	if (!killed)
		bad += run_wave(&p, &d, 1, f, bs_addr, slow);
	int rc = adv_reap(&d, 20000);
	if (rc && !killed) /* D's own verdict counts the failures wanted */
		fprintf(stderr, "D exited %d\n", rc), bad++;
	rc = adv_reap(&p, 20000);
	if (rc && !killed)
		fprintf(stderr, "P exited %d\n", rc), bad++;
	for (int i = 0; i < SLOW_CONNS; i++)
		if (slow[i] >= 0)
			close(slow[i]);
	server_kill();
	fprintf(stderr, "%s\n", bad ? "FAIL" : "ok");
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	tu_watchdog(110);
	if (argc != 3) {
		fprintf(stderr,
			"usage: %s bootstrap_killed|bootstrap_slow|p_killed|p_killed_mid CLI\n",
			argv[0]);
		return 2;
	}
	if (!strcmp(argv[1], "bootstrap_killed"))
		return run_case(BOOTSTRAP_KILLED, argv[2]);
	if (!strcmp(argv[1], "bootstrap_slow"))
		return run_case(BOOTSTRAP_SLOW, argv[2]);
	if (!strcmp(argv[1], "p_killed"))
		return run_case(P_KILLED, argv[2]);
	if (!strcmp(argv[1], "p_killed_mid"))
		return run_case(P_KILLED_MID, argv[2]);
	if (!strcmp(argv[1], "lane_closed"))
		return run_case(LANE_CLOSED, argv[2]);
	fprintf(stderr, "unknown case %s\n", argv[1]);
	return 2;
}
