/* What every part of the ucx transport builds on: status codes, address
 * resolution, the knobs, sending messages, closing endpoints, and the
 * engine's command queue (a leaf of the folder: it calls only UCX and the
 * I/O core). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "transport/io/io.h"
#include "transport/ucx/ucx_int.h"

/* A UCX status as a layercake code; `connected` tells a refused connection
 * (unreachable) from one that broke (peer closed). */
int lc__ucx_map_status(ucs_status_t s, bool connected)
{
	switch (s) {
	case UCS_OK:
		return 0;
	case UCS_ERR_NO_MEMORY:
		return -ENOMEM;
	case UCS_ERR_INVALID_PARAM:
		return -EINVAL;
	case UCS_ERR_UNSUPPORTED:
		return -ENOTSUP;
	case UCS_ERR_CANCELED:
		return LC_ERR_CANCELLED;
	case UCS_ERR_TIMED_OUT:
	case UCS_ERR_ENDPOINT_TIMEOUT:
		return connected ? LC_ERR_PEER_CLOSED : LC_ERR_UNREACHABLE;
	case UCS_ERR_UNREACHABLE:
	case UCS_ERR_REJECTED:
	case UCS_ERR_NOT_CONNECTED:
	case UCS_ERR_CONNECTION_RESET:
	case UCS_ERR_NO_DEVICE:
	case UCS_ERR_INVALID_ADDR:
	case UCS_ERR_IO_ERROR:
		return connected ? LC_ERR_PEER_CLOSED : LC_ERR_UNREACHABLE;
	default:
		return LC_ERR_IO;
	}
}

int lc__ucx_resolve(const char *host, int port, bool passive, struct sockaddr_storage *out,
		    socklen_t *len)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0)};
	struct addrinfo *ai;
	char ps[16];
	snprintf(ps, sizeof ps, "%d", port);
	int rc = getaddrinfo(host[0] ? host : NULL, ps, &hints, &ai);
	if (rc) {
		LC__WARN("ucx: cannot resolve %s: %s", host, gai_strerror(rc));
		return LC_ERR_UNREACHABLE;
	}
	memcpy(out, ai->ai_addr, ai->ai_addrlen);
	*len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

/* UCX 1.13 only selects transports that detect peer failure when an
 * endpoint asks for UCP_ERR_HANDLING_MODE_PEER, which leaves out the
 * shared-memory transports (posix, sysv). Config ucx_err_mode=none
 * (LAYERCAKE_UCX_ERR_MODE) lets them in; a peer's exit is then still
 * reported through the connection manager's TCP connection (client/server
 * endpoints keep it). */
ucp_err_handling_mode_t lc__ucx_err_mode(lc_ctx_t *ctx)
{
	return lc__ctx_cfg(ctx, LC__CFG_ucx_err_mode) == 1 ? UCP_ERR_HANDLING_MODE_NONE
							   : UCP_ERR_HANDLING_MODE_PEER;
}

/* Data mode (config ucx_data, LAYERCAKE_UCX_DATA) of the context, fixed
 * when its engine starts. "am" (0, the default): each write an active
 * message that D receives into the destination it checked itself (UCX's
 * rendezvous lets D pull large writes, a single copy over cma where UCX
 * 1.13 would emulate puts to user memory with two), so a revoke on D is a
 * hard stop whatever UCX transport carries the bytes; the context enables
 * no RMA and publishes no keys. "put" (1): one-sided ucp_put_nbx + flush,
 * only where UCX reports hardware RMA for the path (lc__ucx_ep_hw_rma). */
bool lc__ucx_data_mode_am(lc_ctx_t *ctx)
{
	return lc__ctx_cfg(ctx, LC__CFG_ucx_data) == 0;
}

bool lc__ucx_allow_sw_rma(lc_ctx_t *ctx)
{
	return lc__ctx_cfg(ctx, LC__CFG_ucx_allow_sw_rma) == 1;
}

/* Transports whose RMA a NIC performs against a registered memory key: an
 * RC or DC queue pair (verbs or mlx5). Everything else that can carry a put
 * for user memory in UCX 1.13 is a copy by a CPU that checks no key: tcp
 * (its memory domain registers nothing), cma/knem/xpmem (the peer's process
 * copies), self, and the software emulation over active messages. */
static bool tl_is_hw_rma(const char *tl)
{
	return !strncmp(tl, "rc_", 3) || !strncmp(tl, "dc_", 3);
}

/* UCX 1.13 has no query for an endpoint's transports (ucp_ep_query knows
 * names and addresses only); ucp_ep_print_info lists its lanes ("lane[i]:
 * n:tl/dev ...") and the lanes that carry puts ("put[i]: ..."). A format it
 * does not recognise reads as "no hardware RMA": the check fails closed. */
bool lc__ucx_ep_hw_rma(ucp_ep_h ep, char *desc, size_t cap)
{
	char tl[16][32] = {{0}}, line[512];
	bool put[16] = {false}, hw = false;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f) {
		snprintf(desc, cap, "unknown (no memory)");
		return false;
	}
	ucp_ep_print_info(ep, f);
	fclose(f);
	FILE *r = fmemopen(buf, len, "r");
	while (r && fgets(line, sizeof line, r)) {
		unsigned i, n;
		char name[32];
		const char *p = strstr(line, "lane[");
		if (p && sscanf(p, "lane[%u]: %u:%31[^/]", &i, &n, name) == 3 && i < 16)
			snprintf(tl[i], sizeof tl[i], "%s", name);
		p = strstr(line, "put[");
		if (p && sscanf(p, "put[%u]", &i) == 1 && i < 16)
			put[i] = true;
	}
	if (r)
		fclose(r);
	free(buf);
	size_t at = 0;
	desc[0] = 0;
	for (unsigned i = 0; i < 16; i++) {
		if (!put[i] || !tl[i][0])
			continue;
		hw = hw || tl_is_hw_rma(tl[i]);
		int k = snprintf(desc + at, cap - at, "%s%s", at ? "," : "", tl[i]);
		if (k > 0 && (size_t)k < cap - at)
			at += (size_t)k;
	}
	if (!at)
		snprintf(desc, cap, "none: puts emulated over active messages");
	return hw;
}

msg_t *lc__ucx_msg_new(ustate_t *st, size_t len)
{
	msg_t *m = malloc(sizeof *m + len);
	if (m) {
		m->st = st;
		m->len = len;
	}
	return m;
}

static void msg_sent(void *req, ucs_status_t status, void *user)
{
	msg_t *m = user;
	m->st->reqs--;
	free(m);
	ucp_request_free(req);
}

/* Send and forget (the message is freed on completion). */
ucs_status_t lc__ucx_msg_send(ucp_ep_h ep, unsigned id, msg_t *m)
{
	ustate_t *st = m->st;
	ucp_request_param_t p = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
				UCP_OP_ATTR_FIELD_FLAGS,
		.cb.send = msg_sent,
		.user_data = m,
		.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER,
	};
	ucs_status_ptr_t r = ucp_am_send_nbx(ep, id, NULL, 0, m->data, m->len, &p);
	if (r == NULL) {
		free(m);
		return UCS_OK;
	}
	if (UCS_PTR_IS_ERR(r)) {
		free(m);
		return UCS_PTR_STATUS(r);
	}
	st->reqs++;
	return UCS_OK;
}

/* Send and forget, logging a failure (for replies, which P or D retries
 * by other means: timeouts, fences). */
void lc__ucx_msg_post(ucp_ep_h ep, unsigned id, msg_t *m)
{
	if (!m)
		return;
	ucs_status_t s = lc__ucx_msg_send(ep, id, m);
	if (s != UCS_OK)
		LC__DEBUG("ucx: sending message %u: %s", id, ucs_status_string(s));
}

static void close_done(void *req, ucs_status_t status, void *user)
{
	ustate_t *st = user;
	st->reqs--;
	ucp_request_free(req);
}

void lc__ucx_ep_close_force(ustate_t *st, ucp_ep_h ep)
{
	ucp_request_param_t p = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
				UCP_OP_ATTR_FIELD_FLAGS,
		.cb.send = close_done,
		.user_data = st,
		.flags = UCP_EP_CLOSE_FLAG_FORCE,
	};
	ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
	if (r && !UCS_PTR_IS_ERR(r))
		st->reqs++;
}

void lc__ucx_wake(ustate_t *st)
{
	lc__io_kick(&st->task);
}

void lc__ucx_cmd_push(ustate_t *st, cmd_t *c)
{
	c->next = NULL;
	if (st->cmd_tail)
		st->cmd_tail->next = c;
	else
		st->cmd_head = c;
	st->cmd_tail = c;
}

bool lc__ucx_run_cmds(ustate_t *st)
{
	pthread_mutex_lock(&st->lock);
	cmd_t *c = st->cmd_head;
	st->cmd_head = st->cmd_tail = NULL;
	pthread_mutex_unlock(&st->lock);
	bool any = c != NULL;
	while (c) {
		cmd_t *next = c->next;
		c->fn(st, c->arg);
		free(c);
		c = next;
	}
	return any;
}

typedef struct sync_arg {
	void (*fn)(ustate_t *, void *);
	void *arg;
} sync_arg_t;

/* On the loop thread: the queued commands first, so that a command never
 * overtakes one queued before it (a connection's close its connect). */
static void run_sync_cb(lc__io_task_t *t, void *arg)
{
	sync_arg_t *a = arg;
	ustate_t *st = lc__ucx_task_state(t);
	lc__ucx_run_cmds(st);
	a->fn(st, a->arg);
	lc__io_kick(t); /* service what the command changed */
}

void lc__ucx_run_sync(ustate_t *st, void (*fn)(ustate_t *, void *), void *arg)
{
	sync_arg_t a = {.fn = fn, .arg = arg};
	lc__io_call(&st->task, run_sync_cb, &a);
}

bool lc__ucx_moves_kind(uint64_t memory_types, int kind)
{
	return kind == LC_MEM_KIND_CUDA && (memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA));
}

ucs_memory_type_t lc__ucx_mem_type(int kind)
{
	return kind == LC_MEM_KIND_CUDA ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
}

void lc__ucx_mem_types_str(uint64_t memory_types, char *buf, size_t cap)
{
	static const struct {
		ucs_memory_type_t t;
		const char *name;
	} names[] = {
		{UCS_MEMORY_TYPE_HOST, "host"},
		{UCS_MEMORY_TYPE_CUDA, "cuda"},
		{UCS_MEMORY_TYPE_CUDA_MANAGED, "cuda-managed"},
		{UCS_MEMORY_TYPE_ROCM, "rocm"},
		{UCS_MEMORY_TYPE_ROCM_MANAGED, "rocm-managed"},
	};
	size_t n = 0;
	if (cap)
		buf[0] = '\0';
	for (size_t i = 0; i < sizeof names / sizeof names[0] && n < cap; i++)
		if (memory_types & UCS_BIT(names[i].t))
			n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? "," : "",
					      names[i].name);
	if (!n && cap)
		snprintf(buf, cap, "none");
}
