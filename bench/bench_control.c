/*
 * `layercake bench control`: the control plane's rate. Rooms of one page
 * and one layer go end to end through a bootstrap server, an lc_prefill_t
 * and an lc_decode_t (P and D are two threads of this process, with their
 * own contexts; data over tcp on loopback by default). So little data
 * moves that the rate is the control plane's: discovery is cached after
 * the warm-up room, then per room: D's receiver, its transfer info, P's
 * sender and engine room, one write, P's status to D.
 *
 * D drives: it keeps `inflight` rooms open and hands each new room id to P.
 * P gathers every Bootstrapped room into one forward (one batch, one layer
 * record, metadata, one aux record), as a serving engine batches prefills.
 */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "layercake.h"

#define ITEM 4096
#define MAX_INFLIGHT 1024

static const char control_help[] =
	"NAME\n"
	"    layercake bench control - rooms per second through the control plane\n"
	"\n"
	"SYNOPSIS\n"
	"    layercake bench control [--rooms N] [--inflight K] [--transport tcp|shm] [--json]\n"
	"\n"
	"DESCRIPTION\n"
	"    Runs a bootstrap server, one P rank (lc_prefill_t) and one D rank\n"
	"    (lc_decode_t) as two threads with their own contexts, and streams N rooms\n"
	"    of one page (4 KiB) and one layer from P to D, K in flight. Each room is a\n"
	"    receiver (discovery cached after one warm-up room), a transfer info, a\n"
	"    sender, a chunk, a layer step, the first token and P's Success status.\n"
	"    Reports rooms per second and the latency of a room (receiver created ->\n"
	"    D sees Success) p50/p99. Nothing is timed in a test; compare runs on the\n"
	"    same machine.\n"
	"\n"
	"OPTIONS\n"
	"    --rooms N        rooms to measure (default 10000)\n"
	"    --inflight K     rooms open at once (default 32, at most 1024)\n"
	"    --transport T    data plane: tcp (default, loopback) or shm\n"
	"    --json           exactly one JSON object on stdout\n";

typedef struct side {
	lc_ctx_t *ctx;
	uint8_t *mem;
	size_t len;
	lc_region_t *region;
	lc_layout_t *layout;
} side_t;

typedef struct ctl_bench {
	int rooms, inflight;
	const char *boot_addr;
	lc_prefill_t *prefill;
	lc_engine_t *engine;
	lc_decode_t *decode;
	/* D -> P: new room ids */
	pthread_mutex_t lock;
	uint64_t *queue;
	size_t qhead, qtail, qcap;
	int qfd; /* eventfd: a room was queued, or stop */
	atomic_bool stop;
	atomic_int p_failed;
	int p_rc;
} ctl_bench_t;

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int side_init(side_t *s, const char *name, uint64_t pages)
{
	lc_ctx_params_t cp = {.size = sizeof cp, .name = name};
	void *bases[2];
	int rc = lc_ctx_create(&cp, &s->ctx);
	if (rc)
		return rc;
	s->len = 2 * pages * ITEM;
	if ((rc = lc_mem_alloc(s->len, LC_MEM_SHAREABLE, (void **)&s->mem)))
		return rc;
	bases[0] = s->mem;
	bases[1] = s->mem + pages * ITEM;
	lc_layout_params_t lp = {.size = sizeof lp,
				 .model = LC_LAYOUT_MHA,
				 .layers = 1,
				 .pages = pages,
				 .item_len = {ITEM, ITEM},
				 .bases = bases};
	if ((rc = lc_layout_build(&lp, &s->layout)))
		return rc;
	return lc_region_register(s->ctx, s->mem, s->len, &s->region);
}

static void side_fini(side_t *s)
{
	if (s->region)
		lc_region_deregister(s->region);
	lc_layout_destroy(s->layout);
	lc_ctx_destroy(s->ctx);
	if (s->mem)
		lc_mem_free(s->mem);
}

static void kick_p(ctl_bench_t *b)
{
	uint64_t one = 1;
	if (write(b->qfd, &one, sizeof one) < 0)
		perror("bench control: eventfd");
}

/* P sleeps until D queues a room or one of P's rooms changes status: the
 * two fds a serving engine's loop would poll beside its own. */
static void p_wait(ctl_bench_t *b)
{
	uint64_t drain;
	struct pollfd fds[2] = {{.fd = lc_prefill_fd(b->prefill), .events = POLLIN},
				{.fd = b->qfd, .events = POLLIN}};
	if (poll(fds, 2, 100) <= 0)
		return;
	if ((fds[1].revents & POLLIN) && read(b->qfd, &drain, sizeof drain) < 0)
		perror("bench control: eventfd");
	lc_prefill_wait(b->prefill, 0);
}

static void push_room(ctl_bench_t *b, uint64_t room)
{
	pthread_mutex_lock(&b->lock);
	b->queue[b->qtail++ % b->qcap] = room;
	pthread_mutex_unlock(&b->lock);
	kick_p(b);
}

static bool pop_room(ctl_bench_t *b, uint64_t *room)
{
	bool got = false;
	pthread_mutex_lock(&b->lock);
	if (b->qhead != b->qtail) {
		*room = b->queue[b->qhead++ % b->qcap];
		got = true;
	}
	pthread_mutex_unlock(&b->lock);
	return got;
}

/* P: senders for the rooms D announced; one forward for all Bootstrapped. */
static void *p_thread(void *arg)
{
	ctl_bench_t *b = arg;
	int cap = b->inflight * 2 + 8, n = 0;
	lc_sender_t **s = calloc((size_t)cap, sizeof *s);
	uint64_t *rooms = calloc((size_t)cap, sizeof *rooms);
	uint8_t *started = calloc((size_t)cap, 1);
	int64_t *page = calloc((size_t)cap, sizeof *page);
	if (!s || !rooms || !started || !page) {
		b->p_rc = -ENOMEM;
		goto out;
	}
	while (!atomic_load(&b->stop) || n) {
		uint64_t room;
		while (n < cap && pop_room(b, &room)) {
			int rc = lc_sender_create(b->prefill, room, &s[n]);
			if (rc) {
				b->p_rc = rc;
				goto out;
			}
			rooms[n] = room;
			started[n] = 0;
			n++;
		}
		int ready = 0;
		for (int i = 0; i < n; i++) {
			int st = lc_sender_poll(s[i], NULL);
			if (st == LC_ROOM_SUCCESS || st == LC_ROOM_FAILED) {
				if (st == LC_ROOM_FAILED)
					atomic_fetch_add(&b->p_failed, 1);
				lc_sender_destroy(s[i]);
				n--;
				s[i] = s[n], rooms[i] = rooms[n], started[i] = started[n];
				i--;
				continue;
			}
			if (!started[i] && st >= LC_ROOM_BOOTSTRAPPED)
				ready++;
		}
		if (ready) {
			int rc = lc_engine_batch_begin(b->engine, 0);
			for (int i = 0; i < n && !rc; i++) {
				if (started[i] || lc_sender_poll(s[i], NULL) < LC_ROOM_BOOTSTRAPPED)
					continue;
				page[i] = (int64_t)(rooms[i] % (uint64_t)b->inflight);
				lc_chunk_t c = {.size = sizeof c,
						.room = rooms[i],
						.pages = &page[i],
						.page_count = 1,
						.is_last = 1};
				rc = lc_engine_chunk_add(b->engine, &c);
				started[i] = 1;
			}
			if (!rc)
				rc = lc_engine_batch_end(b->engine);
			if (!rc)
				rc = lc_engine_record_cache(b->engine);
			for (int i = 0; i < n && !rc; i++)
				if (started[i] == 1) {
					rc = lc_sender_metadata_set(s[i], "tok", 4);
					started[i] = 2;
				}
			if (!rc)
				rc = lc_engine_record_aux(b->engine);
			if (rc) {
				b->p_rc = rc;
				goto out;
			}
		}
		p_wait(b);
	}
out:
	for (int i = 0; i < n; i++)
		lc_sender_destroy(s[i]);
	free(s);
	free(rooms);
	free(started);
	free(page);
	return NULL;
}

typedef struct d_slot {
	lc_receiver_t *r;
	uint64_t room, t0;
	bool sent;
} d_slot_t;

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* D: keeps `inflight` rooms open until `total` have ended. */
static int d_run(ctl_bench_t *b, int total, uint64_t first_room, uint64_t *lat, int *failed)
{
	d_slot_t *slot = calloc((size_t)b->inflight, sizeof *slot);
	int opened = 0, ended = 0, rc = 0;
	if (!slot)
		return -ENOMEM;
	while (ended < total) {
		bool busy = false; /* did something: look again before sleeping */
		for (int k = 0; k < b->inflight; k++) {
			d_slot_t *s = &slot[k];
			if (!s->r) {
				if (opened == total)
					continue;
				s->room = first_room + (uint64_t)opened;
				/* D page k belongs to this slot; P reads page room % inflight. */
				s->t0 = now_ns();
				if ((rc = lc_receiver_create(b->decode, b->boot_addr, s->room,
							     &s->r)))
					goto out;
				push_room(b, s->room);
				s->sent = false;
				opened++;
				busy = true;
				continue;
			}
			lc_room_info_t info = {.size = sizeof info};
			int st = lc_receiver_poll(s->r, &info);
			if (!s->sent && st == LC_ROOM_BOOTSTRAPPED) {
				int64_t page = k;
				lc_receiver_pages_t pg = {.size = sizeof pg,
							  .pages = &page,
							  .page_count = 1,
							  .aux_index = k};
				if ((rc = lc_receiver_send(s->r, &pg)))
					goto out;
				s->sent = true;
			} else if (st == LC_ROOM_SUCCESS || st == LC_ROOM_FAILED) {
				if (st == LC_ROOM_FAILED) {
					(*failed)++;
					fprintf(stderr, "bench control: room %llu failed: %s\n",
						(unsigned long long)s->room, info.reason);
				} else if (lat) {
					lat[ended] = now_ns() - s->t0;
				}
				lc_receiver_destroy(s->r);
				s->r = NULL;
				ended++;
				busy = true;
			}
		}
		if (b->p_rc) {
			rc = b->p_rc;
			goto out;
		}
		if (!busy)
			lc_decode_wait(b->decode, 100);
	}
out:
	for (int k = 0; k < b->inflight; k++)
		lc_receiver_destroy(slot[k].r);
	free(slot);
	return rc;
}

int lc__bench_control(int argc, char **argv)
{
	ctl_bench_t b = {.rooms = 10000, .inflight = 32};
	const char *transport = "tcp";
	bool json = false;
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(control_help, stdout);
			return 0;
		} else if (!strcmp(argv[i], "--json")) {
			json = true;
		} else if (!strcmp(argv[i], "--rooms") && v) {
			b.rooms = atoi(v), i++;
		} else if (!strcmp(argv[i], "--inflight") && v) {
			b.inflight = atoi(v), i++;
		} else if (!strcmp(argv[i], "--transport") && v) {
			transport = v, i++;
		} else {
			fprintf(stderr, "bench control: unknown option %s (see --help)\n", argv[i]);
			return 2;
		}
	}
	if (b.rooms < 1 || b.inflight < 1 || b.inflight > MAX_INFLIGHT ||
	    (strcmp(transport, "tcp") && strcmp(transport, "shm"))) {
		fprintf(stderr, "bench control: bad --rooms, --inflight or --transport\n");
		return 2;
	}
	side_t P = {0}, D = {0};
	lc_bootstrap_t *bs = NULL;
	char addr[64];
	pthread_t pt;
	bool p_started = false;
	int rc, failed = 0, exit_code = 1;
	uint64_t *lat = calloc((size_t)b.rooms, sizeof *lat);
	b.qcap = (size_t)b.rooms + 2;
	b.queue = calloc(b.qcap, sizeof *b.queue);
	pthread_mutex_init(&b.lock, NULL);
	b.qfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!lat || !b.queue || b.qfd < 0) {
		rc = -ENOMEM;
		goto fail;
	}
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
	if ((rc = side_init(&P, "bench-P", (uint64_t)b.inflight)) ||
	    (rc = side_init(&D, "bench-D", (uint64_t)b.inflight)) ||
	    (rc = lc_bootstrap_start(&bp, &bs)) ||
	    (rc = lc_bootstrap_addr(bs, addr, sizeof addr)) < 0)
		goto fail;
	b.boot_addr = addr;
	lc_prefill_params_t pp = {.size = sizeof pp,
				  .layout = P.layout,
				  .bootstrap = addr,
				  .name = "bench-P",
				  .world_size = 1,
				  .dp_size = 1};
	char url[64];
	snprintf(url, sizeof url, "%s",
		 !strcmp(transport, "tcp") ? "tcp://127.0.0.1:0" : "shm://auto");
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = D.layout,
				 .regions = &D.region,
				 .region_count = 1,
				 .listen_url = url,
				 .tp_size = 1};
	if ((rc = lc_prefill_create(P.ctx, &pp, &b.prefill)) ||
	    (rc = lc_prefill_engine(b.prefill, &b.engine)) ||
	    (rc = lc_decode_create(D.ctx, &dp, &b.decode)))
		goto fail;
	if (pthread_create(&pt, NULL, p_thread, &b)) {
		rc = -EAGAIN;
		goto fail;
	}
	p_started = true;
	/* One warm-up room: discovery, registration, connections. */
	if ((rc = d_run(&b, 1, 1, NULL, &failed)))
		goto fail;
	uint64_t t0 = now_ns();
	if ((rc = d_run(&b, b.rooms, 100, lat, &failed)))
		goto fail;
	double s = (double)(now_ns() - t0) / 1e9;
	atomic_store(&b.stop, true);
	kick_p(&b);
	pthread_join(pt, NULL);
	p_started = false;
	uint64_t infos = 0, statuses = 0;
	lc_prefill_counter(b.prefill, "transfer_infos", &infos);
	lc_prefill_counter(b.prefill, "statuses", &statuses);
	int ok = b.rooms - failed;
	qsort(lat, (size_t)b.rooms, sizeof *lat, cmp_u64);
	/* Failed rooms left zeros at the front. */
	uint64_t *l = lat + failed;
	double p50 = ok ? (double)l[(size_t)(0.5 * (ok - 1))] / 1e3 : 0;
	double p99 = ok ? (double)l[(size_t)(0.99 * (ok - 1))] / 1e3 : 0;
	if (json)
		printf("{\"bench\":\"control\",\"transport\":\"%s\",\"rooms\":%d,\"inflight\":%d,"
		       "\"seconds\":%.3f,\"rooms_per_s\":%.1f,\"latency_p50_us\":%.1f,"
		       "\"latency_p99_us\":%.1f,\"failed\":%d,\"p_failed\":%d,"
		       "\"p_transfer_infos\":%llu,\"p_statuses\":%llu}\n",
		       transport, b.rooms, b.inflight, s, b.rooms / s, p50, p99, failed,
		       atomic_load(&b.p_failed), (unsigned long long)infos,
		       (unsigned long long)statuses);
	else
		printf("bench control %s: %d rooms (1 page, 1 layer), %d in flight: %.0f rooms/s, "
		       "room latency p50 %.0f us, p99 %.0f us, %d failed (%.2f s)\n",
		       transport, b.rooms, b.inflight, b.rooms / s, p50, p99, failed, s);
	exit_code = failed ? 1 : 0;
	goto out;
fail:
	fprintf(stderr, "bench control: %s (%s)\n", lc_strerror(rc), lc_err_name(rc));
out:
	atomic_store(&b.stop, true);
	if (p_started) {
		kick_p(&b);
		pthread_join(pt, NULL);
	}
	lc_decode_destroy(b.decode);
	lc_prefill_destroy(b.prefill);
	lc_bootstrap_stop(bs);
	side_fini(&D);
	side_fini(&P);
	pthread_mutex_destroy(&b.lock);
	if (b.qfd >= 0)
		close(b.qfd);
	free(b.queue);
	free(lat);
	return exit_code;
}
