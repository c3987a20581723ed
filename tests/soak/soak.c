/*
 * Soak (issue 8): many rooms with random sizes, chunking and layer-wise
 * intervals over tcp://, from 2 P ranks to 4 D sessions, every page
 * checked at D against a checksum of P's bytes. Passes with 0 mismatches,
 * 0 rooms lost (every room Success on both sides) and memory that stays
 * bounded (RSS of every process at the end vs after the first wave).
 *
 *     lc_soak [--rooms N] [--seed S] [--wave W] [--json FILE]
 *
 * Processes: one P process (bootstrap server + 2 P ranks, dp 2: rank =
 * room % 2, layerwise_interval 1 on rank 0 and 3 on rank 1) and 4 D
 * processes (one D rank each). Rooms run in waves of W in flight at once.
 * Both sides derive every room from the seed: its D (room % 4), its page
 * count (1..32), its chunk count (1..4), its P pages (random, with
 * repeats), and at D its destination pages (a random permutation of D's
 * pool, so runs are rarely contiguous).
 *
 * Exit 0 on success; prints one summary line (and --json FILE).
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/ctx.h"
#include "testutil.h"

#define LAYERS 8
#define NBUF (2 * LAYERS)
#define ITEM 4096
#define P_PAGES 256
#define D_PAGES 1024
#define MAX_PAGES 32
#define MAX_CHUNKS 4
#define ND 4
#define NRANKS 2
#define MAX_WAVE 128
#define META_LEN 64

static int n_rooms = 10000, wave = 64;
static uint64_t seed = 1;

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rss_kib(void)
{
	unsigned long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f) {
		if (fscanf(f, "%lu %lu", &size, &res) != 2)
			res = 0;
		fclose(f);
	}
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE) / 1024;
}

/* Room r (0-based) of the run. */
typedef struct spec {
	uint64_t id;
	int d, rank, pages, chunks;
	int src[MAX_PAGES];
} spec_t;

static void room_spec(int r, spec_t *s)
{
	uint64_t st = seed * 1000003ull + (uint64_t)r;
	s->id = 1 + (uint64_t)r;
	s->d = r % ND;
	s->rank = (int)(s->id % NRANKS);
	s->pages = 1 + (int)(splitmix(&st) % MAX_PAGES);
	s->chunks = 1 + (int)(splitmix(&st) % MAX_CHUNKS);
	if (s->chunks > s->pages)
		s->chunks = s->pages;
	for (int j = 0; j < s->pages; j++)
		s->src[j] = (int)(splitmix(&st) % P_PAGES);
}

/* Pages [first, first+count) of chunk k of a room. */
static void chunk_range(const spec_t *s, int k, int *first, int *count)
{
	int per = s->pages / s->chunks;
	*first = k * per;
	*count = k == s->chunks - 1 ? s->pages - k * per : per;
}

static uint64_t page_seed(int b, int p)
{
	return 77 + (uint64_t)b * P_PAGES + (uint64_t)p;
}

static void metadata_of(uint64_t room, uint8_t *out)
{
	tu_fill(out, META_LEN, room * 131 + 3);
}

static int out_fd = -1;
#define say(...) tu_say(out_fd, __VA_ARGS__)

typedef tu_pool_t side_t;

static void side_init(side_t *s, const char *name, int pages, bool fill, int interval)
{
	char knobs[64] = "";
	if (interval)
		snprintf(knobs, sizeof knobs, "layerwise_interval=%d", interval);
	tu_pool_init(s, name, knobs, LAYERS, (uint64_t)pages, ITEM);
	for (int b = 0; fill && b < NBUF; b++)
		for (int p = 0; p < pages; p++)
			tu_fill((uint8_t *)s->bases[b] + (size_t)p * ITEM, ITEM, page_seed(b, p));
}

static void side_fini(side_t *s)
{
	tu_pool_fini(s);
}

/* ==== P: one process, bootstrap server and two ranks ==== */

static int p_main(int addr_fd)
{
	side_t side[NRANKS];
	lc_prefill_t *pf[NRANKS];
	lc_engine_t *eng[NRANKS];
	lc_bootstrap_t *bs;
	char addr[64];
	lc_bootstrap_params_t bp = {.size = sizeof bp, .host = "127.0.0.1", .port = 0};
	TU_OK(lc_bootstrap_start(&bp, &bs));
	lc_bootstrap_addr(bs, addr, sizeof addr);
	for (int r = 0; r < NRANKS; r++) {
		char name[16];
		snprintf(name, sizeof name, "p%d", r);
		side_init(&side[r], name, P_PAGES, true, r == 0 ? 1 : 3);
		lc_prefill_params_t pp = {.size = sizeof pp,
					  .layout = side[r].layout,
					  .bootstrap = addr,
					  .name = name,
					  .world_size = NRANKS,
					  .dp_size = NRANKS,
					  .engine_rank = r,
					  .metrics_server = bs};
		TU_OK(lc_prefill_create(side[r].ctx, &pp, &pf[r]));
		TU_OK(lc_prefill_engine(pf[r], &eng[r]));
	}
	if (write(addr_fd, addr, sizeof addr) != (ssize_t)sizeof addr)
		return 3;
	close(addr_fd);
	uint64_t rss_first = 0, st = seed ^ 0xabcdef;
	int failed = 0, lost = 0, ok = 0;
	static spec_t sp[MAX_WAVE];
	lc_sender_t *snd[MAX_WAVE];
	for (int base = 0; base < n_rooms; base += wave) {
		int n = LC__MIN(wave, n_rooms - base);
		for (int k = 0; k < n; k++) {
			room_spec(base + k, &sp[k]);
			TU_OK(lc_sender_create(pf[sp[k].rank], sp[k].id, &snd[k]));
		}
		uint64_t dl = now_ms() + 60000;
		for (bool all = false; !all && now_ms() < dl; usleep(500)) {
			all = true;
			for (int k = 0; k < n && all; k++)
				all = lc_sender_poll(snd[k], NULL) != LC_ROOM_BOOTSTRAPPING;
		}
		for (int c = 0; c < MAX_CHUNKS; c++) {
			bool any = false;
			for (int k = 0; k < n; k++)
				any |= c < sp[k].chunks;
			if (!any)
				break;
			for (int r = 0; r < NRANKS; r++) {
				TU_OK(lc_engine_batch_begin(eng[r], 0));
				for (int k = 0; k < n; k++) {
					if (sp[k].rank != r || c >= sp[k].chunks)
						continue;
					int first, count;
					chunk_range(&sp[k], c, &first, &count);
					int64_t pages[MAX_PAGES];
					for (int j = 0; j < count; j++)
						pages[j] = sp[k].src[first + j];
					lc_chunk_t ch = {.size = sizeof ch,
							 .room = sp[k].id,
							 .pages = pages,
							 .page_count = (size_t)count,
							 .dst_index = (uint64_t)first,
							 .is_last = c == sp[k].chunks - 1};
					int rc = lc_engine_chunk_add(eng[r], &ch);
					if (rc)
						fprintf(stderr, "P: room %llu chunk %d: %s\n",
							(unsigned long long)sp[k].id, c,
							lc_strerror(rc));
				}
				TU_OK(lc_engine_batch_end(eng[r]));
			}
			/* The forward: layers with random gaps (0..300 us). */
			for (int l = 0; l < LAYERS; l++) {
				usleep((useconds_t)(splitmix(&st) % 300));
				for (int r = 0; r < NRANKS; r++)
					TU_OK(lc_engine_record_cache(eng[r]));
			}
			for (int r = 0; r < NRANKS; r++)
				TU_OK(lc_engine_record_aux(eng[r]));
		}
		for (int k = 0; k < n; k++) {
			uint8_t meta[META_LEN];
			metadata_of(sp[k].id, meta);
			TU_OK(lc_sender_metadata_set(snd[k], meta, sizeof meta));
		}
		dl = now_ms() + 60000;
		for (int k = 0; k < n; k++) {
			lc_room_info_t info = {.size = sizeof info};
			int s;
			while ((s = lc_sender_poll(snd[k], &info)) != LC_ROOM_SUCCESS &&
			       s != LC_ROOM_FAILED && now_ms() < dl)
				usleep(200);
			if (s == LC_ROOM_SUCCESS)
				ok++;
			else if (s == LC_ROOM_FAILED) {
				failed++;
				fprintf(stderr, "P: room %llu Failed (%s): %s\n",
					(unsigned long long)sp[k].id,
					lc_fail_reason_name(info.fail_reason), info.reason);
			} else
				lost++;
			lc_sender_destroy(snd[k]);
		}
		if (!base)
			rss_first = rss_kib();
	}
	lc_engine_metrics_t m[NRANKS];
	uint64_t active = 0, bytes = 0;
	for (int r = 0; r < NRANKS; r++) {
		m[r] = (lc_engine_metrics_t){.size = sizeof m[r]};
		TU_OK(lc_engine_metrics(eng[r], &m[r]));
		active += m[r].rooms_active;
		bytes += m[r].bytes_acked;
	}
	say("p %d %d %d %llu %llu %llu %llu", ok, failed, lost, (unsigned long long)active,
	    (unsigned long long)bytes, (unsigned long long)rss_first,
	    (unsigned long long)rss_kib());
	for (int r = 0; r < NRANKS; r++) {
		lc_prefill_destroy(pf[r]);
		side_fini(&side[r]);
	}
	lc_bootstrap_stop(bs);
	return failed || lost ? 1 : 0;
}

/* ==== D: one process per session ==== */

typedef struct droom {
	spec_t s;
	lc_receiver_t *r;
	int64_t dst[MAX_PAGES];
	bool sent, final;
} droom_t;

static int d_main(int d, const char *addr)
{
	char name[16];
	snprintf(name, sizeof name, "d%d", d);
	side_t s;
	side_init(&s, name, D_PAGES, false, 0);
	lc_decode_t *dec;
	lc_decode_params_t dp = {.size = sizeof dp,
				 .layout = s.layout,
				 .regions = &s.region,
				 .region_count = 1,
				 .listen_url = "tcp://127.0.0.1:0",
				 .tp_size = 1,
				 .tp_rank = 0};
	TU_OK(lc_decode_create(s.ctx, &dp, &dec));
	/* Checksums of every P page (the D side knows P's fill). */
	static uint64_t sum[NBUF][P_PAGES];
	uint8_t *tmp = malloc(ITEM);
	for (int b = 0; b < NBUF; b++)
		for (int p = 0; p < P_PAGES; p++) {
			tu_fill(tmp, ITEM, page_seed(b, p));
			sum[b][p] = tu_checksum(tmp, ITEM);
		}
	free(tmp);
	int perm[D_PAGES];
	uint64_t st = seed * 7919 + (uint64_t)d, pages_checked = 0, bytes = 0, rss_first = 0;
	int mismatches = 0, failed = 0, lost = 0, ok = 0;
	static droom_t dr[MAX_WAVE];
	for (int base = 0; base < n_rooms; base += wave) {
		int n = 0, lim = LC__MIN(wave, n_rooms - base);
		for (int i = 0; i < D_PAGES; i++)
			perm[i] = i;
		for (int i = D_PAGES - 1; i > 0; i--) {
			int j = (int)(splitmix(&st) % (uint64_t)(i + 1)), t = perm[i];
			perm[i] = perm[j];
			perm[j] = t;
		}
		int used = 0;
		for (int k = 0; k < lim; k++) {
			spec_t sp;
			room_spec(base + k, &sp);
			if (sp.d != d)
				continue;
			droom_t *x = &dr[n++];
			*x = (droom_t){.s = sp};
			for (int j = 0; j < sp.pages; j++)
				x->dst[j] = perm[used++];
			TU_OK(lc_receiver_create(dec, addr, sp.id, &x->r));
		}
		uint64_t dl = now_ms() + 120000;
		for (int left = n; left && now_ms() < dl; usleep(200)) {
			for (int k = 0; k < n; k++) {
				droom_t *x = &dr[k];
				if (x->final)
					continue;
				lc_room_info_t info = {.size = sizeof info};
				int stt = lc_receiver_poll(x->r, &info);
				if (stt == LC_ROOM_BOOTSTRAPPED && !x->sent) {
					lc_receiver_pages_t pg = {.size = sizeof pg,
								  .pages = x->dst,
								  .page_count = (size_t)x->s.pages,
								  .aux_index = -1};
					TU_OK(lc_receiver_send(x->r, &pg));
					x->sent = true;
				}
				if (stt != LC_ROOM_SUCCESS && stt != LC_ROOM_FAILED)
					continue;
				x->final = true;
				left--;
				if (stt == LC_ROOM_FAILED) {
					failed++;
					fprintf(stderr, "D%d: room %llu Failed (%s): %s\n", d,
						(unsigned long long)x->s.id,
						lc_fail_reason_name(info.fail_reason), info.reason);
					continue;
				}
				ok++;
				uint8_t meta[LC_METADATA_MAX], want[META_LEN];
				metadata_of(x->s.id, want);
				if (lc_receiver_metadata(x->r, meta, sizeof meta) != META_LEN ||
				    memcmp(meta, want, META_LEN))
					mismatches++;
				for (int b = 0; b < NBUF; b++)
					for (int j = 0; j < x->s.pages; j++) {
						const uint8_t *pg = (uint8_t *)s.bases[b] +
								    (size_t)x->dst[j] * ITEM;
						pages_checked++;
						bytes += ITEM;
						if (tu_checksum(pg, ITEM) != sum[b][x->s.src[j]]) {
							if (mismatches < 10)
								fprintf(stderr,
									"D%d: room %llu buffer %d "
									"page %d: checksum mismatch\n",
									d,
									(unsigned long long)x->s.id,
									b, j);
							mismatches++;
						}
					}
			}
		}
		for (int k = 0; k < n; k++) {
			if (!dr[k].final)
				lost++;
			lc_receiver_destroy(dr[k].r);
		}
		if (!base)
			rss_first = rss_kib();
	}
	size_t grants = lc__grant_rooms(s.ctx->grants);
	say("d %d %d %d %d %d %llu %llu %zu %llu %llu", d, ok, failed, lost, mismatches,
	    (unsigned long long)pages_checked, (unsigned long long)bytes, grants,
	    (unsigned long long)rss_first, (unsigned long long)rss_kib());
	lc_decode_destroy(dec);
	side_fini(&s);
	return failed || lost || mismatches || grants ? 1 : 0;
}

/* ==== parent ==== */

int main(int argc, char **argv)
{
	const char *json = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rooms") && i + 1 < argc)
			n_rooms = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			seed = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--wave") && i + 1 < argc)
			wave = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--json") && i + 1 < argc)
			json = argv[++i];
		else {
			fprintf(stderr, "usage: lc_soak [--rooms N] [--seed S] [--wave W] "
					"[--json FILE]\n");
			return 2;
		}
	}
	if (wave < 1 || wave > MAX_WAVE || n_rooms < 1) {
		fprintf(stderr, "bad --rooms or --wave (1..%d)\n", MAX_WAVE);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (!getenv("LAYERCAKE_LOG"))
		setenv("LAYERCAKE_LOG", "error", 1);
	int sp[2], a[2];
	TU_CHECK(pipe(sp) == 0 && pipe(a) == 0, "pipe");
	uint64_t t0 = now_ms();
	pid_t pids[1 + ND];
	fflush(NULL);
	if ((pids[0] = fork()) == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(a[0]);
		close(sp[0]);
		out_fd = sp[1];
		_exit(p_main(a[1]));
	}
	close(a[1]);
	char addr[64];
	TU_CHECK(read(a[0], addr, sizeof addr) == (ssize_t)sizeof addr, "P did not start");
	for (int d = 0; d < ND; d++) {
		if ((pids[1 + d] = fork()) == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			close(sp[0]);
			out_fd = sp[1];
			_exit(d_main(d, addr));
		}
	}
	close(sp[1]);
	int rc = 0;
	for (int k = 0; k < 1 + ND; k++) {
		int st;
		waitpid(pids[k], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			fprintf(stderr, "%s%d exited %d\n", k ? "D" : "P", k ? k - 1 : 0,
				WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
			rc = 1;
		}
	}
	double secs = (double)(now_ms() - t0) / 1000.0;
	/* Summaries. */
	char buf[8192];
	ssize_t got = read(sp[0], buf, sizeof buf - 1);
	buf[got > 0 ? got : 0] = '\0';
	unsigned long long p_ok = 0, p_failed = 0, p_lost = 0, p_active = 0, p_bytes = 0,
			   p_rss0 = 0, p_rss1 = 0;
	unsigned long long d_ok = 0, d_failed = 0, d_lost = 0, d_mis = 0, d_pages = 0, d_bytes = 0,
			   d_grants = 0, d_rss_growth = 0;
	int d_reports = 0, p_reports = 0;
	for (char *save, *line = strtok_r(buf, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		unsigned long long v[10];
		int dd;
		if (sscanf(line, "p %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
			   &v[4], &v[5], &v[6]) == 7) {
			p_ok = v[0], p_failed = v[1], p_lost = v[2], p_active = v[3],
			p_bytes = v[4];
			p_rss0 = v[5], p_rss1 = v[6];
			p_reports++;
		} else if (sscanf(line, "d %d %llu %llu %llu %llu %llu %llu %llu %llu %llu", &dd,
				  &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7],
				  &v[8]) == 10) {
			d_ok += v[0], d_failed += v[1], d_lost += v[2], d_mis += v[3];
			d_pages += v[4], d_bytes += v[5], d_grants += v[6];
			if (v[8] > v[7] && v[8] - v[7] > d_rss_growth)
				d_rss_growth = v[8] - v[7];
			d_reports++;
		}
	}
	/* Lost: never final at P (or never reported), or never final at D. */
	unsigned long long lost = (unsigned long long)n_rooms - p_ok - p_failed + d_lost;
	(void)p_lost; /* counted in n_rooms - ok - failed */
	bool pass = !rc && p_reports == 1 && d_reports == ND && p_ok == (unsigned)n_rooms &&
		    d_ok == (unsigned)n_rooms && !d_mis && !p_active && !d_grants;
	printf("soak: %d rooms (seed %llu, wave %d), %s: P success %llu failed %llu lost %llu; "
	       "D success %llu failed %llu lost %llu; pages checked %llu, %.1f MiB verified, "
	       "%llu checksum mismatches; %.1f s (%.0f MiB/s); rooms active after %llu, "
	       "grants left %llu; RSS P %llu -> %llu KiB, D max growth %llu KiB\n",
	       n_rooms, (unsigned long long)seed, wave, pass ? "PASS" : "FAIL", p_ok, p_failed,
	       lost, d_ok, d_failed, d_lost, d_pages, (double)d_bytes / 1048576.0, d_mis, secs,
	       (double)d_bytes / 1048576.0 / secs, p_active, d_grants, p_rss0, p_rss1,
	       d_rss_growth);
	if (json) {
		FILE *f = fopen(json, "w");
		if (f) {
			fprintf(f,
				"{\"rooms\":%d,\"seed\":%llu,\"wave\":%d,\"pass\":%s,"
				"\"p_success\":%llu,\"p_failed\":%llu,\"lost\":%llu,"
				"\"d_success\":%llu,\"d_failed\":%llu,\"pages_checked\":%llu,"
				"\"bytes_verified\":%llu,\"bytes_acked_at_p\":%llu,"
				"\"mismatches\":%llu,\"seconds\":%.2f,\"rss_p_kib\":[%llu,%llu],"
				"\"rss_d_max_growth_kib\":%llu}\n",
				n_rooms, (unsigned long long)seed, wave, pass ? "true" : "false",
				p_ok, p_failed, lost, d_ok, d_failed, d_pages, d_bytes, p_bytes,
				d_mis, secs, p_rss0, p_rss1, d_rss_growth);
			fclose(f);
		}
	}
	return pass ? 0 : 1;
}
