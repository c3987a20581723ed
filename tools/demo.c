/*
 * `layercake demo`: P and D as two OS processes on one host stream a
 * synthetic model's KV cache through the control plane and the data plane,
 * layer by layer and whole-request side by side, and D verifies every page.
 * The orchestrator (this process) runs the bootstrap servers, decides when
 * requests arrive, and writes the report and the timeline. See demo.h for
 * the processes and docs/demo.md for what each number means.
 */
#include <arpa/inet.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "bench.h"
#include "demo.h"

static const char demo_help[] =
	"NAME\n"
	"    layercake demo - stream a model's KV cache from P to D, layer-wise and\n"
	"    whole-request side by side, and verify every page\n"
	"\n"
	"SYNOPSIS\n"
	"    layercake demo [--model NAME] [--draft-layers N] [--page-tokens N]\n"
	"                   [--prompts LIST] [--requests N] [--concurrency N]\n"
	"                   [--transport tcp|shm|loop|ucx] [--tflops X|auto] [--balance F]\n"
	"                   [--layer-ms X] [--intervals LIST] [--svg FILE | --no-svg]\n"
	"                   [--svg-request N] [--quick] [--json]\n"
	"                   [--p-host IP] [--d-host IP] [--d-netns NAME]\n"
	"\n"
	"DESCRIPTION\n"
	"    Starts one bootstrap server per mode, a prefill process P and a decode\n"
	"    process D (loop: two threads of one process, since loop:// is in-process),\n"
	"    connected by the real control plane (lc_prefill_t, lc_decode_t) and a real\n"
	"    transport. P simulates a GPU: per request one forward; each layer lasts\n"
	"    its compute time from a roofline (FLOPs per token per layer at --tflops,\n"
	"    plus causal attention). A layer's KV is written when the projections\n"
	"    before it are done (about 12% of a Llama layer): P fills the layer's pages\n"
	"    with a pattern of (room, buffer, page) and records its step\n"
	"    (lc_engine_record_cache) then, and computes the rest of the layer\n"
	"    (attention, MLP) after. After the last layer it publishes a first token\n"
	"    and records the aux step. D grants pages,\n"
	"    stamps each growth of lc_receiver_layers_ready, and after Success checks\n"
	"    every 8-byte word of every page and the first token.\n"
	"\n"
	"    The same requests run in every mode (interleaved, so a busy machine hurts\n"
	"    every mode alike): layer-wise with each interval of --intervals, and\n"
	"    whole-request (interval <= 0: everything after the forward). Each mode\n"
	"    first runs one warm-up request (discovery, registration, connections).\n"
	"\n"
	"    Per mode it reports: time to first token (request reaches P -> D sees\n"
	"    Success with the first token) p50/p99; exposed transfer tail (P's last\n"
	"    layer computed -> D sees Success) p50/p99; stream GB/s (bytes over the\n"
	"    time from the first layer group ready to Success); overlap (share of that\n"
	"    time that ran under compute); CPU seconds of P and D; bytes verified and\n"
	"    mismatches. `one group` is the transfer time of one layer group: the same\n"
	"    request's whole-request tail divided by the mode's number of groups.\n"
	"\n"
	"OPTIONS\n"
	"    --model NAME        llama-3-8b (default; 32 layers, K,V 8x128 bf16),\n"
	"                        llama-3-70b (80 layers), deepseek-v3 (61 MLA layers,\n"
	"                        576 bf16 latent)\n"
	"    --draft-layers N    add N draft (MTP) layers after the target layers (0)\n"
	"    --page-tokens N     tokens per KV page (64)\n"
	"    --prompts LIST      prompt lengths in tokens, cycled over the requests;\n"
	"                        a k suffix is x1024 (1k,4k,16k)\n"
	"    --requests N        measured requests per mode (6)\n"
	"    --concurrency N     requests in flight per mode (1); P still runs one\n"
	"                        forward at a time, like one GPU\n"
	"    --transport T       tcp (default, loopback), shm, loop, ucx (where built:\n"
	"                        ucx://, UCX picks its transports from UCX_TLS)\n"
	"    --tflops X|auto     throughput of the simulated GPU in TFLOP/s. auto\n"
	"                        (default) first measures the link (whole-request, no\n"
	"                        compute) and sets the roofline so that P produces KV\n"
	"                        at --balance times the link rate\n"
	"    --balance F         for auto: KV production / link rate (0.75)\n"
	"    --layer-ms X        fixed compute time per layer instead of the roofline\n"
	"    --intervals LIST    layerwise_interval of each mode; <= 0 = whole-request\n"
	"                        (1,8,0)\n"
	"    --svg FILE          timeline of one request in every mode (default:\n"
	"                        demo-timeline.svg beside the layercake binary)\n"
	"    --no-svg            no timeline\n"
	"    --svg-request N     which request to draw (default: the first of the\n"
	"                        median prompt length)\n"
	"    --quick             a short run (tests): --prompts 256,1k --requests 2\n"
	"    --json              exactly one JSON object on stdout; the table and\n"
	"                        progress go to stderr\n"
	"\n"
	"MULTI-HOST (tcp, ucx)\n"
	"    --p-host IP         IPv4 address of the orchestrator's side: the bootstrap\n"
	"                        servers listen on it and P's control socket binds to it\n"
	"                        (127.0.0.1)\n"
	"    --d-host IP         IPv4 address D's data-plane listener and control socket\n"
	"                        bind to and announce (127.0.0.1)\n"
	"    --d-netns NAME      D enters network namespace NAME (/var/run/netns/NAME,\n"
	"                        or a path with a /) right after it is forked, before it\n"
	"                        opens any socket; needs root, --p-host and --d-host.\n"
	"                        The orchestrator and P stay in the namespace the demo\n"
	"                        was started in, e.g.\n"
	"                          ip netns exec NS_P layercake demo --d-netns NS_D \\\n"
	"                              --p-host 10.0.0.1 --d-host 10.0.0.2\n"
	"\n"
	"EXIT STATUS\n"
	"    0 when every room succeeded and every page verified; 1 otherwise; 2 for\n"
	"    bad options.\n"
	"\n"
	"EXAMPLES\n"
	"    layercake demo                                  # the default (make demo)\n"
	"    layercake demo --transport shm --tflops 100     # a faster link\n"
	"    layercake demo --prompts 128 --requests 8       # short prompts\n"
	"    layercake demo --model deepseek-v3 --draft-layers 1 --json\n";

typedef struct item {
	int mode, req;
	uint64_t tokens, layer_ns, kv_ns, room;
	demo_room_rec_t *p, *d;
	bool got_p, got_d;
} item_t;

typedef struct orch {
	demo_opts_t *o;
	int fd_p, fd_d;
	pid_t pid_p, pid_d;
	lc_bootstrap_t *boot[DEMO_MAX_MODES];
	uint64_t next_room;
	FILE *out; /* the table: stdout, or stderr with --json */
	char error[320];
} orch_t;

typedef struct mode_stats {
	char name[32];
	int interval, groups, n, failed;
	double ttft_p50, ttft_p99, tail_p50, tail_p99, group_p50, tail_over_group_p50;
	double ttft_vs_whole, gbps, overlap_pct, cpu_s, p_cpu_s, d_cpu_s, wall_s;
	uint64_t bytes_verified, mismatches, metadata_bad;
	demo_engine_stats_t engine;
} mode_stats_t;

/* ------------------------------------------------------------ options */

static int parse_tokens(const char *s, uint64_t *out)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || v <= 0)
		return -EINVAL;
	if (*end == 'k' || *end == 'K')
		v *= 1024, end++;
	if (*end)
		return -EINVAL;
	*out = (uint64_t)v;
	return *out ? 0 : -EINVAL;
}

static int parse_list(const char *s, uint64_t *vals, int cap, bool allow_signed, int *ints)
{
	char buf[256];
	int n = 0;
	snprintf(buf, sizeof buf, "%s", s);
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (n == cap)
			return -ERANGE;
		if (allow_signed) {
			char *end;
			long v = strtol(t, &end, 10);
			if (*end || end == t)
				return -EINVAL;
			ints[n++] = (int)v;
		} else if (parse_tokens(t, &vals[n++])) {
			return -EINVAL;
		}
	}
	return n ? n : -EINVAL;
}

static void default_svg_path(char *buf, size_t cap)
{
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0) {
		snprintf(buf, cap, "demo-timeline.svg");
		return;
	}
	exe[n] = 0;
	char *slash = strrchr(exe, '/');
	if (slash)
		*slash = 0;
	snprintf(buf, cap, "%s/demo-timeline.svg", exe);
}

static int parse_opts(int argc, char **argv, demo_opts_t *o, char *svg_buf, size_t svg_cap)
{
	*o = (demo_opts_t){.model = lc__demo_model_find("llama-3-8b"),
			   .page_tokens = 64,
			   .prompts = {1024, 4096, 16384},
			   .nprompts = 3,
			   .requests = 6,
			   .concurrency = 1,
			   .transport = "tcp",
			   .p_host = "127.0.0.1",
			   .d_host = "127.0.0.1",
			   .balance = 0.75,
			   .intervals = {1, 8, 0},
			   .nmodes = 3,
			   .svg_request = -1};
	default_svg_path(svg_buf, svg_cap);
	o->svg = svg_buf;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int n;
#define NEED_ARG                                                                                   \
	do {                                                                                       \
		if (!v) {                                                                          \
			fprintf(stderr, "layercake demo: %s needs a value\n", a);                  \
			return 2;                                                                  \
		}                                                                                  \
		i++;                                                                               \
	} while (0)
		if (!strcmp(a, "--json")) {
			o->json = true;
		} else if (!strcmp(a, "--quick")) {
			o->prompts[0] = 256, o->prompts[1] = 1024, o->nprompts = 2;
			o->requests = 2;
		} else if (!strcmp(a, "--no-svg")) {
			o->svg = NULL;
		} else if (!strcmp(a, "--model")) {
			NEED_ARG;
			if (!(o->model = lc__demo_model_find(v))) {
				char names[128];
				lc__demo_model_list(names, sizeof names);
				fprintf(stderr, "layercake demo: unknown model %s (%s)\n", v,
					names);
				return 2;
			}
		} else if (!strcmp(a, "--draft-layers")) {
			NEED_ARG;
			o->draft_layers = (uint32_t)strtoul(v, NULL, 10);
		} else if (!strcmp(a, "--page-tokens")) {
			NEED_ARG;
			o->page_tokens = (uint32_t)strtoul(v, NULL, 10);
		} else if (!strcmp(a, "--prompts")) {
			NEED_ARG;
			if ((n = parse_list(v, o->prompts, DEMO_MAX_PROMPTS, false, NULL)) < 0) {
				fprintf(stderr, "layercake demo: bad --prompts %s\n", v);
				return 2;
			}
			o->nprompts = n;
		} else if (!strcmp(a, "--intervals")) {
			NEED_ARG;
			if ((n = parse_list(v, NULL, DEMO_MAX_MODES, true, o->intervals)) < 0) {
				fprintf(stderr, "layercake demo: bad --intervals %s\n", v);
				return 2;
			}
			o->nmodes = n;
		} else if (!strcmp(a, "--requests")) {
			NEED_ARG;
			o->requests = atoi(v);
		} else if (!strcmp(a, "--concurrency") || !strcmp(a, "-c")) {
			NEED_ARG;
			o->concurrency = atoi(v);
		} else if (!strcmp(a, "--transport")) {
			NEED_ARG;
			o->transport = v;
		} else if (!strcmp(a, "--p-host") || !strcmp(a, "--d-host")) {
			NEED_ARG;
			struct in_addr in;
			if (inet_pton(AF_INET, v, &in) != 1) {
				fprintf(stderr, "layercake demo: %s %s: not an IPv4 address\n", a,
					v);
				return 2;
			}
			*(a[2] == 'p' ? &o->p_host : &o->d_host) = v;
		} else if (!strcmp(a, "--d-netns")) {
			NEED_ARG;
			o->d_netns = v;
		} else if (!strcmp(a, "--tflops")) {
			NEED_ARG;
			o->tflops = strcmp(v, "auto") ? strtod(v, NULL) : 0;
			if (strcmp(v, "auto") && o->tflops <= 0) {
				fprintf(stderr, "layercake demo: bad --tflops %s\n", v);
				return 2;
			}
		} else if (!strcmp(a, "--balance")) {
			NEED_ARG;
			o->balance = strtod(v, NULL);
		} else if (!strcmp(a, "--layer-ms")) {
			NEED_ARG;
			o->layer_ms = strtod(v, NULL);
		} else if (!strcmp(a, "--svg")) {
			NEED_ARG;
			o->svg = v;
		} else if (!strcmp(a, "--svg-request")) {
			NEED_ARG;
			o->svg_request = atoi(v);
		} else {
			fprintf(stderr, "layercake demo: unknown option %s (see --help)\n", a);
			return 2;
		}
#undef NEED_ARG
	}
	bool is_ucx = !strcmp(o->transport, "ucx");
	if (strcmp(o->transport, "tcp") && strcmp(o->transport, "shm") &&
	    strcmp(o->transport, "loop") && !is_ucx) {
		fprintf(stderr, "layercake demo: --transport must be tcp, shm, loop or ucx\n");
		return 2;
	}
	if (is_ucx && !lc__bench_has_transport("ucx")) {
		fprintf(stderr,
			"layercake demo: this build has no ucx transport (transports: %s)\n",
			lc_transports());
		return 2;
	}
	bool networked = !strcmp(o->transport, "tcp") || is_ucx;
	if (!networked &&
	    (strcmp(o->p_host, "127.0.0.1") || strcmp(o->d_host, "127.0.0.1") || o->d_netns)) {
		fprintf(stderr,
			"layercake demo: --p-host, --d-host and --d-netns need a network "
			"transport (tcp or ucx); %s is same-host only\n",
			o->transport);
		return 2;
	}
	if (o->d_netns) {
		char path[512];
		if (!*o->d_netns) {
			fprintf(stderr, "layercake demo: --d-netns needs a name\n");
			return 2;
		}
		if (!strcmp(o->p_host, "127.0.0.1") || !strcmp(o->d_host, "127.0.0.1")) {
			fprintf(stderr,
				"layercake demo: with --d-netns, give --p-host and --d-host: "
				"the addresses of P's and D's ends of the link between the "
				"namespaces (127.0.0.1 is a different host in each)\n");
			return 2;
		}
		snprintf(path, sizeof path, "%s%s",
			 strchr(o->d_netns, '/') ? "" : "/var/run/netns/", o->d_netns);
		if (access(path, R_OK)) {
			fprintf(stderr, "layercake demo: --d-netns %s: %s: %s%s\n", o->d_netns,
				path, strerror(errno),
				errno == ENOENT ? " (create it with `ip netns add`)" : "");
			return 2;
		}
	}
	if (o->balance <= 0 || o->layer_ms < 0) {
		fprintf(stderr, "layercake demo: --balance must be > 0, --layer-ms >= 0\n");
		return 2;
	}
	o->same_process = !strcmp(o->transport, "loop");
	if (lc__demo_geometry(o)) {
		fprintf(stderr,
			"layercake demo: bad geometry (page tokens, prompts, requests >= 1, "
			"concurrency 1..%d, at most %d layers)\n",
			DEMO_MAX_INFLIGHT, DEMO_MAX_LAYERS);
		return 2;
	}
	return 0;
}

/* ------------------------------------------------------- processes */

static int send_to(int fd, const demo_msg_t *m)
{
	return send(fd, m, sizeof *m, MSG_NOSIGNAL) == (ssize_t)sizeof *m ? 0 : -EIO;
}

/* One message from P (*from = 0) or D (1), within timeout_ms. */
static int recv_any(orch_t *O, demo_msg_t *m, int *from, int timeout_ms)
{
	struct pollfd pf[2] = {{.fd = O->fd_p, .events = POLLIN},
			       {.fd = O->fd_d, .events = POLLIN}};
	int n = poll(pf, 2, timeout_ms);
	if (n <= 0) {
		snprintf(O->error, sizeof O->error, "no word from P or D for %d ms", timeout_ms);
		return -ETIMEDOUT;
	}
	for (int i = 0; i < 2; i++) {
		if (!pf[i].revents)
			continue;
		ssize_t got = recv(pf[i].fd, m, sizeof *m, 0);
		if (got != (ssize_t)sizeof *m) {
			snprintf(O->error, sizeof O->error, "%s exited", i ? "D" : "P");
			return -EIO;
		}
		*from = i;
		if (m->type == DEMO_FAIL) {
			snprintf(O->error, sizeof O->error, "%s", m->text);
			return -EIO;
		}
		return 0;
	}
	return -EIO;
}

/* Send to both and wait for one answer of `want` from each. */
static int both(orch_t *O, const demo_msg_t *m, uint32_t want, demo_msg_t *ans_p, demo_msg_t *ans_d,
		int timeout_ms)
{
	if (send_to(O->fd_p, m) || send_to(O->fd_d, m)) {
		snprintf(O->error, sizeof O->error, "P or D is gone");
		return -EIO;
	}
	bool got[2] = {false, false};
	while (!got[0] || !got[1]) {
		demo_msg_t a;
		int from, rc = recv_any(O, &a, &from, timeout_ms);
		if (rc)
			return rc;
		if (a.type != want)
			continue;
		got[from] = true;
		if (from == 0 && ans_p)
			*ans_p = a;
		if (from == 1 && ans_d)
			*ans_d = a;
	}
	return 0;
}

static void *decode_thread(void *arg)
{
	void **a = arg;
	intptr_t rc = lc__demo_decode(a[0], (int)(intptr_t)a[1]);
	return (void *)rc;
}

static int spawn(orch_t *O)
{
	int sp[2], sd[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sd))
		return -errno;
	fflush(NULL);
	O->pid_p = fork();
	if (O->pid_p < 0)
		return -errno;
	if (O->pid_p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(2, 1); /* stdout is the orchestrator's */
		close(sp[0]);
		close(sd[0]);
		if (O->o->same_process) {
			pthread_t t;
			void *args[2] = {O->o, (void *)(intptr_t)sd[1]}, *drc = NULL;
			if (pthread_create(&t, NULL, decode_thread, args))
				_exit(1);
			int prc = lc__demo_prefill(O->o, sp[1]);
			pthread_join(t, &drc);
			_exit(prc || drc);
		}
		close(sd[1]);
		_exit(lc__demo_prefill(O->o, sp[1]));
	}
	close(sp[1]);
	O->fd_p = sp[0];
	if (!O->o->same_process) {
		O->pid_d = fork();
		if (O->pid_d < 0)
			return -errno;
		if (O->pid_d == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			dup2(2, 1);
			close(sp[0]);
			close(sd[0]);
			if (O->o->d_netns) { /* before any context or socket */
				demo_msg_t f = {.type = DEMO_FAIL};
				char err[sizeof f.text - 4];
				if ((f.rc = lc__demo_enter_netns(O->o->d_netns, err, sizeof err))) {
					snprintf(f.text, sizeof f.text, "D: %s", err);
					send_to(sd[1], &f); /* the orchestrator prints it */
					_exit(1);
				}
			}
			_exit(lc__demo_decode(O->o, sd[1]));
		}
	}
	close(sd[1]);
	O->fd_d = sd[0];
	return 0;
}

static void reap(orch_t *O, bool kill_them)
{
	pid_t pids[2] = {O->pid_p, O->pid_d};
	for (int i = 0; i < 2; i++) {
		if (pids[i] <= 0)
			continue;
		if (kill_them)
			kill(pids[i], SIGKILL);
		waitpid(pids[i], NULL, 0);
	}
	O->pid_p = O->pid_d = 0;
}

/* Run items closed-loop, at most `conc` in flight. A request is done when
 * D has verified it and P has seen its final status. */
static int run_set(orch_t *O, item_t *items, int n, int conc)
{
	int next = 0, inflight = 0, done = 0;
	while (done < n) {
		while (inflight < conc && next < n) {
			item_t *it = &items[next++];
			it->room = O->next_room++;
			demo_msg_t m = {.type = DEMO_REQUEST,
					.mode = it->mode,
					.req = it->req,
					.room = it->room,
					.tokens = it->tokens,
					.layer_ns = it->layer_ns,
					.kv_ns = it->kv_ns};
			if (send_to(O->fd_p, &m) || send_to(O->fd_d, &m)) {
				snprintf(O->error, sizeof O->error, "P or D is gone");
				return -EIO;
			}
			inflight++;
		}
		demo_msg_t m;
		int from, rc = recv_any(O, &m, &from, 300000);
		if (rc)
			return rc;
		if (m.type != DEMO_ROOM)
			continue;
		for (int i = 0; i < next; i++) {
			item_t *it = &items[i];
			if (it->room != m.rec.room)
				continue;
			if (from == 0 && !it->got_p) {
				*it->p = m.rec;
				it->got_p = true;
			} else if (from == 1 && !it->got_d) {
				*it->d = m.rec;
				it->got_d = true;
			}
			if (it->got_p && it->got_d) {
				done++;
				inflight--;
			}
			break;
		}
	}
	return 0;
}

static int snap(orch_t *O, uint64_t *cpu_p, uint64_t *cpu_d)
{
	demo_msg_t a, b, m = {.type = DEMO_SNAP};
	int rc = both(O, &m, DEMO_SNAP, &a, &b, 60000);
	if (!rc) {
		*cpu_p = a.cpu_ns;
		*cpu_d = b.cpu_ns;
	}
	return rc;
}

/* ------------------------------------------------------- statistics */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Nearest-rank quantile of v[0..n) (sorted in place); NAN when empty. */
static double quantile(double *v, int n, double q)
{
	if (n <= 0)
		return NAN;
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	int k = (int)ceil(q * n) - 1;
	return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

static int groups_of(const demo_opts_t *o, int interval)
{
	if (interval <= 0)
		return 1;
	return (int)((o->layers_total + (uint32_t)interval - 1) / (uint32_t)interval);
}

/* Index of the last layer of the first group. */
static uint32_t first_group_last(const demo_opts_t *o, int interval)
{
	if (interval <= 0 || (uint32_t)interval >= o->layers_total)
		return o->layers_total - 1;
	return (uint32_t)interval - 1;
}

static double ms(uint64_t a, uint64_t b)
{
	return b >= a ? (double)(b - a) / 1e6 : -(double)(a - b) / 1e6;
}

static bool ok_pair(const demo_room_rec_t *p, const demo_room_rec_t *d)
{
	return p->status == LC_ROOM_SUCCESS && d->status == LC_ROOM_SUCCESS;
}

static void compute_stats(const demo_opts_t *o, demo_room_rec_t *rp, demo_room_rec_t *rd, int whole,
			  mode_stats_t *st)
{
	int N = o->requests, L = (int)o->layers_total;
	double *a = calloc((size_t)N, sizeof *a), *b = calloc((size_t)N, sizeof *b);
	double *c = calloc((size_t)N, sizeof *c), *g = calloc((size_t)N, sizeof *g);
	for (int m = 0; m < o->nmodes && a && b && c && g; m++) {
		mode_stats_t *s = &st[m];
		int n = 0, ng = 0;
		double bytes = 0, window = 0, hidden = 0;
		s->interval = o->intervals[m];
		s->groups = groups_of(o, s->interval);
		lc__demo_mode_name(s->interval, s->name, sizeof s->name);
		s->failed = 0;
		for (int i = 0; i < N; i++) {
			demo_room_rec_t *p = &rp[m * N + i], *d = &rd[m * N + i];
			s->bytes_verified += d->bytes_verified;
			s->mismatches +=
				d->bad_pages + (d->status == LC_ROOM_SUCCESS && !d->metadata_ok);
			s->metadata_bad += d->status == LC_ROOM_SUCCESS && !d->metadata_ok;
			if (!ok_pair(p, d)) {
				s->failed++;
				continue;
			}
			uint64_t last = p->t_layer_end[L - 1]; /* the forward ended */
			uint64_t first = p->t_layer[first_group_last(o, s->interval)];
			a[n] = ms(p->t_arrive, d->t_final);
			b[n] = ms(last, d->t_final);
			bytes += (double)d->bytes;
			window += ms(first, d->t_final);
			hidden += ms(first, last);
			if (whole >= 0 && ok_pair(&rp[whole * N + i], &rd[whole * N + i])) {
				double tail_whole = ms(rp[whole * N + i].t_layer_end[L - 1],
						       rd[whole * N + i].t_final);
				g[ng] = tail_whole / s->groups;
				c[ng] = b[n] / g[ng];
				ng++;
			}
			n++;
		}
		s->n = n;
		s->ttft_p50 = quantile(a, n, 0.5);
		s->ttft_p99 = quantile(a, n, 0.99);
		s->tail_p50 = quantile(b, n, 0.5);
		s->tail_p99 = quantile(b, n, 0.99);
		s->group_p50 = quantile(g, ng, 0.5);
		s->tail_over_group_p50 = quantile(c, ng, 0.5);
		s->gbps = window > 0 ? bytes / (window / 1e3) / 1e9 : NAN;
		s->overlap_pct = window > 0 ? 100.0 * hidden / window : NAN;
	}
	for (int m = 0; m < o->nmodes; m++)
		st[m].ttft_vs_whole = whole >= 0 ? st[m].ttft_p50 / st[whole].ttft_p50 : NAN;
	free(a);
	free(b);
	free(c);
	free(g);
}

/* ------------------------------------------------------------ output */

static void jnum(FILE *f, const char *key, double v, bool comma)
{
	if (isfinite(v))
		fprintf(f, "\"%s\":%.4g%s", key, v, comma ? "," : "");
	else
		fprintf(f, "\"%s\":null%s", key, comma ? "," : "");
}

static void print_table(orch_t *O, mode_stats_t *st, double link_gbps, double wall_s, int whole)
{
	demo_opts_t *o = O->o;
	FILE *f = O->out;
	fprintf(f, "\n%-14s %9s %9s %9s %9s %9s %7s %7s %7s %9s %5s\n", "mode", "TTFT p50",
		"TTFT p99", "tail p50", "tail p99", "one group", "GB/s", "overlap", "CPU s",
		"verified", "bad");
	fprintf(f, "%-14s %9s %9s %9s %9s %9s %7s %7s %7s %9s %5s\n", "", "ms", "ms", "ms", "ms",
		"ms", "stream", "%", "P+D", "GB", "pages");
	for (int m = 0; m < o->nmodes; m++) {
		mode_stats_t *s = &st[m];
		fprintf(f, "%-14s %9.1f %9.1f %9.2f %9.2f %9.2f %7.2f %7.0f %7.2f %9.2f %5llu\n",
			s->name, s->ttft_p50, s->ttft_p99, s->tail_p50, s->tail_p99, s->group_p50,
			s->gbps, s->overlap_pct, s->cpu_s, (double)s->bytes_verified / 1e9,
			(unsigned long long)s->mismatches);
	}
	uint64_t bad = 0;
	int failed = 0;
	for (int m = 0; m < o->nmodes; m++)
		bad += st[m].mismatches, failed += st[m].failed;
	fprintf(f, "\n%d requests x %d modes in %.1f s; %s; %d failed rooms\n", o->requests,
		o->nmodes, wall_s,
		bad ? "MISMATCHES FOUND" : "every page of every room verified at D", failed);
	if (whole < 0)
		return;
	for (int m = 0; m < o->nmodes; m++) {
		if (m == whole)
			continue;
		mode_stats_t *s = &st[m];
		fprintf(f,
			"%s vs whole-request: TTFT p50 %.2fx (%.1f -> %.1f ms); exposed tail p50 "
			"%.2f ms; per request, tail / one group's transfer: median %.2fx (one "
			"group p50 %.2f ms)\n",
			s->name, s->ttft_vs_whole, st[whole].ttft_p50, s->ttft_p50, s->tail_p50,
			s->tail_over_group_p50, s->group_p50);
	}
	(void)link_gbps;
}

static void print_json(orch_t *O, mode_stats_t *st, double link_gbps, double tflops_used,
		       double wall_s, int whole, const char *svg_written, demo_room_rec_t *rp,
		       demo_room_rec_t *rd)
{
	demo_opts_t *o = O->o;
	FILE *f = stdout;
	uint64_t bad = 0;
	int failed = 0;
	fprintf(f,
		"{\"demo\":\"layercake\",\"version\":\"%s\",\"model\":{\"name\":\"%s\","
		"\"layers\":%u,\"draft_layers\":%u,\"buffers\":%u,\"page_tokens\":%u,"
		"\"page_bytes\":%llu,",
		lc_version(), o->model->name, o->model->layers, o->draft_layers, o->buffers,
		o->page_tokens, (unsigned long long)o->item_len);
	jnum(f, "kv_bytes_per_token_per_layer",
	     (double)o->model->comp_bytes_per_token * o->model->components, true);
	jnum(f, "linear_flops_per_token_per_layer", o->model->linear_flops, false);
	fprintf(f,
		"},\"transport\":\"%s\",\"p_host\":\"%s\",\"d_host\":\"%s\","
		"\"d_netns\":%s,\"prompts\":[",
		o->transport, o->p_host, o->d_host, o->d_netns ? "true" : "false");
	for (int i = 0; i < o->nprompts; i++)
		fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)o->prompts[i]);
	fprintf(f, "],\"requests\":%d,\"concurrency\":%d,\"tflops_auto\":%s,", o->requests,
		o->concurrency, o->tflops_auto_flag ? "true" : "false");
	jnum(f, "tflops", o->layer_ms > 0 ? NAN : tflops_used, true);
	jnum(f, "layer_ms_fixed", o->layer_ms > 0 ? o->layer_ms : NAN, true);
	jnum(f, "balance", o->balance, true);
	jnum(f, "link_gbps_calibrated", link_gbps, true);
	jnum(f, "wall_s", wall_s, true);
	fprintf(f, "\"modes\":[");
	for (int m = 0; m < o->nmodes; m++) {
		mode_stats_t *s = &st[m];
		bad += s->mismatches;
		failed += s->failed;
		fprintf(f, "%s{\"name\":\"%s\",\"interval\":%d,\"groups\":%d,\"requests_ok\":%d,",
			m ? "," : "", s->name, s->interval, s->groups, s->n);
		jnum(f, "ttft_p50_ms", s->ttft_p50, true);
		jnum(f, "ttft_p99_ms", s->ttft_p99, true);
		jnum(f, "exposed_tail_p50_ms", s->tail_p50, true);
		jnum(f, "exposed_tail_p99_ms", s->tail_p99, true);
		jnum(f, "group_transfer_p50_ms", s->group_p50, true);
		jnum(f, "exposed_tail_over_group_p50", s->tail_over_group_p50, true);
		jnum(f, "ttft_vs_whole_p50", s->ttft_vs_whole, true);
		jnum(f, "stream_gbps", s->gbps, true);
		jnum(f, "overlap_pct", s->overlap_pct, true);
		jnum(f, "cpu_s", s->cpu_s, true);
		jnum(f, "p_cpu_s", o->same_process ? NAN : s->p_cpu_s, true);
		jnum(f, "d_cpu_s", o->same_process ? NAN : s->d_cpu_s, true);
		jnum(f, "wall_s", s->wall_s, true);
		fprintf(f,
			"\"bytes_verified\":%llu,\"mismatches\":%llu,\"metadata_bad\":%llu,"
			"\"failed_rooms\":%d,\"engine\":{",
			(unsigned long long)s->bytes_verified, (unsigned long long)s->mismatches,
			(unsigned long long)s->metadata_bad, s->failed);
		jnum(f, "group_ack_p50_us", s->engine.group_ack_p50_us, true);
		jnum(f, "group_ack_p99_us", s->engine.group_ack_p99_us, true);
		jnum(f, "step_to_post_p50_us", s->engine.step_to_post_p50_us, true);
		fprintf(f,
			"\"batches_posted\":%llu,\"writes_posted\":%llu,\"bytes_posted\":%llu},"
			"\"per_request\":[",
			(unsigned long long)s->engine.batches_posted,
			(unsigned long long)s->engine.writes_posted,
			(unsigned long long)s->engine.bytes_posted);
		for (int i = 0; i < o->requests; i++) {
			demo_room_rec_t *p = &rp[m * o->requests + i],
					*d = &rd[m * o->requests + i];
			fprintf(f, "%s{\"tokens\":%llu,\"status\":\"%s\",", i ? "," : "",
				(unsigned long long)p->tokens, lc_room_status_name(d->status));
			jnum(f, "ttft_ms", ms(p->t_arrive, d->t_final), true);
			jnum(f, "exposed_tail_ms",
			     ms(p->t_layer_end[o->layers_total - 1], d->t_final), true);
			jnum(f, "compute_ms", ms(p->t_start, p->t_layer_end[o->layers_total - 1]),
			     true);
			jnum(f, "wait_ms", ms(p->t_arrive, p->t_start), false);
			fprintf(f, "}");
		}
		fprintf(f, "]}");
	}
	fprintf(f, "],");
	if (whole >= 0) {
		int lw1 = -1;
		for (int m = 0; m < o->nmodes; m++)
			if (o->intervals[m] == 1)
				lw1 = m;
		if (lw1 >= 0) {
			fprintf(f, "\"acceptance\":{");
			jnum(f, "ttft_ratio_layerwise1_vs_whole", st[lw1].ttft_vs_whole, true);
			jnum(f, "exposed_tail_over_group_layerwise1", st[lw1].tail_over_group_p50,
			     true);
			fprintf(f, "\"ttft_ratio_ok\":%s,\"tail_ok\":%s},",
				st[lw1].ttft_vs_whole <= 0.6 ? "true" : "false",
				st[lw1].tail_over_group_p50 <= 2.0 ? "true" : "false");
		}
	}
	fprintf(f, "\"svg\":");
	if (svg_written)
		fprintf(f, "\"%s\",", svg_written);
	else
		fprintf(f, "null,");
	fprintf(f, "\"mismatches\":%llu,\"failed_rooms\":%d}\n", (unsigned long long)bad, failed);
}

/* ------------------------------------------------------------ main */

static int median_prompt_request(const demo_opts_t *o)
{
	uint64_t v[DEMO_MAX_PROMPTS];
	memcpy(v, o->prompts, sizeof v);
	for (int i = 1; i < o->nprompts; i++)
		for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
			uint64_t t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	uint64_t med = v[(o->nprompts - 1) / 2];
	for (int i = 0; i < o->requests; i++)
		if (o->prompts[i % o->nprompts] == med)
			return i;
	return 0;
}

static double mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	double kb = 0;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb * 1024;
}

/* Measure the link: whole-request rooms of the median prompt, no compute. */
static int calibrate(orch_t *O, int mode, double *gbps)
{
	demo_opts_t *o = O->o;
	enum { K = 5 };
	demo_room_rec_t p[K], d[K];
	item_t it[K];
	uint64_t tokens = o->prompts[median_prompt_request(o) % o->nprompts];
	for (int i = 0; i < K; i++)
		it[i] = (item_t){.mode = mode, .req = -2, .tokens = tokens, .p = &p[i], .d = &d[i]};
	int rc = run_set(O, it, K, 1);
	if (rc)
		return rc;
	double r[K];
	int n = 0;
	for (int i = 0; i < K; i++)
		if (ok_pair(&p[i], &d[i]))
			r[n++] = (double)d[i].bytes /
				 ((double)(d[i].t_final - p[i].t_layer_end[o->layers_total - 1]) /
				  1e9) /
				 1e9;
	if (!n) {
		snprintf(O->error, sizeof O->error, "calibration rooms failed: %s", d[0].reason);
		return -EIO;
	}
	/* The best run, as the physical baselines take the best of theirs: on a
	 * shared machine the slower runs measure the neighbours, not the link. */
	*gbps = quantile(r, n, 1.0);
	return 0;
}

int lc__cmd_demo(int argc, char **argv)
{
	demo_opts_t opts;
	char svg_buf[4200], label[32];
	if (lc__cli_wants_help(argc, argv)) {
		fputs(demo_help, stdout);
		return 0;
	}
	int rc = parse_opts(argc, argv, &opts, svg_buf, sizeof svg_buf);
	if (rc)
		return rc;
	demo_opts_t *o = &opts;
	orch_t O = {.o = o,
		    .fd_p = -1,
		    .fd_d = -1,
		    .next_room = 1000,
		    .out = o->json ? stderr : stdout};
	int N = o->requests, M = o->nmodes, whole = -1, exit_code = 1;
	for (int m = 0; m < M; m++)
		if (o->intervals[m] <= 0 && whole < 0)
			whole = m;
	double need = 2.0 * (double)(o->pool_pages + 1) * o->buffers * (double)o->item_len;
	double avail = mem_available();
	if (avail > 0 && need > 0.8 * avail) {
		fprintf(stderr,
			"layercake demo: the KV pools need %.1f GiB (P and D), %.1f GiB available: "
			"use shorter --prompts, a lower --concurrency or a smaller model\n",
			need / (1 << 30), avail / (1 << 30));
		return 2;
	}
	o->tflops_auto_flag = o->tflops <= 0 && o->layer_ms <= 0;
	demo_room_rec_t *rp = calloc((size_t)(N * M), sizeof *rp);
	demo_room_rec_t *rd = calloc((size_t)(N * M), sizeof *rd);
	item_t *items = calloc((size_t)o->concurrency, sizeof *items);
	mode_stats_t st[DEMO_MAX_MODES] = {0};
	demo_room_rec_t warm_p, warm_d;
	double link_gbps = NAN;
	const char *svg_written = NULL;
	if (!rp || !rd || !items) {
		fprintf(stderr, "layercake demo: out of memory\n");
		goto free_all;
	}
	uint64_t t0 = lc__demo_now_ns();
	fprintf(O.out,
		"layercake %s demo: %s (%s%s), %u-token pages, %d requests x %d modes, "
		"concurrency %d, %s\n",
		lc_version(), o->model->name, o->model->about, o->draft_layers ? " + draft" : "",
		o->page_tokens, N, M, o->concurrency, o->transport);
	if (o->d_netns || strcmp(o->p_host, "127.0.0.1") || strcmp(o->d_host, "127.0.0.1"))
		fprintf(O.out, "bootstrap and P at %s; D at %s%s%s\n", o->p_host, o->d_host,
			o->d_netns ? " in network namespace " : "", o->d_netns ? o->d_netns : "");
	if ((rc = spawn(&O))) {
		fprintf(stderr, "layercake demo: fork: %s\n", lc_strerror(rc));
		goto free_all;
	}
	demo_msg_t setup = {.type = DEMO_SETUP};
	for (int m = 0; m < M; m++) {
		lc_bootstrap_params_t bp = {.size = sizeof bp, .host = o->p_host, .port = 0};
		if ((rc = lc_bootstrap_start(&bp, &O.boot[m])) ||
		    (rc = lc_bootstrap_addr(O.boot[m], setup.boot[m], sizeof setup.boot[m])) < 0) {
			snprintf(O.error, sizeof O.error, "bootstrap server: %s", lc_strerror(rc));
			goto fail;
		}
	}
	fprintf(stderr, "layercake demo: allocating and touching %.2f GiB of KV pools...\n",
		need / (1 << 30));
	if ((rc = both(&O, &setup, DEMO_READY, NULL, NULL, 300000)))
		goto fail;
	/* Warm-up: discovery, registration and connections of every mode. */
	for (int m = 0; m < M; m++) {
		item_t w = {.mode = m,
			    .req = -1,
			    .tokens = o->page_tokens,
			    .layer_ns = 100000,
			    .p = &warm_p,
			    .d = &warm_d};
		if ((rc = run_set(&O, &w, 1, 1)))
			goto fail;
		if (!ok_pair(&warm_p, &warm_d)) {
			snprintf(O.error, sizeof O.error, "warm-up room of %s failed: %s",
				 lc__demo_mode_name(o->intervals[m], label, sizeof label),
				 warm_d.reason[0] ? warm_d.reason : warm_p.reason);
			goto fail;
		}
	}
	if (o->tflops_auto_flag) {
		int cm = whole >= 0 ? whole : 0;
		uint64_t med = o->prompts[median_prompt_request(o) % o->nprompts];
		if ((rc = calibrate(&O, cm, &link_gbps)))
			goto fail;
		double t_layer = lc__demo_layer_bytes(o, med) / (link_gbps * 1e9 * o->balance);
		o->tflops = lc__demo_layer_flops(o, med) / t_layer / 1e12;
		fprintf(O.out,
			"link: %.2f GB/s measured (whole-request, no compute); roofline set to "
			"%.1f TFLOP/s so that KV is produced at %.2f x the link rate\n",
			link_gbps, o->tflops, o->balance);
	} else if (o->layer_ms > 0) {
		fprintf(O.out, "compute: fixed %.3f ms per layer\n", o->layer_ms);
	} else {
		fprintf(O.out, "roofline: %.1f TFLOP/s\n", o->tflops);
	}
	for (int k = 0; k < o->nprompts && k < N; k++) {
		uint64_t n = o->prompts[k];
		double lb = lc__demo_layer_bytes(o, n);
		fprintf(O.out,
			"  %6llu tokens: %u layers x %.2f ms compute (KV written %.0f%% in), %.1f MB "
			"of KV per layer",
			(unsigned long long)n, o->layers_total,
			(double)lc__demo_layer_ns(o, n) / 1e6, 100 * lc__demo_kv_frac(o, n),
			lb / 1e6);
		if (isfinite(link_gbps))
			fprintf(O.out, " (%.2f ms at the link rate)", lb / (link_gbps * 1e9) * 1e3);
		fprintf(O.out, "\n");
	}
	/* The measured requests: blocks of `concurrency`, each block in every
	 * mode in turn (the first mode rotates), so drift hits all modes. */
	int blocks = (N + o->concurrency - 1) / o->concurrency;
	for (int blk = 0; blk < blocks; blk++) {
		int start = blk * o->concurrency;
		int cnt = N - start < o->concurrency ? N - start : o->concurrency;
		for (int k = 0; k < M; k++) {
			int m = (blk + k) % M;
			for (int j = 0; j < cnt; j++) {
				int i = start + j;
				uint64_t tok = o->prompts[i % o->nprompts];
				uint64_t lns = lc__demo_layer_ns(o, tok);
				items[j] = (item_t){
					.mode = m,
					.req = i,
					.tokens = tok,
					.layer_ns = lns,
					.kv_ns = (uint64_t)((double)lns * lc__demo_kv_frac(o, tok)),
					.p = &rp[m * N + i],
					.d = &rd[m * N + i]};
			}
			uint64_t cp0, cd0, cp1, cd1, w0 = lc__demo_now_ns();
			if ((rc = snap(&O, &cp0, &cd0)) ||
			    (rc = run_set(&O, items, cnt, o->concurrency)) ||
			    (rc = snap(&O, &cp1, &cd1)))
				goto fail;
			st[m].p_cpu_s += (double)(cp1 - cp0) / 1e9;
			st[m].d_cpu_s += (double)(cd1 - cd0) / 1e9;
			st[m].cpu_s = st[m].p_cpu_s + st[m].d_cpu_s;
			st[m].wall_s += (double)(lc__demo_now_ns() - w0) / 1e9;
		}
		fprintf(stderr, "layercake demo: %d/%d requests done in every mode\n", start + cnt,
			N);
	}
	demo_msg_t fp = {0}, quit = {.type = DEMO_QUIT};
	if ((rc = both(&O, &quit, DEMO_FINAL, &fp, NULL, 60000)))
		goto fail;
	reap(&O, false);
	double cpu_s[DEMO_MAX_MODES], pcpu[DEMO_MAX_MODES], dcpu[DEMO_MAX_MODES],
		wall[DEMO_MAX_MODES];
	for (int m = 0; m < M; m++)
		cpu_s[m] = st[m].cpu_s, pcpu[m] = st[m].p_cpu_s, dcpu[m] = st[m].d_cpu_s,
		wall[m] = st[m].wall_s;
	compute_stats(o, rp, rd, whole, st);
	for (int m = 0; m < M; m++) {
		st[m].cpu_s = cpu_s[m], st[m].p_cpu_s = pcpu[m], st[m].d_cpu_s = dcpu[m];
		st[m].wall_s = wall[m];
		st[m].engine = fp.engine[m];
	}
	double wall_s = (double)(lc__demo_now_ns() - t0) / 1e9;
	if (o->svg) {
		int r = o->svg_request >= 0 && o->svg_request < N ? o->svg_request
								  : median_prompt_request(o);
		demo_svg_row_t rows[DEMO_MAX_MODES];
		for (int m = 0; m < M; m++)
			rows[m] = (demo_svg_row_t){.name = st[m].name,
						   .p = &rp[m * N + r],
						   .d = &rd[m * N + r],
						   .interval = o->intervals[m]};
		if ((rc = lc__demo_svg(o->svg, o, rows, M)))
			fprintf(stderr, "layercake demo: %s: %s\n", o->svg, lc_strerror(rc));
		else
			svg_written = o->svg;
	}
	print_table(&O, st, link_gbps, wall_s, whole);
	if (svg_written)
		fprintf(O.out, "timeline of request %d: %s\n",
			o->svg_request >= 0 && o->svg_request < N ? o->svg_request
								  : median_prompt_request(o),
			svg_written);
	if (o->json)
		print_json(&O, st, link_gbps, o->tflops, wall_s, whole, svg_written, rp, rd);
	exit_code = 0;
	for (int m = 0; m < M; m++)
		if (st[m].mismatches || st[m].failed)
			exit_code = 1;
	goto stop;
fail:
	fprintf(stderr, "layercake demo: %s\n", O.error[0] ? O.error : lc_strerror(rc));
	reap(&O, true);
stop:
	for (int m = 0; m < M; m++)
		lc_bootstrap_stop(O.boot[m]);
	if (O.fd_p >= 0)
		close(O.fd_p);
	if (O.fd_d >= 0)
		close(O.fd_d);
free_all:
	free(rp);
	free(rd);
	free(items);
	return exit_code;
}
