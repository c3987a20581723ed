/*
 * A P with many D peers over tcp or shm runs a bounded number of data-plane
 * threads: every connection is a task on the context's I/O core, whose loop
 * threads are capped by io_threads, instead of one thread per connection.
 *
 *     fanout [peers] [io_threads] [tcp|shm]
 *
 * D is a real second process holding `peers` contexts, each with its own
 * listener, region, grant and token. P (this process) opens a
 * connection to every one, writes a distinct pattern to each, and waits for
 * every completion. While the connections are live it counts its own
 * threads by name (/proc/self/task/N/comm); D then verifies every byte.
 */
#include <dirent.h>
#include <stdbool.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#define MAX_PEERS 256
#define BYTES (256u << 10)
#define ROOM 7

typedef struct peer_info {
	char url[128];
	lc_token_t token;
	uint8_t desc[LC_REGION_DESC_MAX];
	int desc_len;
} peer_info_t;

static void read_all(int fd, void *buf, size_t n)
{
	for (size_t got = 0; got < n;) {
		ssize_t k = read(fd, (char *)buf + got, n - got);
		TU_CHECK(k > 0, "pipe closed after %zu of %zu bytes", got, n);
		got += (size_t)k;
	}
}

static void write_all(int fd, const void *buf, size_t n)
{
	for (size_t put = 0; put < n;) {
		ssize_t k = write(fd, (const char *)buf + put, n - put);
		TU_CHECK(k > 0, "pipe write failed");
		put += (size_t)k;
	}
}

/* D: `peers` contexts; reports their endpoints, then checks the bytes once
 * P says it is done. Exit 0 iff every region holds its pattern. */
static int run_d(int peers, const char *listen_url, int to_p, int from_p)
{
	static lc_ctx_t *ctx[MAX_PEERS];
	static uint8_t *mem[MAX_PEERS];
	for (int i = 0; i < peers; i++) {
		peer_info_t pi = {0};
		lc_region_t *r;
		lc_listener_t *l;
		TU_OK(lc_ctx_create(NULL, &ctx[i]));
		TU_OK(lc_mem_alloc(BYTES, 0, (void **)&mem[i]));
		memset(mem[i], 0, BYTES);
		TU_OK(lc_region_register(ctx[i], mem[i], BYTES, &r));
		TU_OK(lc_grant_issue(ctx[i], ROOM, r, 0, BYTES));
		TU_OK(lc_listener_create(ctx[i], listen_url, &l));
		TU_OK(lc_listener_url(l, pi.url, sizeof pi.url));
		TU_OK(lc_token_issue(ctx[i], &pi.token));
		pi.desc_len = lc_region_pack(r, pi.desc, sizeof pi.desc);
		TU_OK(pi.desc_len);
		write_all(to_p, &pi, sizeof pi);
	}
	char done;
	read_all(from_p, &done, 1);
	int bad = 0;
	for (int i = 0; i < peers; i++) {
		/* As a decoder would before reading: no write is in flight after. */
		TU_CHECK(lc_grant_revoke(ctx[i], ROOM) == 1, "peer %d: grant not live", i);
		long at = tu_verify(mem[i], BYTES, 1000 + (uint64_t)i);
		if (at >= 0) {
			fprintf(stderr, "D: peer %d differs at byte %ld\n", i, at);
			bad++;
		}
		lc_ctx_destroy(ctx[i]);
	}
	return bad ? 1 : 0;
}

/* Threads of this process whose name starts with prefix. */
static int threads_named(const char *prefix, int *total)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;
	*total = 0;
	TU_CHECK(d, "cannot list /proc/self/task");
	while ((e = readdir(d))) {
		char path[300], name[32] = "";
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(name, sizeof name, f) && !strncmp(name, prefix, strlen(prefix)))
			n++;
		fclose(f);
		(*total)++;
	}
	closedir(d);
	return n;
}

int main(int argc, char **argv)
{
	int peers = argc > 1 ? atoi(argv[1]) : 64;
	int io_threads = argc > 2 ? atoi(argv[2]) : 2;
	const char *tp = argc > 3 ? argv[3] : "tcp";
	bool shm = !strcmp(tp, "shm");
	const char *listen_url = shm ? "shm://auto" : "tcp://127.0.0.1:0";
	char per_conn_prefix[16];
	snprintf(per_conn_prefix, sizeof per_conn_prefix, "lc-%s", tp);
	int to_p[2], to_d[2];
	TU_CHECK(peers > 0 && peers <= MAX_PEERS, "peers must be 1..%d", MAX_PEERS);
	tu_watchdog(120);
	TU_CHECK(!pipe(to_p) && !pipe(to_d), "pipe");
	pid_t child = fork();
	TU_CHECK(child >= 0, "fork");
	if (child == 0) {
		close(to_p[0]);
		close(to_d[1]);
		_exit(run_d(peers, listen_url, to_p[1], to_d[0]));
	}
	close(to_p[1]);
	close(to_d[0]);

	lc_ctx_t *ctx;
	lc_cq_t *cq;
	lc_region_t *src_region;
	uint8_t *src;
	char knob[16];
	snprintf(knob, sizeof knob, "%d", io_threads);
	TU_OK(lc_ctx_create(NULL, &ctx));
	TU_OK(lc_ctx_config_set(ctx, "io_threads", knob));
	TU_OK(lc_cq_create(ctx, &cq));
	/* shm maps memfd-backed sources at D; tcp sends from any memory. */
	TU_OK(lc_mem_alloc((size_t)peers * BYTES, shm ? LC_MEM_SHAREABLE : 0, (void **)&src));
	for (int i = 0; i < peers; i++)
		tu_fill(src + (size_t)i * BYTES, BYTES, 1000 + (uint64_t)i);
	TU_OK(lc_region_register(ctx, src, (size_t)peers * BYTES, &src_region));

	static lc_conn_t *conn[MAX_PEERS];
	for (int i = 0; i < peers; i++) {
		peer_info_t pi;
		uint32_t rid;
		read_all(to_p[0], &pi, sizeof pi);
		lc_conn_params_t cp = {
			.size = sizeof cp, .cq = cq, .token = pi.token, .has_token = 1};
		TU_OK(lc_conn_create(ctx, pi.url, &cp, &conn[i]));
		TU_OK(lc_conn_import_region(conn[i], pi.desc, (size_t)pi.desc_len, &rid));
		lc_write_t w = {
			.local = src + (size_t)i * BYTES, .length = BYTES, .remote_region = rid};
		lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM, .user_data = (uint64_t)i};
		uint64_t id;
		TU_OK(lc_batch_post(conn[i], &w, 1, &bp, &id));
	}
	for (int i = 0; i < peers; i++) {
		lc_completion_t c = tu_wait_one(cq, 60000);
		TU_CHECK(c.status == 0, "peer %llu: %s (%s)", (unsigned long long)c.user_data,
			 lc_strerror(c.status), c.reason);
	}

	/* Every connection is live and has moved data: count the threads. */
	int total, io = threads_named("lc-io", &total);
	int per_conn = threads_named(per_conn_prefix, &total);
	int ours = threads_named("lc-", &total);
	printf("%s peers=%d io_threads=%d lc-io=%d %s=%d lc-*=%d threads=%d\n", tp, peers,
	       io_threads, io, per_conn_prefix, per_conn, ours, total);
	TU_CHECK(io >= 1 && io <= io_threads, "%d I/O threads, bound %d", io, io_threads);
	TU_CHECK(per_conn == 0, "%d per-connection %s threads", per_conn, tp);
	/* The library's threads: the I/O core alone, batch deadlines included
	 * (a sanitizer may add a thread of its own, not named lc-). */
	TU_CHECK(ours <= io_threads, "%d library threads for %d peers", ours, peers);

	char done = 1;
	write_all(to_d[1], &done, 1);
	int status;
	TU_CHECK(waitpid(child, &status, 0) == child, "waitpid");
	TU_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "D found bad bytes (status %d)",
		 status);
	for (int i = 0; i < peers; i++)
		lc_conn_destroy(conn[i]);
	lc_cq_destroy(cq);
	lc_ctx_destroy(ctx);
	lc_mem_free(src);
	printf("fanout: %d %s peers, every byte verified at D\n", peers, tp);
	return 0;
}
