/*
 * Adversarial tests of the prefill side and the tcp:// listener (issue 13,
 * findings 2, 6 and 8): a real P and a real D as separate processes (fork),
 * real ZeroMQ and TCP sockets on 127.0.0.1, and an attacker that forges
 * control messages with the codec or holds idle connections.
 *
 *     adversarial_prefill <case>
 *
 *   shutdown_race   dummy TRANSFER_INFOs and CANCELs stream at P's control
 *                   endpoint from another process while P runs
 *                   lc_prefill_destroy; 20 times; P must exit cleanly.
 *   cancel_unknown  CANCELs naming an unregistered session, for every room
 *                   id in use: the real D's rooms still succeed, byte-exact,
 *                   and P counts the refusals.
 *   listener_flood  ~1,100 idle TCP connections (no handshake) at D's data
 *                   listener, then a real P writes D's rooms: they succeed
 *                   and D counts the connections it closed.
 *   listener_flood_shm  the same against an shm:// listener (unix socket).
 *
 * Exit 0 pass, 1 fail, 77 skipped (a facility missing here).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "control/codec.h"
#include "pd/decode_int.h"
#include "transport/shm/shm_int.h"
#include "harness.h"
#include "rooms.h"
#include "rounds.h"
#include "testutil.h"

#define FLOOD 1100
#define RACE_RUNS 20

#define say(...) tu_say(adv_status_fd, __VA_ARGS__)

/* ==== P process ==== */

typedef enum p_mode { P_SHUTDOWN, P_ROOMS } p_mode_t;

static int p_main(p_mode_t mode, int go_fd)
{
	adv_p_t P;
	lc_sender_t *snd[ROOMS] = {0};
	adv_p_up(&P, NULL, adv_seed_of);
	lc_prefill_t *pf = P.pf;
	lc_engine_t *eng = P.eng;
	int failures = 0;
	if (mode == P_ROOMS) {
		for (int i = 0; i < ROOMS; i++)
			TU_OK(lc_sender_create(pf, ROOM0 + (uint64_t)i, &snd[i]));
		uint64_t dl = adv_now_ms() + 15000;
		for (int i = 0; i < ROOMS; i++)
			while (lc_sender_poll(snd[i], NULL) == LC_ROOM_BOOTSTRAPPING &&
			       adv_now_ms() < dl)
				usleep(2000);
		say("bootstrapped");
		adv_wait_byte(go_fd);
		failures = adv_p_forward(eng, snd);
		uint64_t refused = 0;
		lc_prefill_counter(pf, "cancels_refused", &refused);
		say("p-done %d %llu", failures, (unsigned long long)refused);
	}
	adv_wait_byte(go_fd); /* P_SHUTDOWN: go; P_ROOMS: quit */
	for (int i = 0; i < ROOMS; i++)
		lc_sender_destroy(snd[i]);
	adv_p_down(&P);
	return 0;
}

/* ==== D process ==== */

/* ==== the parent ==== */

static int p_child(void *arg, int go_fd)
{
	return p_main((p_mode_t)(intptr_t)arg, go_fd);
}

/* P up: its bootstrap address and control endpoint. */
static void start_p(adv_proc_t *p, p_mode_t mode, char *addr, char *ep)
{
	char line[512];
	adv_spawn(p, p_child, (void *)(intptr_t)mode);
	TU_CHECK(adv_wait_line(p, "addr ", 15000, line, sizeof line) &&
			 sscanf(line, "addr %63s %299s", addr, ep) == 2,
		 "P did not start");
}

static void forge_cancel(lc__msg_t *m, uint64_t room, const char *session)
{
	memset(m, 0, sizeof *m);
	m->type = LC__MSG_CANCEL;
	m->cancel.room = room;
	snprintf(m->cancel.session, sizeof m->cancel.session, "%s", session);
	snprintf(m->cancel.reason, sizeof m->cancel.reason, "forged");
}

/* ---- shutdown_race ---- */

/* The attacker: dummy transfer infos (no registration needed) and cancels,
 * as fast as the socket takes them, until killed. */
static int flood_child(void *arg, int go_fd)
{
	const char *ep = arg;
	LC__UNUSED(go_fd);
	void *zc = zmq_ctx_new();
	void *tx = adv_push_to(zc, ep);
	lc__msg_t m;
	say("flooding");
	for (uint64_t k = 0;; k++) {
		memset(&m, 0, sizeof m);
		m.type = LC__MSG_TRANSFER_INFO;
		m.info.room = 1000 + k;
		snprintf(m.info.session, sizeof m.info.session, "attacker");
		snprintf(m.info.status_ep, sizeof m.info.status_ep, "tcp://127.0.0.1:1");
		m.info.required_dst = 1;
		m.info.flags = LC__INFO_DUMMY;
		m.info.aux_index = -1;
		adv_send_msg(tx, &m, ZMQ_DONTWAIT);
		forge_cancel(&m, 1000 + k - (k > 8 ? 8 : 0), "attacker");
		adv_send_msg(tx, &m, ZMQ_DONTWAIT);
	}
	return 0;
}

static int case_shutdown_race(void)
{
	int crashed = 0;
	for (int run = 0; run < RACE_RUNS; run++) {
		adv_proc_t p, a;
		char addr[64], ep[300];
		start_p(&p, P_SHUTDOWN, addr, ep);
		adv_spawn(&a, flood_child, ep);
		TU_CHECK(adv_wait_line(&a, "flooding", 10000, NULL, 0), "attacker did not start");
		usleep(100000 + 10000 * (useconds_t)(run % 5));
		adv_go(&p);
		int rc = adv_reap(&p, 20000);
		kill(a.pid, SIGKILL);
		adv_reap(&a, 5000);
		if (rc) {
			fprintf(stderr, "run %d: P exited %d\n", run, rc);
			crashed++;
		}
	}
	fprintf(stderr, "%d of %d runs crashed\n", crashed, RACE_RUNS);
	return crashed ? 1 : 0;
}

/* ---- cancel_unknown ---- */

static int case_cancel_unknown(void)
{
	adv_proc_t p, d;
	char addr[64], ep[300], line[128];
	start_p(&p, P_ROOMS, addr, ep);
	adv_spawn(&d, adv_d_child, &(adv_d_arg_t){addr, "tcp://127.0.0.1:0"});
	adv_go(&d);
	TU_CHECK(adv_wait_line(&p, "bootstrapped", 20000, NULL, 0), "P never bootstrapped");
	/* Every room id in use, from two sessions P never registered (one
	 * shaped like a D's session id). */
	void *zc = zmq_ctx_new();
	void *tx = adv_push_to(zc, ep);
	lc__msg_t m;
	for (int i = 0; i < ROOMS; i++) {
		forge_cancel(&m, ROOM0 + (uint64_t)i, "mallory@127.0.0.1:1");
		adv_send_msg(tx, &m, 0);
		forge_cancel(&m, ROOM0 + (uint64_t)i, "d0@127.0.0.1:1");
		adv_send_msg(tx, &m, 0);
	}
	usleep(500000); /* P's control thread takes them before the forward */
	adv_go(&p);
	int rc = adv_reap(&d, 30000);
	int failures = rc != 0;
	if (rc)
		fprintf(stderr, "D exited %d\n", rc);
	unsigned long long refused = 0;
	int pfail = -1;
	if (!adv_wait_line(&p, "p-done", 20000, line, sizeof line) ||
	    sscanf(line, "p-done %d %llu", &pfail, &refused) != 2 || pfail ||
	    refused != 2 * ROOMS) {
		fprintf(stderr, "P: '%s' (want p-done 0 %d)\n", line, 2 * ROOMS);
		failures++;
	}
	adv_go(&p);
	rc = adv_reap(&p, 20000);
	if (rc) {
		fprintf(stderr, "P exited %d\n", rc);
		failures++;
	}
	zmq_close(tx);
	zmq_ctx_term(zc);
	return failures ? 1 : 0;
}

/* ---- listener_flood ---- */

/* Idle connections to D's listener url: no byte is ever sent on them. */
static int flood_connect(const char *url, int *fds, int n)
{
	struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_un un;
	struct sockaddr *a = (struct sockaddr *)&in;
	socklen_t alen = sizeof in;
	bool shm = !strncmp(url, "shm://", 6);
	char name[LC__SHM_NAME_MAX + 1];
	if (shm) {
		TU_OK(lc__shm_name_from_url(url, name, sizeof name, false));
		alen = lc__shm_addr(name, &un);
		a = (struct sockaddr *)&un;
	} else {
		in.sin_port = htons((uint16_t)atoi(strrchr(url, ':') + 1));
	}
	int k = 0;
	for (; k < n; k++) {
		fds[k] = socket(shm ? AF_UNIX : AF_INET,
				(shm ? SOCK_SEQPACKET : SOCK_STREAM) | SOCK_NONBLOCK | SOCK_CLOEXEC,
				0);
		if (fds[k] < 0)
			break;
		if (connect(fds[k], a, alen) && errno != EINPROGRESS && errno != EAGAIN) {
			close(fds[k]);
			break;
		}
		if (k % 64 == 63)
			usleep(5000); /* let D drain its accept queue (backlog 128) */
	}
	return k;
}

static int case_listener_flood(const char *listen_url)
{
	/* Enough descriptors for the flood here and at D (which inherits). */
	struct rlimit rl;
	TU_CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0, "getrlimit");
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < FLOOD + 256) {
		fprintf(stderr, "skip: RLIMIT_NOFILE hard limit %llu\n",
			(unsigned long long)rl.rlim_max);
		return TU_SKIP;
	}
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? 4 * FLOOD : rl.rlim_max;
	TU_CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit");
	adv_proc_t p, d;
	char addr[64], ep[300], line[512], url[300];
	start_p(&p, P_ROOMS, addr, ep);
	adv_spawn(&d, adv_d_child, &(adv_d_arg_t){addr, listen_url});
	TU_CHECK(adv_wait_line(&d, "d-url ", 15000, line, sizeof line) &&
			 sscanf(line, "d-url %299s", url) == 1,
		 "D did not start");
	if (strncmp(url, listen_url, 6)) {
		fprintf(stderr, "skip: D's listener is %s\n", url);
		return TU_SKIP;
	}
	static int fds[FLOOD];
	int n = flood_connect(url, fds, FLOOD);
	fprintf(stderr, "flood: %d idle connections open\n", n);
	TU_CHECK(n >= 1030, "only %d connections", n);
	usleep(1000000); /* D has accepted them all */
	adv_go(&d);
	TU_CHECK(adv_wait_line(&p, "bootstrapped", 20000, NULL, 0), "P never bootstrapped");
	adv_go(&p);
	int failures = 0;
	unsigned long long evicted = 0;
	int dfail = -1;
	if (!adv_wait_line(&d, "d-done", 30000, line, sizeof line) ||
	    sscanf(line, "d-done %d %llu", &dfail, &evicted) != 2 || dfail || evicted == 0) {
		fprintf(stderr, "D: '%s' (want d-done 0 and evictions)\n", line);
		failures++;
	}
	fprintf(stderr, "D closed %llu idle connections\n", evicted);
	int rc = adv_reap(&d, 20000);
	failures += rc != 0;
	adv_go(&p);
	rc = adv_reap(&p, 20000);
	failures += rc != 0;
	for (int k = 0; k < n; k++)
		close(fds[k]);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	tu_watchdog(110);
	if (argc != 2) {
		fprintf(stderr, "usage: %s shutdown_race|cancel_unknown|listener_flood[_shm]\n",
			argv[0]);
		return 2;
	}
	if (!strcmp(argv[1], "shutdown_race"))
		return case_shutdown_race();
	if (!strcmp(argv[1], "cancel_unknown"))
		return case_cancel_unknown();
	if (!strcmp(argv[1], "listener_flood"))
		return case_listener_flood("tcp://127.0.0.1:0");
	if (!strcmp(argv[1], "listener_flood_shm"))
		return case_listener_flood("shm://auto");
	fprintf(stderr, "unknown case %s\n", argv[1]);
	return 2;
}
