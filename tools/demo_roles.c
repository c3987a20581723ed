/*
 * The demo's P and D processes. Each is one event loop on its socket to
 * the orchestrator (demo.h), polling its rooms between messages.
 *
 * P is one "GPU": it runs one forward at a time (FIFO of Bootstrapped
 * requests); each layer fills its pages with the pattern, waits out the
 * rest of the layer's compute time and records the layer's step, as a GPU
 * stream would. After the last layer it publishes the first token and
 * records the aux step. One lc_prefill_t per mode (each read its own
 * layerwise_interval from the context when it was created), each
 * registered with its own bootstrap server.
 *
 * D has one lc_decode_t; per request it creates a receiver for the mode's
 * bootstrap server, grants its pages once Bootstrapped, stamps every growth
 * of lc_receiver_layers_ready, and on Success hands the pages to a verifier
 * thread that checks every word of every page.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli.h"
#include "demo.h"

/* Polling periods while rooms wait for something latency-relevant (a
 * Bootstrapped status, a landing) and while they only wait to be reaped. */
#define TICK_HOT_NS (DEMO_POLL_US * 1000u)
#define TICK_COLD_NS 500000u

static int send_msg(int fd, const demo_msg_t *m)
{
	ssize_t n = send(fd, m, sizeof *m, MSG_NOSIGNAL);
	return n == (ssize_t)sizeof *m ? 0 : -EIO;
}

static void send_fail(int fd, const char *who, const char *what, int rc)
{
	demo_msg_t m = {.type = DEMO_FAIL, .rc = rc};
	snprintf(m.text, sizeof m.text, "%s: %s: %s (%s)", who, what, lc__cli_why(rc),
		 lc_err_name(rc));
	fprintf(stderr, "layercake demo: %s\n", m.text);
	send_msg(fd, &m);
}

/* Wait for a message or until `timeout_ns` (UINT64_MAX: forever). Returns
 * 1 with *m filled, 0 on timeout, -EIO when the orchestrator is gone. */
static int wait_msg(int fd, int extra_fd, uint64_t timeout_ns, demo_msg_t *m, int *extra_ready)
{
	struct pollfd pf[2] = {{.fd = fd, .events = POLLIN}, {.fd = extra_fd, .events = POLLIN}};
	struct timespec ts = {(time_t)(timeout_ns / 1000000000u), (long)(timeout_ns % 1000000000u)};
	int n = ppoll(pf, extra_fd >= 0 ? 2 : 1, timeout_ns == UINT64_MAX ? NULL : &ts, NULL);
	if (n < 0)
		return 0;
	if (extra_ready)
		*extra_ready = extra_fd >= 0 && (pf[1].revents & POLLIN);
	if (pf[0].revents & (POLLERR | POLLHUP) && !(pf[0].revents & POLLIN))
		return -EIO;
	if (!(pf[0].revents & POLLIN))
		return 0;
	ssize_t got = recv(fd, m, sizeof *m, 0);
	if (got != (ssize_t)sizeof *m)
		return -EIO;
	return 1;
}

int lc__demo_enter_netns(const char *name, char *err, size_t cap)
{
	char path[512];
	if (strchr(name, '/'))
		snprintf(path, sizeof path, "%s", name);
	else
		snprintf(path, sizeof path, "/var/run/netns/%s", name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		snprintf(err, cap, "network namespace %s: cannot open %s: %s", name, path,
			 strerror(e));
		return -e;
	}
	if (setns(fd, CLONE_NEWNET)) {
		int e = errno;
		snprintf(err, cap, "network namespace %s: setns: %s%s", name, strerror(e),
			 e == EPERM ? " (needs CAP_SYS_ADMIN: run as root)" : "");
		close(fd);
		return -e;
	}
	close(fd);
	/* /sys/class/net still lists the old namespace's interfaces until sysfs
	 * is mounted again from inside the new one; UCX picks its devices from
	 * there. As `ip netns exec`: a private mount namespace, a fresh /sys. */
	if (unshare(CLONE_NEWNS) || mount("", "/", NULL, MS_SLAVE | MS_REC, NULL) ||
	    umount2("/sys", MNT_DETACH) || mount(name, "/sys", "sysfs", 0, NULL))
		fprintf(stderr,
			"layercake demo: D: network namespace %s entered, but /sys could not be "
			"remounted (%s): UCX may see the wrong interfaces\n",
			name, strerror(errno));
	return 0;
}

static int make_ctx(const char *name, lc_ctx_t **out)
{
	lc_ctx_params_t cp = {.size = sizeof cp, .name = name};
	return lc_ctx_create(&cp, out);
}

/* ------------------------------------------------------------------ P */

enum p_state { P_FREE, P_BOOT, P_QUEUED, P_RUN, P_WAIT };

typedef struct p_req {
	enum p_state state;
	demo_room_rec_t rec;
	lc_sender_t *sender;
	int64_t *pages;
	uint64_t layer_ns, kv_ns;
	struct p_req *next;
} p_req_t;

typedef struct p_role {
	const demo_opts_t *o;
	int fd;
	lc_ctx_t *ctx;
	demo_pool_t pool;
	int nmodes;
	lc_prefill_t *pf[DEMO_MAX_MODES];
	lc_engine_t *eng[DEMO_MAX_MODES];
	p_req_t reqs[DEMO_MAX_INFLIGHT];
	p_req_t *qhead, *qtail; /* Bootstrapped, waiting for the GPU */
	p_req_t *run;           /* on the GPU */
	uint32_t layer;         /* the layer being computed */
	uint64_t layer_start;   /* when it started */
	uint64_t deadline;      /* when its KV is written, then when it ends */
	bool filled;            /* its pages are written */
	bool recorded;          /* its step is recorded */
} p_role_t;

static void p_fill_layer(p_role_t *p, p_req_t *r, uint32_t layer)
{
	uint32_t idx[8];
	int n = lc_layout_layer_buffers(p->pool.layout, (int)layer, idx, 8);
	for (int i = 0; i < n && i < 8; i++)
		for (uint64_t j = 0; j < r->rec.pages; j++)
			lc__demo_fill(p->pool.base[idx[i]] + (uint64_t)r->pages[j] * p->o->item_len,
				      p->o->item_len, lc__demo_seed(r->rec.room, idx[i], j));
}

static void p_report(p_role_t *p, p_req_t *r)
{
	demo_msg_t m = {.type = DEMO_ROOM, .rec = r->rec};
	send_msg(p->fd, &m);
	lc_sender_destroy(r->sender);
	lc__demo_pages_free(&p->pool, r->pages, r->rec.pages);
	free(r->pages);
	memset(r, 0, sizeof *r);
}

static int p_setup(p_role_t *p, const demo_msg_t *m)
{
	int rc;
	for (int i = 0; i < p->o->nmodes; i++) {
		char v[16], name[32];
		snprintf(v, sizeof v, "%d", p->o->intervals[i]);
		rc = lc_ctx_config_set(p->ctx, "layerwise_interval", v);
		if (rc)
			return rc;
		snprintf(name, sizeof name, "P-%s",
			 lc__demo_mode_name(p->o->intervals[i], v, sizeof v));
		lc_prefill_params_t pp = {.size = sizeof pp,
					  .layout = p->pool.layout,
					  .bootstrap = m->boot[i],
					  .host = p->o->p_host,
					  .name = name,
					  .world_size = 1,
					  .dp_size = 1,
					  .engine_rank = 0};
		rc = lc_prefill_create(p->ctx, &pp, &p->pf[i]);
		if (rc)
			return rc;
		p->nmodes = i + 1;
		rc = lc_prefill_engine(p->pf[i], &p->eng[i]);
		if (rc)
			return rc;
	}
	return 0;
}

static int p_request(p_role_t *p, const demo_msg_t *m)
{
	p_req_t *r = NULL;
	for (int i = 0; i < DEMO_MAX_INFLIGHT && !r; i++)
		if (p->reqs[i].state == P_FREE)
			r = &p->reqs[i];
	if (!r || m->mode < 0 || m->mode >= p->nmodes)
		return -ENOSPC;
	memset(r, 0, sizeof *r);
	r->rec.t_arrive = lc__demo_now_ns();
	r->rec.room = m->room;
	r->rec.mode = m->mode;
	r->rec.req = m->req;
	r->rec.tokens = m->tokens;
	r->rec.pages = lc__demo_pages_of(p->o, m->tokens);
	r->rec.bytes = r->rec.pages * p->o->item_len * p->o->buffers;
	r->rec.layers = (int32_t)p->o->layers_total;
	r->layer_ns = m->layer_ns;
	r->kv_ns = m->kv_ns < m->layer_ns ? m->kv_ns : m->layer_ns;
	r->pages = calloc(r->rec.pages, sizeof *r->pages);
	if (!r->pages)
		return -ENOMEM;
	int rc = lc_sender_create(p->pf[m->mode], m->room, &r->sender);
	if (rc) {
		free(r->pages);
		return rc;
	}
	r->state = P_BOOT;
	return 0;
}

/* Statuses: Bootstrapped -> the GPU queue; final -> report. */
static void p_poll_rooms(p_role_t *p)
{
	for (int i = 0; i < DEMO_MAX_INFLIGHT; i++) {
		p_req_t *r = &p->reqs[i];
		if (r->state != P_BOOT && r->state != P_WAIT && r->state != P_QUEUED)
			continue;
		lc_room_info_t info = {.size = sizeof info};
		int st = lc_sender_poll(r->sender, &info);
		if (st == LC_ROOM_FAILED || (st == LC_ROOM_SUCCESS && r->state == P_WAIT)) {
			r->rec.status = st;
			r->rec.t_final = lc__demo_now_ns();
			snprintf(r->rec.reason, sizeof r->rec.reason, "%s", info.reason);
			if (r->state == P_QUEUED) { /* unlink from the GPU queue */
				p_req_t **pp = &p->qhead, *prev = NULL;
				while (*pp && *pp != r) {
					prev = *pp;
					pp = &(*pp)->next;
				}
				if (*pp)
					*pp = r->next;
				if (p->qtail == r)
					p->qtail = prev;
			}
			p_report(p, r);
			continue;
		}
		if (r->state == P_BOOT && st >= LC_ROOM_BOOTSTRAPPED) {
			r->rec.t_boot = lc__demo_now_ns();
			r->state = P_QUEUED;
			r->next = NULL;
			if (p->qtail)
				p->qtail->next = r;
			else
				p->qhead = r;
			p->qtail = r;
		}
	}
}

/* The GPU: start the next forward, fill and record layers on time. */
static int p_gpu(p_role_t *p)
{
	int rc;
	uint64_t now = lc__demo_now_ns();
	if (!p->run && p->qhead) {
		p_req_t *r = p->qhead;
		if (lc__demo_pages_alloc(&p->pool, r->rec.pages, r->pages))
			return 0; /* pages come back as rooms finish */
		p->qhead = r->next;
		if (!p->qhead)
			p->qtail = NULL;
		lc_engine_t *e = p->eng[r->rec.mode];
		lc_chunk_t c = {.size = sizeof c,
				.room = r->rec.room,
				.pages = r->pages,
				.page_count = r->rec.pages,
				.dst_index = 0,
				.is_last = 1};
		if ((rc = lc_engine_batch_begin(e, 0)) || (rc = lc_engine_chunk_add(e, &c)) ||
		    (rc = lc_engine_batch_end(e)))
			return rc;
		now = lc__demo_now_ns(); /* the forward starts once it is launched */
		r->state = P_RUN;
		r->rec.t_start = now;
		p->run = r;
		p->layer = 0;
		p->filled = p->recorded = false;
		p->layer_start = now;
		p->deadline = now + r->kv_ns;
	}
	/* Each layer: its KV is written (the pattern) and its step recorded
	 * kv_ns into the layer, as the KV write follows the projections; the
	 * rest of the layer (attention, MLP) runs until layer_ns. */
	while (p->run) {
		p_req_t *r = p->run;
		lc_engine_t *e = p->eng[r->rec.mode];
		if (!p->filled) {
			p_fill_layer(p, r, p->layer);
			p->filled = true;
			now = lc__demo_now_ns();
		}
		if (now < p->deadline)
			return 0;
		if (!p->recorded) {
			if ((rc = lc_engine_record_cache(e)))
				return rc;
			r->rec.t_layer[p->layer] = now;
			p->recorded = true;
			p->deadline = p->layer_start + r->layer_ns;
			continue;
		}
		r->rec.t_layer_end[p->layer] = now;
		if (++p->layer < p->o->layers_total) {
			p->filled = p->recorded = false;
			p->layer_start = p->deadline;
			p->deadline = p->layer_start + r->kv_ns;
			continue;
		}
		char tok[64];
		int n = lc__demo_first_token(r->rec.room, tok, sizeof tok);
		if ((rc = lc_sender_metadata_set(r->sender, tok, (size_t)n + 1)) ||
		    (rc = lc_engine_record_aux(e)))
			return rc;
		r->rec.t_aux = lc__demo_now_ns();
		r->state = P_WAIT;
		p->run = NULL;
	}
	return 0;
}

static void p_final(p_role_t *p, demo_msg_t *m)
{
	m->type = DEMO_FINAL;
	for (int i = 0; i < p->nmodes; i++) {
		lc_engine_metrics_t em = {.size = sizeof em};
		if (lc_engine_metrics(p->eng[i], &em))
			continue;
		m->engine[i] = (demo_engine_stats_t){
			.group_ack_p50_us = lc_histogram_quantile_us(&em.group_ack_latency, 0.5),
			.group_ack_p99_us = lc_histogram_quantile_us(&em.group_ack_latency, 0.99),
			.step_to_post_p50_us = lc_histogram_quantile_us(&em.step_to_post, 0.5),
			.batches_posted = em.batches_posted,
			.writes_posted = em.writes_posted,
			.bytes_posted = em.bytes_posted,
			.rooms_failed = em.rooms_failed,
		};
	}
	m->cpu_ns = lc__demo_cpu_ns();
}

int lc__demo_prefill(const demo_opts_t *o, int fd)
{
	p_role_t *p = calloc(1, sizeof *p);
	demo_msg_t m;
	int rc, exit_code = 1;
	if (!p)
		return 1;
	p->o = o;
	p->fd = fd;
	prctl(PR_SET_TIMERSLACK, 1000UL); /* layer deadlines to the microsecond */
	if ((rc = make_ctx("demo-P", &p->ctx))) {
		send_fail(fd, "P", "context", rc);
		goto out;
	}
	if ((rc = lc__demo_pool_create(o, p->ctx, o->pool_pages, !strcmp(o->transport, "shm"),
				       &p->pool))) {
		send_fail(fd, "P", "KV pool", rc);
		goto destroy_ctx;
	}
	for (;;) {
		bool hot = false, cold = false;
		p_poll_rooms(p);
		if ((rc = p_gpu(p))) {
			send_fail(fd, "P", "forward", rc);
			goto destroy;
		}
		hot = false;
		for (int i = 0; i < DEMO_MAX_INFLIGHT; i++) {
			hot |= p->reqs[i].state == P_BOOT;
			cold |= p->reqs[i].state == P_WAIT || p->reqs[i].state == P_QUEUED;
		}
		uint64_t timeout = UINT64_MAX, now = lc__demo_now_ns();
		if (p->run)
			timeout = p->deadline > now ? p->deadline - now : 0;
		if (hot && timeout > TICK_HOT_NS)
			timeout = TICK_HOT_NS;
		if (cold && timeout > TICK_COLD_NS)
			timeout = TICK_COLD_NS;
		int got = wait_msg(fd, -1, timeout, &m, NULL);
		if (got < 0)
			goto destroy;
		if (!got)
			continue;
		switch (m.type) {
		case DEMO_SETUP:
			rc = p_setup(p, &m);
			if (rc) {
				send_fail(fd, "P", "lc_prefill_create", rc);
				goto destroy;
			}
			send_msg(fd, &(demo_msg_t){.type = DEMO_READY});
			break;
		case DEMO_REQUEST:
			if ((rc = p_request(p, &m))) {
				send_fail(fd, "P", "lc_sender_create", rc);
				goto destroy;
			}
			break;
		case DEMO_SNAP:
			send_msg(fd, &(demo_msg_t){.type = DEMO_SNAP, .cpu_ns = lc__demo_cpu_ns()});
			break;
		case DEMO_QUIT:
			p_final(p, &m);
			send_msg(fd, &m);
			exit_code = 0;
			goto destroy;
		default:
			break;
		}
	}
destroy:
	for (int i = 0; i < DEMO_MAX_INFLIGHT; i++)
		if (p->reqs[i].state != P_FREE) {
			lc_sender_destroy(p->reqs[i].sender);
			free(p->reqs[i].pages);
		}
	for (int i = 0; i < p->nmodes; i++)
		lc_prefill_destroy(p->pf[i]);
	lc__demo_pool_destroy(&p->pool);
destroy_ctx:
	lc_ctx_destroy(p->ctx);
out:
	free(p);
	return exit_code;
}

/* ------------------------------------------------------------------ D */

enum d_state { D_FREE, D_BOOT, D_XFER, D_VERIFY };

typedef struct d_req {
	enum d_state state;
	demo_room_rec_t rec;
	lc_receiver_t *receiver;
	int64_t *pages;
	uint32_t landed;
	struct d_req *next; /* verifier queue */
} d_req_t;

typedef struct d_role {
	const demo_opts_t *o;
	int fd;
	lc_ctx_t *ctx;
	demo_pool_t pool;
	lc_decode_t *decode;
	char boot[DEMO_MAX_MODES][64];
	d_req_t reqs[DEMO_MAX_INFLIGHT];
	/* verifier thread: queue in, pipe out */
	pthread_t verifier;
	bool verifier_started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	d_req_t *vhead, *vtail;
	bool stop;
	int done_pipe[2];
} d_role_t;

static void d_verify(d_role_t *d, d_req_t *r)
{
	const demo_opts_t *o = d->o;
	uint64_t bad = 0;
	for (uint32_t b = 0; b < o->buffers; b++)
		for (uint64_t j = 0; j < r->rec.pages; j++)
			bad += !lc__demo_check(d->pool.base[b] +
						       (uint64_t)r->pages[j] * o->item_len,
					       o->item_len, lc__demo_seed(r->rec.room, b, j));
	r->rec.bad_pages = bad;
	r->rec.bytes_verified = r->rec.pages * o->buffers * o->item_len;
	r->rec.t_verified = lc__demo_now_ns();
}

static void *d_verifier(void *arg)
{
	d_role_t *d = arg;
	pthread_mutex_lock(&d->lock);
	for (;;) {
		while (!d->vhead && !d->stop)
			pthread_cond_wait(&d->cond, &d->lock);
		if (d->stop)
			break;
		d_req_t *r = d->vhead;
		d->vhead = r->next;
		if (!d->vhead)
			d->vtail = NULL;
		pthread_mutex_unlock(&d->lock);
		d_verify(d, r);
		int idx = (int)(r - d->reqs);
		if (write(d->done_pipe[1], &idx, sizeof idx) != (ssize_t)sizeof idx)
			fprintf(stderr, "layercake demo: D: verifier pipe\n");
		pthread_mutex_lock(&d->lock);
	}
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

static void d_report(d_role_t *d, d_req_t *r)
{
	demo_msg_t m = {.type = DEMO_ROOM, .rec = r->rec};
	send_msg(d->fd, &m);
	lc__demo_pages_free(&d->pool, r->pages, r->rec.pages);
	free(r->pages);
	memset(r, 0, sizeof *r);
}

static int d_request(d_role_t *d, const demo_msg_t *m)
{
	d_req_t *r = NULL;
	for (int i = 0; i < DEMO_MAX_INFLIGHT && !r; i++)
		if (d->reqs[i].state == D_FREE)
			r = &d->reqs[i];
	if (!r || m->mode < 0 || m->mode >= d->o->nmodes)
		return -ENOSPC;
	memset(r, 0, sizeof *r);
	r->rec.t_arrive = lc__demo_now_ns();
	r->rec.room = m->room;
	r->rec.mode = m->mode;
	r->rec.req = m->req;
	r->rec.tokens = m->tokens;
	r->rec.pages = lc__demo_pages_of(d->o, m->tokens);
	r->rec.bytes = r->rec.pages * d->o->item_len * d->o->buffers;
	r->rec.layers = (int32_t)d->o->layers_total;
	r->pages = calloc(r->rec.pages, sizeof *r->pages);
	if (!r->pages)
		return -ENOMEM;
	int rc = lc__demo_pages_alloc(&d->pool, r->rec.pages, r->pages);
	if (!rc)
		rc = lc_receiver_create(d->decode, d->boot[m->mode], m->room, &r->receiver);
	if (rc) {
		lc__demo_pages_free(&d->pool, r->pages, r->rec.pages);
		free(r->pages);
		return rc;
	}
	r->state = D_BOOT;
	return 0;
}

static void d_finish(d_role_t *d, d_req_t *r, int st, const lc_room_info_t *info)
{
	uint64_t now = lc__demo_now_ns();
	r->rec.status = st;
	r->rec.t_final = now;
	snprintf(r->rec.reason, sizeof r->rec.reason, "%s", info->reason);
	if (st == LC_ROOM_SUCCESS) {
		char want[64], got[LC_METADATA_MAX];
		lc__demo_first_token(r->rec.room, want, sizeof want);
		int n = lc_receiver_metadata(r->receiver, got, sizeof got);
		r->rec.metadata_ok = n > 0 && !strcmp(got, want);
		for (uint32_t l = r->landed; l < d->o->layers_total; l++)
			r->rec.t_layer[l] = now; /* landed with the final status */
	}
	lc_receiver_destroy(r->receiver); /* grants are revoked: pages are ours */
	r->receiver = NULL;
	if (st != LC_ROOM_SUCCESS) {
		d_report(d, r);
		return;
	}
	r->state = D_VERIFY;
	pthread_mutex_lock(&d->lock);
	r->next = NULL;
	if (d->vtail)
		d->vtail->next = r;
	else
		d->vhead = r;
	d->vtail = r;
	pthread_cond_signal(&d->cond);
	pthread_mutex_unlock(&d->lock);
}

static int d_poll_rooms(d_role_t *d, bool *hot)
{
	for (int i = 0; i < DEMO_MAX_INFLIGHT; i++) {
		d_req_t *r = &d->reqs[i];
		if (r->state != D_BOOT && r->state != D_XFER)
			continue;
		*hot = true;
		lc_room_info_t info = {.size = sizeof info};
		if (r->state == D_XFER) {
			int ready = lc_receiver_layers_ready(r->receiver);
			uint64_t now = lc__demo_now_ns();
			while (ready > 0 && r->landed < (uint32_t)ready &&
			       r->landed < d->o->layers_total)
				r->rec.t_layer[r->landed++] = now;
		}
		int st = lc_receiver_poll(r->receiver, &info);
		if (st == LC_ROOM_SUCCESS || st == LC_ROOM_FAILED) {
			d_finish(d, r, st, &info);
			continue;
		}
		if (r->state == D_BOOT && st == LC_ROOM_BOOTSTRAPPED) {
			r->rec.t_boot = lc__demo_now_ns();
			lc_receiver_pages_t pg = {.size = sizeof pg,
						  .pages = r->pages,
						  .page_count = r->rec.pages,
						  .aux_index = i};
			int rc = lc_receiver_send(r->receiver, &pg);
			if (rc)
				return rc;
			r->rec.t_start = lc__demo_now_ns();
			r->state = D_XFER;
		}
	}
	return 0;
}

int lc__demo_decode(const demo_opts_t *o, int fd)
{
	d_role_t *d = calloc(1, sizeof *d);
	demo_msg_t m;
	int rc, exit_code = 1;
	if (!d)
		return 1;
	d->o = o;
	d->fd = fd;
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->cond, NULL);
	if (pipe(d->done_pipe)) {
		free(d);
		return 1;
	}
	if ((rc = make_ctx("demo-D", &d->ctx))) {
		send_fail(fd, "D", "context", rc);
		goto out;
	}
	/* Page 0 stays reserved (as in SGLang's pools): D's page ids differ
	 * from P's, so a write to the wrong page cannot pass. */
	if ((rc = lc__demo_pool_create(o, d->ctx, o->pool_pages + 1, !strcmp(o->transport, "shm"),
				       &d->pool))) {
		send_fail(fd, "D", "KV pool", rc);
		goto destroy_ctx;
	}
	d->pool.used[0] = 1;
	d->pool.free_pages--;
	if (pthread_create(&d->verifier, NULL, d_verifier, d)) {
		send_fail(fd, "D", "verifier thread", -EAGAIN);
		goto destroy;
	}
	d->verifier_started = true;
	for (;;) {
		bool hot = false;
		if ((rc = d_poll_rooms(d, &hot))) {
			send_fail(fd, "D", "lc_receiver_send", rc);
			goto destroy;
		}
		int verified = 0;
		int got = wait_msg(fd, d->done_pipe[0], hot ? TICK_HOT_NS : UINT64_MAX, &m,
				   &verified);
		if (verified) {
			int idx;
			if (read(d->done_pipe[0], &idx, sizeof idx) == (ssize_t)sizeof idx &&
			    idx >= 0 && idx < DEMO_MAX_INFLIGHT)
				d_report(d, &d->reqs[idx]);
		}
		if (got < 0)
			goto destroy;
		if (!got)
			continue;
		switch (m.type) {
		case DEMO_SETUP: {
			char url[96];
			memcpy(d->boot, m.boot, sizeof d->boot);
			if (!strcmp(o->transport, "tcp") || !strcmp(o->transport, "ucx"))
				snprintf(url, sizeof url, "%s://%s:0", o->transport, o->d_host);
			else if (!strcmp(o->transport, "shm"))
				snprintf(url, sizeof url, "shm://auto");
			else
				snprintf(url, sizeof url, "%s://demo-d-%d", o->transport,
					 (int)getpid());
			lc_decode_params_t dp = {.size = sizeof dp,
						 .layout = d->pool.layout,
						 .regions = &d->pool.region,
						 .region_count = 1,
						 .listen_url = url,
						 .host = o->d_host,
						 .tp_size = 1};
			if ((rc = lc_decode_create(d->ctx, &dp, &d->decode))) {
				send_fail(fd, "D", "lc_decode_create", rc);
				goto destroy;
			}
			send_msg(fd, &(demo_msg_t){.type = DEMO_READY});
			break;
		}
		case DEMO_REQUEST:
			if ((rc = d_request(d, &m))) {
				send_fail(fd, "D", "lc_receiver_create", rc);
				goto destroy;
			}
			break;
		case DEMO_SNAP:
			send_msg(fd,
				 &(demo_msg_t){.type = DEMO_SNAP,
					       .cpu_ns = o->same_process ? 0 : lc__demo_cpu_ns()});
			break;
		case DEMO_QUIT:
			send_msg(fd,
				 &(demo_msg_t){.type = DEMO_FINAL,
					       .cpu_ns = o->same_process ? 0 : lc__demo_cpu_ns()});
			exit_code = 0;
			goto destroy;
		default:
			break;
		}
	}
destroy:
	if (d->verifier_started) {
		pthread_mutex_lock(&d->lock);
		d->stop = true;
		pthread_cond_signal(&d->cond);
		pthread_mutex_unlock(&d->lock);
		pthread_join(d->verifier, NULL);
	}
	for (int i = 0; i < DEMO_MAX_INFLIGHT; i++)
		if (d->reqs[i].state != D_FREE) {
			lc_receiver_destroy(d->reqs[i].receiver);
			free(d->reqs[i].pages);
		}
	lc_decode_destroy(d->decode);
	lc__demo_pool_destroy(&d->pool);
destroy_ctx:
	lc_ctx_destroy(d->ctx);
out:
	close(d->done_pipe[0]);
	close(d->done_pipe[1]);
	pthread_mutex_destroy(&d->lock);
	pthread_cond_destroy(&d->cond);
	free(d);
	return exit_code;
}
