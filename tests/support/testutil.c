#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static uint64_t next_word(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	uint64_t z = *s;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void tu_fill(void *buf, size_t n, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t s = seed;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w = next_word(&s);
		memcpy(p + i, &w, 8);
	}
	if (i < n) {
		uint64_t w = next_word(&s);
		memcpy(p + i, &w, n - i);
	}
}

long tu_verify(const void *buf, size_t n, uint64_t seed)
{
	const uint8_t *p = buf;
	uint64_t s = seed;
	for (size_t i = 0; i < n; i += 8) {
		uint64_t w = next_word(&s);
		size_t k = n - i < 8 ? n - i : 8;
		if (memcmp(p + i, &w, k)) {
			for (size_t j = 0; j < k; j++)
				if (p[i + j] != ((uint8_t *)&w)[j])
					return (long)(i + j);
		}
	}
	return -1;
}

uint64_t tu_checksum(const void *buf, size_t n)
{
	const uint8_t *p = buf;
	uint64_t h = 14695981039346656037ull;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h;
}

lc_completion_t tu_wait_one(lc_cq_t *cq, int timeout_ms)
{
	lc_completion_t c;
	int n = lc_cq_wait(cq, &c, 1, timeout_ms);
	TU_CHECK(n == 1, "no completion within %d ms (rc %d)", timeout_ms, n);
	return c;
}

void tu_watchdog(unsigned seconds)
{
	signal(SIGALRM, SIG_DFL);
	alarm(seconds);
}

void tu_say(int fd, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line - 1, fmt, ap);
	va_end(ap);
	if (n < 0 || n >= (int)sizeof line - 1)
		n = (int)sizeof line - 2;
	line[n++] = '\n';
	if (fd >= 0 && write(fd, line, (size_t)n) < 0)
		_exit(3);
}

void tu_knobs(lc_ctx_t *ctx, const char *spec)
{
	char buf[512];
	if (!spec)
		return;
	snprintf(buf, sizeof buf, "%s", spec);
	for (char *save, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(kv, '=');
		TU_CHECK(eq, "knob without a value: %s", kv);
		*eq = '\0';
		TU_OK(lc_ctx_config_set(ctx, kv, eq + 1));
	}
}

void tu_pool_init(tu_pool_t *p, const char *name, const char *knobs, int layers, uint64_t pages,
		  uint64_t item)
{
	int nbuf = 2 * layers;
	TU_CHECK(nbuf <= TU_POOL_MAX_BUFS, "%d buffers", nbuf);
	memset(p, 0, sizeof *p);
	TU_OK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = name},
			    &p->ctx));
	tu_knobs(p->ctx, knobs);
	p->pages = pages;
	p->item = item;
	p->len = (size_t)nbuf * pages * item;
	TU_OK(lc_mem_alloc(p->len, LC_MEM_SHAREABLE, (void **)&p->mem));
	for (int b = 0; b < nbuf; b++)
		p->bases[b] = p->mem + (size_t)b * pages * item;
	lc_layout_params_t lp = {.size = sizeof lp,
				 .model = LC_LAYOUT_MHA,
				 .layers = (uint32_t)layers,
				 .pages = pages,
				 .item_len = {item, item},
				 .bases = p->bases};
	TU_OK(lc_layout_build(&lp, &p->layout));
	TU_OK(lc_region_register(p->ctx, p->mem, p->len, &p->region));
}

void tu_pool_fini(tu_pool_t *p)
{
	lc_region_deregister(p->region);
	lc_layout_destroy(p->layout);
	lc_ctx_destroy(p->ctx);
	lc_mem_free(p->mem);
}

bool tu_transport_built(const char *tp)
{
	const char *list = lc_transports();
	size_t n = strlen(tp);
	for (const char *p = list; (p = strstr(p, tp)); p += n)
		if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

uint64_t tu_now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

void tu_send_all(int fd, const void *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		p = (const uint8_t *)p + w;
		n -= (size_t)w;
	}
}

int tu_recv_exact(int fd, void *buf, size_t n, int timeout_ms)
{
	size_t got = 0;
	uint64_t dl = tu_now_ms() + (uint64_t)timeout_ms;
	while (got < n) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int left = (int)(dl > tu_now_ms() ? dl - tu_now_ms() : 0);
		if (poll(&p, 1, left) <= 0)
			return -1;
		ssize_t k = recv(fd, (uint8_t *)buf + got, n - got, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return 0;
		got += (size_t)k;
	}
	return 1;
}

/* The transport's capabilities are the library's internals: only a test
 * built with src/ on its include path (linked against layercake_static or
 * lc_objects) asks them; the rest of testutil.c uses the public API. */
#if __has_include("transport/transport.h")
#include "transport/transport.h"

uint32_t tu_transport_caps(const char *tp)
{
	char url[64];
	snprintf(url, sizeof url, "%s://", tp);
	const lc__transport_ops_t *ops = lc__transport_find(url);
	return ops ? ops->caps : 0;
}

const char *tu_listen_url(const char *tp)
{
	static _Thread_local char url[64];
	bool host_port = tu_transport_caps(tp) & LC__TP_HOST_PORT;
	snprintf(url, sizeof url, host_port ? "%s://127.0.0.1:0" : "%s://auto", tp);
	return url;
}
#endif
