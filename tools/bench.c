/*
 * `layercake bench [name]`: one benchmark of bench/, or all of them. Run
 * all, each benchmark is a child process (a crash or a stray exit stays
 * its own) whose stdout is captured: printed after it finishes, or with
 * --json gathered into one object. A progress bar redraws on stderr while
 * stderr is a terminal; the parent stays single-threaded so that fork is
 * safe.
 */
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "layercake.h"

static const char bench_help[] =
	"NAME\n"
	"    layercake bench - benchmarks of the data plane, the engine and the control\n"
	"    plane\n"
	"\n"
	"SYNOPSIS\n"
	"    layercake bench [--json]\n"
	"    layercake bench transport [--transport tcp|shm|loop|ucx] [--region-mib M]\n"
	"                              [--block-kib K] [--batch B] [--total-mib T]\n"
	"                              [--lanes N] [--inflight N] [--json] [--no-baseline]\n"
	"                              [--mem host|sim|sim-src|sim-dst|cuda|cuda-src|cuda-dst]\n"
	"    layercake bench planner [--json]\n"
	"    layercake bench wake [--json]\n"
	"    layercake bench control [--rooms N] [--inflight K] [--transport tcp|shm]\n"
	"                            [--json]\n"
	"    layercake bench checksum [--region-mib M] [--json]\n"
	"    layercake bench strided [--transport loop|tcp|shm|ucx] [--rows R]\n"
	"                            [--heads H] [--head-bytes B] [--layers L]\n"
	"                            [--pages N] [--requests Q] [--inflight I] [--json]\n"
	"    layercake bench landed [--polls N] [--json]\n"
	"    layercake bench peers [--pairs N] [--quick] [--idle-s S] [--out-dir DIR]\n"
	"\n"
	"DESCRIPTION\n"
	"    Without a name, runs every benchmark built in but peers, with its\n"
	"    defaults, one after the other, each in its own process, and shows a\n"
	"    progress bar on stderr when stderr is a terminal. With a name, runs that\n"
	"    benchmark; `layercake bench <name> --help` describes it.\n"
	"\n"
	"    transport  GB/s and batch latency of one transport between two processes\n"
	"               (compare with the `baseline` program built beside it)\n"
	"    planner    descriptors per second of the layer-group planner, against the\n"
	"               seed's Python planner when numpy is found\n"
	"    wake       latency from a layer's step record to its writes being posted,\n"
	"               64 rooms in flight\n"
	"    control    rooms per second end to end through the bootstrap server,\n"
	"               lc_prefill_t and lc_decode_t, one page and one layer per room\n"
	"    checksum   the room checksum's pass (room_checksum=1) over a region,\n"
	"               against one memcpy of the same size\n"
	"    strided    token-major pages at P TP 1 -> D TP 2: one strided write per\n"
	"               page against one write per token, descriptors and GB/s\n"
	"    landed     one layers_ready poll with 10 and 10,000 landed ranges in the\n"
	"               room (flat), against the per-poll scan it replaced\n"
	"    peers      layercake against NIXL and Mooncake TE from their PyPI wheels\n"
	"               (docs/bench.md): bench/peers/run.py in the venv that `make\n"
	"               bench-peers` makes, as that target runs it; minutes, by name only\n"
	"\n"
	"OPTIONS\n"
	"    --json     exactly one JSON object on stdout (logs go to stderr). Run all,\n"
	"               it is {\"bench\":\"all\",\"results\":{NAME: that benchmark's\n"
	"               object, ...},\"failed\":[NAMES]}\n"
	"\n"
	"EXIT STATUS\n"
	"    0 when every benchmark ran; 1 when one failed; 2 for bad options.\n";

/* Manual pages of the benchmarks whose own usage text is short; the
 * dispatcher answers `layercake bench <name> --help` with these. */
static const char transport_help[] =
	"NAME\n"
	"    layercake bench transport - GB/s and batch latency of one transport\n"
	"\n"
	"SYNOPSIS\n"
	"    layercake bench transport [--transport tcp|shm|loop|ucx] [--region-mib M]\n"
	"                              [--block-kib K] [--batch B] [--total-mib T]\n"
	"                              [--lanes N] [--inflight N] [--json] [--no-baseline]\n"
	"                              [--mem host|sim|sim-src|sim-dst|cuda|cuda-src|cuda-dst]\n"
	"\n"
	"DESCRIPTION\n"
	"    Streams T MiB from a sender region to a receiver region of M MiB each, as\n"
	"    batches of B writes of K KiB, wrapping around the regions, with at most N\n"
	"    batches in flight. Sender and receiver are two processes (loop: one).\n"
	"    Regions come from lc_mem_alloc (2 MiB aligned, huge pages, touched before\n"
	"    timing). Prints GB/s (10^9 bytes/s) and the post-to-completion latency of\n"
	"    batches (p50, p99). Compare with `baseline tcp T M K` run beside it.\n"
	"\n"
	"OPTIONS\n"
	"    --transport T   tcp (default, loopback), shm or loop\n"
	"    --region-mib M  size of each region (1024)\n"
	"    --block-kib K   bytes per write (4096)\n"
	"    --batch B       writes per batch (1)\n"
	"    --total-mib T   bytes to move (2048)\n"
	"    --lanes N       tcp lanes (default: the tcp_lanes knob)\n"
	"    --inflight N    batches in flight (default: about 64 MiB worth, 2..256)\n"
	"    --json          exactly one JSON object on stdout\n"
	"    --no-baseline   skip the physical baseline measured in the same run\n"
	"    --mem M         device memory (docs/gpu.md): sim (simulated) or cuda\n"
	"                    (CUDA device 0) at both ends, or -src / -dst only; the\n"
	"                    same transfer runs with host memory first, and the\n"
	"                    device/host ratio, seconds per GiB of the device run,\n"
	"                    the host run (wire only) and the copy engine alone\n"
	"                    (copy only) are printed. Sources carry a pattern and\n"
	"                    the receivers count mismatched bytes (exit 1 if any);\n"
	"                    without a usable CUDA driver --mem cuda exits 3.\n";

static const char planner_help[] =
	"NAME\n"
	"    layercake bench planner - descriptors per second of the layer-group planner\n"
	"\n"
	"SYNOPSIS\n"
	"    layercake bench planner [--no-seed] [--json]\n"
	"\n"
	"DESCRIPTION\n"
	"    Plans the three request shapes of ../shared/tools/seed_planner_cost.py\n"
	"    (DeepSeek MLA 8k tokens, page 64; Llama-70B MHA 32k tokens, page 16;\n"
	"    Llama-8B MHA 4k tokens, page 1): index resolution, run coalescing and\n"
	"    one descriptor per (buffer, run) per layer group. Prints microseconds per\n"
	"    request and millions of descriptors per second; when the seed script and\n"
	"    numpy are found (LAYERCAKE_SHARED_DIR, ../shared, /work/shared) the seed\n"
	"    runs in the same invocation and the ratio is printed.\n"
	"\n"
	"OPTIONS\n"
	"    --no-seed   do not run the seed's Python planner\n"
	"    --json      exactly one JSON object on stdout\n";

static const char wake_help[] =
	"NAME\n"
	"    layercake bench wake - latency from a layer's step record to its writes\n"
	"\n"
	"SYNOPSIS\n"
	"    layercake bench wake [--rounds N] [--pace-us US] [--json]\n"
	"\n"
	"DESCRIPTION\n"
	"    64 rooms in flight, 32 layers per forward, P and D as two contexts over\n"
	"    loop://; a producer records a layer every US microseconds. Measures, per\n"
	"    (room, layer), the time from lc_engine_record_cache to the room's writes\n"
	"    for that layer being posted (the engine's post hook), and the time until\n"
	"    all 64 rooms were posted; prints p50, p99 and max in microseconds. Pages\n"
	"    are 256 bytes so that copying does not compete with the engine.\n"
	"\n"
	"OPTIONS\n"
	"    --rounds N     forwards to run (20)\n"
	"    --pace-us US   time between layer records (200)\n"
	"    --json         exactly one JSON object on stdout\n";

typedef int (*bench_fn)(int, char **);

typedef struct bench_entry {
	const char *name;
	double expect_s; /* rough duration here, for the progress bar only */
} bench_entry_t;

static const bench_entry_t table[] = {
	{"transport", 7}, {"planner", 3}, {"wake", 1},   {"control", 2},
	{"checksum", 2},  {"strided", 2}, {"landed", 1},
};
#define NBENCH (sizeof table / sizeof table[0])

static bench_fn fn_of(size_t i)
{
	switch (i) {
	case 0:
		return lc__bench_transport;
	case 1:
		return lc__bench_planner;
	case 2:
		return lc__bench_wake;
	case 3:
		return lc__bench_control;
	case 4:
		return lc__bench_checksum;
	case 5:
		return lc__bench_strided;
	case 6:
		return lc__bench_landed;
	default:
		return NULL;
	}
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void draw_bar(double frac, size_t idx, const char *name, double elapsed)
{
	enum { WIDTH = 30 };
	int fill = (int)(frac * WIDTH + 0.5);
	char bar[WIDTH + 1];
	for (int i = 0; i < WIDTH; i++)
		bar[i] = i < fill ? '#' : '.';
	bar[WIDTH] = 0;
	fprintf(stderr, "\r\033[K[%s] %3.0f%%  %zu/%zu %-10s %5.1f s", bar, frac * 100, idx + 1,
		NBENCH, name, elapsed);
	fflush(stderr);
}

/* Run benchmark i in a child with stdout into *out (malloc'd). Returns the
 * child's exit status (or 128 + signal). */
static int run_child(size_t i, bool json, bool bar, double done_s, double total_s, char **out,
		     size_t *out_len)
{
	int pfd[2];
	char *args[] = {(char *)table[i].name, json ? "--json" : NULL, NULL};
	if (pipe(pfd))
		return 127;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		close(pfd[0]);
		close(pfd[1]);
		return 127;
	}
	if (pid == 0) {
		close(pfd[0]);
		dup2(pfd[1], 1);
		close(pfd[1]);
		int rc = fn_of(i)(json ? 2 : 1, args);
		fflush(NULL);
		_exit(rc);
	}
	close(pfd[1]);
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	double t0 = now_s();
	for (;;) {
		if (bar) {
			double el = now_s() - t0, share = table[i].expect_s;
			double part = el < share ? el : share * 0.95;
			draw_bar((done_s + part) / total_s, i, table[i].name, el);
		}
		struct pollfd pf = {.fd = pfd[0], .events = POLLIN};
		if (poll(&pf, 1, 100) <= 0)
			continue;
		if (buf && len + 1024 > cap) {
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				buf = NULL;
			} else {
				buf = nb;
				cap *= 2;
			}
		}
		char tmp[1024];
		ssize_t n = read(pfd[0], buf ? buf + len : tmp, buf ? cap - len - 1 : sizeof tmp);
		if (n <= 0)
			break;
		if (buf)
			len += (size_t)n;
	}
	close(pfd[0]);
	if (buf)
		buf[len] = 0;
	int st = 0;
	waitpid(pid, &st, 0);
	*out = buf;
	*out_len = len;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static void trim(char *s, size_t *len)
{
	while (*len && (s[*len - 1] == '\n' || s[*len - 1] == ' ' || s[*len - 1] == '\r'))
		s[--*len] = 0;
}

static int run_all(bool json)
{
	bool bar = isatty(2);
	double total_s = 0, done_s = 0, t0 = now_s();
	bool first = true;
	char failed[256] = "";
	int rc_all = 0;
	for (size_t i = 0; i < NBENCH; i++)
		total_s += table[i].expect_s;
	if (json)
		printf("{\"bench\":\"all\",\"version\":\"%s\",\"transports\":\"%s\",\"results\":{",
		       lc_version(), lc_transports());
	for (size_t i = 0; i < NBENCH; i++) {
		char *out = NULL;
		size_t len = 0;
		int rc;
		if (!fn_of(i)) {
			rc = -1;
		} else {
			rc = run_child(i, json, bar, done_s, total_s, &out, &len);
		}
		done_s += table[i].expect_s;
		if (bar)
			fprintf(stderr, "\r\033[K");
		if (out)
			trim(out, &len);
		bool ok = rc == 0 && out &&
			  (!json || (len && out[0] == '{' && out[len - 1] == '}'));
		if (!ok) {
			rc_all = 1;
			snprintf(failed + strlen(failed), sizeof failed - strlen(failed),
				 "%s\"%s\"", failed[0] ? "," : "", table[i].name);
			fprintf(stderr, "layercake bench: %s %s\n", table[i].name,
				rc < 0 ? "is not built into this binary" : "failed");
		}
		if (json) {
			printf("%s\"%s\":%s", first ? "" : ",", table[i].name, ok ? out : "null");
			first = false;
		} else if (out && len) {
			printf("%s\n", out);
			fflush(stdout);
		}
		free(out);
	}
	if (bar)
		fprintf(stderr, "\r\033[K%zu benchmarks in %.1f s\n", NBENCH, now_s() - t0);
	if (json)
		printf("},\"failed\":[%s],\"seconds\":%.2f}\n", failed, now_s() - t0);
	return rc_all;
}

int lc__cmd_bench(int argc, char **argv)
{
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		fputs(bench_help, stdout);
		return 0;
	}
	if (argc < 2 || (argc == 2 && !strcmp(argv[1], "--json")))
		return run_all(argc == 2);
	/* By name only: minutes of another library's wheels, not a default run. */
	if (!strcmp(argv[1], "peers")) {
		bench_fn peers = lc__bench_peers; /* as fn_of hands out the others */
		if (!peers) {
			fputs("layercake bench: 'peers' is not built into this binary\n", stderr);
			return 2;
		}
		return peers(argc - 1, argv + 1);
	}
	static const char *const pages[NBENCH] = {transport_help, planner_help, wake_help, NULL,
						  NULL};
	for (size_t i = 0; i < NBENCH; i++) {
		if (strcmp(argv[1], table[i].name))
			continue;
		if (pages[i] && lc__cli_wants_help(argc - 1, argv + 1)) {
			fputs(pages[i], stdout);
			return 0;
		}
		if (!fn_of(i)) {
			fprintf(stderr, "layercake bench: '%s' is not built into this binary\n",
				argv[1]);
			return 2;
		}
		return fn_of(i)(argc - 1, argv + 1);
	}
	fprintf(stderr, "layercake bench: unknown benchmark '%s' (see --help)\n", argv[1]);
	return 2;
}
