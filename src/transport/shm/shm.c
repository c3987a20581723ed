/*
 * shm://NAME: the same-host transport. See docs/transport-shm.md.
 *
 * The receiver (D) copies: it maps the sender's memfd-backed source regions
 * read-only (the fds arrive over a unix socket with SCM_RIGHTS) and, for each
 * small write request, checks region, range and grant and copies with one
 * memcpy into its registered memory, in bounded slices inside
 * lc__grant_enter/exit. No payload byte crosses the socket. Sources that are
 * not memfd-backed are read with process_vm_readv (CMA) where the kernel
 * permits it, else their writes fail with -ENOTSUP and a reason.
 *
 * Wire: a SOCK_SEQPACKET unix socket in the abstract namespace
 * ("@layercake-shm-NAME"), one message per record group, little-endian:
 *   header  u32 type, u32 count
 *   HELLO   P->D  u32 magic, u32 version, u32 flags (1: token), u32 0, token[16]
 *   WELCOME D->P  u32 magic, u32 version, i32 status, u32 0
 *   REGION  P->D  u32 src id, u32 flags (1: fd attached), u64 P address,
 *                 u64 length, u64 offset in the memfd (+ SCM_RIGHTS fd)
 *   DROP    P->D  u32 src id, u32 0
 *   WRITES  P->D  count x {u64 batch, u64 room, u32 src id, u32 dst region,
 *                 u64 src offset, u64 dst offset, u64 length}
 *   ACKS    D->P  count x {u64 batch, u32 writes, i32 status}
 * D handles one connection's messages in order and acknowledges writes in
 * the order they came, so P matches acks against a FIFO of sent batches.
 *
 * Threads: one I/O thread per connection on P (connect, handshake, sends,
 * acks, timeouts) and one per listener on D (accept, copies, acks). On P,
 * sc->lock protects the batch list (post() appends, the I/O thread does the
 * rest); everything else of shm_conn_t belongs to the I/O thread. Lock order:
 * sc->lock -> ctx->regions.lock, and sc->lock -> conn->lock (through
 * lc__batch_* completions). D's state belongs to its thread alone.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "transport/transport.h"

#define SHM_MAGIC 0x4d48534cu /* "LSHM" */
#define SHM_VERSION 1u
#define NAME_MAX_LEN 64
#define ABSTRACT_PREFIX "layercake-shm-"

enum msg_type {
	MSG_HELLO = 1,
	MSG_WELCOME = 2,
	MSG_REGION = 3,
	MSG_DROP = 4,
	MSG_WRITES = 5,
	MSG_ACKS = 6,
};

#define HDR 8
#define HELLO_LEN (HDR + 32)
#define WELCOME_LEN (HDR + 16)
#define REGION_LEN (HDR + 32)
#define DROP_LEN (HDR + 8)
#define WRITE_REC 48
#define ACK_REC 16
#define MAX_WRITES_PER_MSG 1024
#define MSG_MAX (HDR + MAX_WRITES_PER_MSG * WRITE_REC)
#define ACKS_MAX (HDR + MAX_WRITES_PER_MSG * ACK_REC)
#define REGION_FLAG_FD 1u
#define HELLO_FLAG_TOKEN 1u

/* Source regions one connection may have mapped at D at a time. P evicts
 * (DROP) the oldest beyond this; D treats more as malformed. */
#define MAX_SRC_REGIONS 256
/* Connections one listener serves at a time. */
#define MAX_CONNS 1024
/* Source regions up to this size get their mapping pre-faulted. */
#define POPULATE_MAX (4ull << 30)
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
/* Bytes copied per grant bracket: a revoke waits at most this long. */
#define COPY_SLICE (4u << 20)

static void put_hdr(uint8_t *p, uint32_t type, uint32_t count)
{
	lc__put_u32(p, type);
	lc__put_u32(p + 4, count);
}

static int name_from_url(const char *url, char *name, size_t cap, bool listening)
{
	static const char scheme[] = "shm://";
	if (strncmp(url, scheme, sizeof scheme - 1))
		return -EINVAL;
	const char *n = url + sizeof scheme - 1;
	size_t len = strcspn(n, "?");
	if (len == 0 || (len == 4 && !strncmp(n, "auto", 4))) {
		if (!listening)
			return -EINVAL;
		snprintf(name, cap, "lc-%ld-%016llx", (long)getpid(),
			 (unsigned long long)lc__random_u64());
		return 0;
	}
	if (len > NAME_MAX_LEN || len + 1 > cap)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		char ch = n[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.'))
			return -EINVAL;
	}
	memcpy(name, n, len);
	name[len] = '\0';
	return 0;
}

static socklen_t abstract_addr(const char *name, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof *sa);
	sa->sun_family = AF_UNIX;
	/* sun_path[0] = '\0': the abstract namespace, no file to clean up. */
	int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, ABSTRACT_PREFIX "%s", name);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void wake(int evfd)
{
	uint64_t one = 1;
	ssize_t rc = write(evfd, &one, sizeof one);
	(void)rc;
}

static void drain(int evfd)
{
	uint64_t v;
	ssize_t rc = read(evfd, &v, sizeof v);
	(void)rc;
}

/* ====================================================================
 * Receiver (D)
 * ================================================================== */

enum src_mode { SRC_MAP, SRC_CMA };

typedef struct src_region {
	uint32_t id;
	enum src_mode mode;
	int err;             /* nonzero: writes naming it fail with this code */
	const uint8_t *base; /* SRC_MAP: start of the region in our mapping */
	void *map;
	size_t map_len;
	uint64_t p_addr; /* SRC_CMA: the region's address in P */
	uint64_t len;
} src_region_t;

typedef struct dconn {
	int fd;
	pid_t pid;
	uid_t uid;
	bool ready; /* handshake done */
	uint64_t accepted_ns;
	src_region_t *srcs;
	size_t nsrcs;
	uint8_t *in;   /* one received message */
	uint8_t *acks; /* pending acknowledgements */
	size_t nacks;
	bool want_out;
	struct dconn *next, *prev;
} dconn_t;

typedef struct shm_listener {
	lc_listener_t *l;
	lc_ctx_t *ctx;
	char name[NAME_MAX_LEN + 1];
	int lfd, epfd, evfd;
	pthread_t thread;
	_Atomic int stop;
	dconn_t conns; /* sentinel */
	size_t nconns;
	struct copy_helper *helper; /* second copy thread, NULL: copy alone */
} shm_listener_t;

static void src_release(src_region_t *s)
{
	if (s->map)
		munmap(s->map, s->map_len);
	s->map = NULL;
}

static void dconn_close(shm_listener_t *sl, dconn_t *dc, const char *why)
{
	if (why)
		LC_DEBUG("shm://%s: closing connection from pid %ld: %s", sl->name, (long)dc->pid,
			 why);
	epoll_ctl(sl->epfd, EPOLL_CTL_DEL, dc->fd, NULL);
	close(dc->fd);
	for (size_t i = 0; i < dc->nsrcs; i++)
		src_release(&dc->srcs[i]);
	free(dc->srcs);
	free(dc->in);
	free(dc->acks);
	dc->prev->next = dc->next;
	dc->next->prev = dc->prev;
	sl->nconns--;
	free(dc);
}

static void malformed(shm_listener_t *sl, dconn_t *dc, const char *what)
{
	LC__COUNT(sl->ctx, frames_malformed);
	LC_WARN("shm://%s: malformed message from pid %ld (%s); closing the connection",
		sl->name, (long)dc->pid, what);
}

/* The one fd of a REGION message, or -1; any other fd is closed. */
static int take_fd(struct msghdr *mh)
{
	int got = -1;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
			if (got < 0)
				got = fd;
			else
				close(fd);
		}
	}
	return got;
}

/* Receive one message without blocking. *fd gets the first fd passed with
 * it (any further fd is closed), or -1; a message or control data that did
 * not fit sets *truncated and passes no fd. Returns recvmsg's result. */
static ssize_t recv_msg(int sock, void *buf, size_t cap, int *fd, bool *truncated)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {buf, cap};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = ctl.buf,
			    .msg_controllen = sizeof ctl.buf};
	ssize_t n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	*fd = -1;
	*truncated = false;
	if (n <= 0)
		return n;
	*fd = take_fd(&mh);
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		*truncated = true;
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
	}
	return n;
}

static int send_msg(int fd, const void *buf, size_t len, int pass_fd)
{
	struct iovec iov = {(void *)buf, len};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	if (pass_fd >= 0) {
		memset(&ctl, 0, sizeof ctl);
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof ctl.buf;
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &pass_fd, sizeof pass_fd);
	}
	ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n < 0)
		return -errno;
	return n == (ssize_t)len ? 0 : -EIO; /* seqpacket: all or nothing */
}

static src_region_t *src_find(dconn_t *dc, uint32_t id)
{
	for (size_t i = 0; i < dc->nsrcs; i++)
		if (dc->srcs[i].id == id)
			return &dc->srcs[i];
	return NULL;
}

/* Map a received memfd read-only. Returns 0, or -1 when the fd is not fit
 * for mapping (the caller then tries CMA). */
static int src_map(shm_listener_t *sl, src_region_t *s, int fd, uint64_t off)
{
	struct stat st;
	/* Only shmem (memfd) answers F_GET_SEALS: refuse other files, which
	 * could block (FUSE) or shrink under us. */
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		LC_WARN("shm://%s: source region %u: the passed fd is not a memfd", sl->name,
			s->id);
		return -1;
	}
	if (!(seals & F_SEAL_SHRINK) && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK)) {
		/* A peer that shrank an unsealed memfd would make our reads
		 * fault (SIGBUS): use CMA, which fails with EFAULT instead. */
		LC_INFO("shm://%s: source region %u: memfd cannot be sealed against "
			"shrinking (%s); reading it with process_vm_readv",
			sl->name, s->id, strerror(errno));
		return -1;
	}
	if (off > (uint64_t)st.st_size || s->len > (uint64_t)st.st_size - off) {
		LC_WARN("shm://%s: source region %u: [%llu, +%llu) beyond the memfd (%lld bytes)",
			sl->name, s->id, (unsigned long long)off, (unsigned long long)s->len,
			(long long)st.st_size);
		return -1;
	}
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t aligned = off & ~(page - 1);
	size_t map_len = (size_t)(s->len + (off - aligned));
	void *m = mmap(NULL, map_len, PROT_READ, MAP_SHARED, fd, (off_t)aligned);
	if (m == MAP_FAILED) {
		LC_WARN("shm://%s: source region %u: mmap: %s", sl->name, s->id, strerror(errno));
		return -1;
	}
	/* Huge pages where shmem THP is enabled ("advise"); harmless where not.
	 * Page tables filled now, not by faults inside the first copies; beyond
	 * POPULATE_MAX the setup would stall this thread too long, so large
	 * pools fault in lazily. */
	madvise(m, map_len, MADV_HUGEPAGE);
	if (map_len <= POPULATE_MAX)
		madvise(m, map_len, MADV_POPULATE_READ);
	s->mode = SRC_MAP;
	s->map = m;
	s->map_len = map_len;
	s->base = (const uint8_t *)m + (off - aligned);
	return 0;
}

/* Can we read P's memory with process_vm_readv? Probe one byte. */
static int src_cma(shm_listener_t *sl, dconn_t *dc, src_region_t *s)
{
	uint8_t probe;
	struct iovec lv = {&probe, 1}, rv = {(void *)(uintptr_t)s->p_addr, 1};
	s->mode = SRC_CMA;
	if (process_vm_readv(dc->pid, &lv, 1, &rv, 1, 0) == 1)
		return 0;
	s->err = -ENOTSUP;
	LC_WARN("shm://%s: source region %u of pid %ld is not memfd-backed and cross-memory "
		"attach is refused (%s); its writes fail: allocate sender memory with "
		"lc_mem_alloc(LC_MEM_SHAREABLE)",
		sl->name, s->id, (long)dc->pid, strerror(errno));
	return 0;
}

static int on_region(shm_listener_t *sl, dconn_t *dc, const uint8_t *m, size_t len, int fd)
{
	if (len != REGION_LEN)
		return -1;
	uint32_t id = lc__get_u32(m + HDR), flags = lc__get_u32(m + HDR + 4);
	uint64_t addr = lc__get_u64(m + HDR + 8), rlen = lc__get_u64(m + HDR + 16);
	uint64_t off = lc__get_u64(m + HDR + 24);
	if (rlen == 0 || addr + rlen < addr || ((flags & REGION_FLAG_FD) != 0) != (fd >= 0))
		return -1;
	src_region_t *s = src_find(dc, id);
	if (s) {
		src_release(s);
	} else {
		if (dc->nsrcs == MAX_SRC_REGIONS)
			return -1;
		if (!dc->srcs) {
			dc->srcs = calloc(MAX_SRC_REGIONS, sizeof *dc->srcs);
			if (!dc->srcs)
				return -1;
		}
		s = &dc->srcs[dc->nsrcs++];
	}
	*s = (src_region_t){.id = id, .p_addr = addr, .len = rlen};
	if (fd < 0 || src_map(sl, s, fd, off))
		src_cma(sl, dc, s);
	LC_DEBUG("shm://%s: source region %u of pid %ld (%llu bytes): %s", sl->name, id,
		 (long)dc->pid, (unsigned long long)rlen,
		 s->err ? "unusable" : s->mode == SRC_MAP ? "mapped memfd" : "process_vm_readv");
	return 0;
}

static int on_drop(dconn_t *dc, const uint8_t *m, size_t len)
{
	if (len != DROP_LEN)
		return -1;
	src_region_t *s = src_find(dc, lc__get_u32(m + HDR));
	if (s) {
		src_release(s);
		*s = dc->srcs[--dc->nsrcs];
	}
	return 0;
}

/* A second copy thread for large mapped writes: the listener thread copies
 * the first half, the helper the second, both in COPY_SLICE slices inside
 * the grant bracket. One memcpy stream does not saturate memory bandwidth,
 * two come close (docs/transport-shm.md has the figures). */
#define SPLIT_MIN (1u << 20)

typedef struct copy_helper {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop, busy; /* busy: a job is posted and not finished */
	const lc__land_t *land; /* the job: land len bytes of src at byte at */
	const uint8_t *src;
	uint64_t at, len;
	bool revoked; /* the helper saw the revoke */
} copy_helper_t;

static void *helper_main(void *arg)
{
	pthread_setname_np(pthread_self(), "lc-shm-helper");
	copy_helper_t *h = arg;
	pthread_mutex_lock(&h->lock);
	for (;;) {
		while (!h->stop && (!h->busy || !h->land))
			pthread_cond_wait(&h->cond, &h->lock);
		if (h->stop)
			break;
		pthread_mutex_unlock(&h->lock);
		bool ok = lc__land_copy(h->land, h->at, h->src, h->len) == 0;
		pthread_mutex_lock(&h->lock);
		h->revoked = !ok;
		h->land = NULL;
		h->busy = false;
		pthread_cond_broadcast(&h->cond);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

static copy_helper_t *helper_start(void)
{
	copy_helper_t *h = calloc(1, sizeof *h);
	if (!h)
		return NULL;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->cond, NULL);
	if (pthread_create(&h->thread, NULL, helper_main, h)) {
		pthread_cond_destroy(&h->cond);
		pthread_mutex_destroy(&h->lock);
		free(h);
		return NULL;
	}
	return h;
}

static void helper_stop(copy_helper_t *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->lock);
	h->stop = true;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->thread, NULL);
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

/* lc__land_write, with the copy split between this thread and the helper. */
static int copy_split(shm_listener_t *sl, uint64_t room, uint32_t region, uint64_t offset,
		      const uint8_t *src, uint64_t length)
{
	copy_helper_t *h = sl->helper;
	lc__land_t l;
	int rc = lc__land_open(sl->ctx, room, region, offset, length, &l);
	if (rc)
		return rc;
	uint64_t half = (length / 2 + 63) & ~(uint64_t)63; /* cache-line split */
	pthread_mutex_lock(&h->lock);
	h->land = &l;
	h->src = src + half;
	h->at = half;
	h->len = length - half;
	h->busy = true;
	h->revoked = false;
	pthread_cond_signal(&h->cond);
	pthread_mutex_unlock(&h->lock);
	bool ok = lc__land_copy(&l, 0, src, half) == 0;
	pthread_mutex_lock(&h->lock);
	while (h->busy)
		pthread_cond_wait(&h->cond, &h->lock);
	ok = ok && !h->revoked;
	pthread_mutex_unlock(&h->lock);
	if (!ok)
		lc__land_revoked(&l);
	lc__land_done(&l, ok);
	return ok ? 0 : LC_ERR_GRANT;
}

/* CMA: the kernel copies from P's memory straight into place, inside the
 * seam's bracket, slice by slice. */
static int copy_cma(lc_ctx_t *ctx, pid_t pid, uint64_t room, uint32_t region, uint64_t offset,
		    uint64_t p_addr, uint64_t length)
{
	lc__land_t l;
	int rc = lc__land_open(ctx, room, region, offset, length, &l);
	if (rc)
		return rc;
	for (uint64_t done = 0; done < length && !rc;) {
		size_t n = (size_t)LC__MIN(length - done, (uint64_t)COPY_SLICE);
		if (!lc__land_enter(&l)) {
			lc__land_revoked(&l);
			rc = LC_ERR_GRANT;
			break;
		}
		struct iovec lv = {l.dst + done, n}, rv = {(void *)(uintptr_t)(p_addr + done), n};
		ssize_t got = process_vm_readv(pid, &lv, 1, &rv, 1, 0);
		lc__land_exit(&l);
		if (got <= 0) {
			rc = got < 0 && errno == EPERM ? -ENOTSUP : LC_ERR_IO;
			break;
		}
		done += (uint64_t)got;
	}
	lc__land_done(&l, rc == 0);
	return rc;
}

static void ack_add(dconn_t *dc, uint64_t batch, int32_t status)
{
	if (dc->nacks) {
		uint8_t *last = dc->acks + HDR + (dc->nacks - 1) * ACK_REC;
		if (lc__get_u64(last) == batch && (int32_t)lc__get_u32(last + 12) == status) {
			lc__put_u32(last + 8, lc__get_u32(last + 8) + 1);
			return;
		}
	}
	uint8_t *r = dc->acks + HDR + dc->nacks * ACK_REC;
	lc__put_u64(r, batch);
	lc__put_u32(r + 8, 1);
	lc__put_u32(r + 12, (uint32_t)status);
	dc->nacks++;
}

/* Send pending acks. Returns 0 (sent or nothing to send), -EAGAIN, or an
 * error (connection gone). */
static int ack_flush(dconn_t *dc)
{
	if (!dc->nacks)
		return 0;
	put_hdr(dc->acks, MSG_ACKS, (uint32_t)dc->nacks);
	int rc = send_msg(dc->fd, dc->acks, HDR + dc->nacks * ACK_REC, -1);
	if (rc == -EAGAIN || rc == -EWOULDBLOCK)
		return -EAGAIN;
	dc->nacks = 0;
	return rc;
}

static int on_writes(shm_listener_t *sl, dconn_t *dc, const uint8_t *m, size_t len)
{
	uint32_t n = lc__get_u32(m + 4);
	if (n == 0 || n > MAX_WRITES_PER_MSG || len != HDR + (size_t)n * WRITE_REC)
		return -1;
	src_region_t *s = NULL;
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *w = m + HDR + (size_t)i * WRITE_REC;
		uint64_t batch = lc__get_u64(w), room = lc__get_u64(w + 8);
		uint32_t src = lc__get_u32(w + 16), dst = lc__get_u32(w + 20);
		uint64_t soff = lc__get_u64(w + 24), doff = lc__get_u64(w + 32);
		uint64_t length = lc__get_u64(w + 40);
		int rc;
		if (atomic_load_explicit(&sl->stop, memory_order_relaxed))
			return 1; /* closing: P learns from the hangup */
		if (!s || s->id != src)
			s = src_find(dc, src);
		if (!s || length == 0 || soff > s->len || length > s->len - soff)
			return -1;
		if (s->err)
			rc = s->err;
		else if (s->mode == SRC_MAP && sl->helper && length >= SPLIT_MIN)
			rc = copy_split(sl, room, dst, doff, s->base + soff, length);
		else if (s->mode == SRC_MAP)
			rc = lc__land_write(sl->ctx, room, dst, doff, s->base + soff, length);
		else
			rc = copy_cma(sl->ctx, dc->pid, room, dst, doff, s->p_addr + soff, length);
		ack_add(dc, batch, rc);
		/* Acknowledge at each batch boundary, so P completes early. */
		if (i + 1 == n || lc__get_u64(w + WRITE_REC) != batch) {
			rc = ack_flush(dc);
			if (rc && rc != -EAGAIN)
				return 1;
		}
	}
	return 0;
}

static int on_hello(shm_listener_t *sl, dconn_t *dc, const uint8_t *m, size_t len)
{
	uint8_t w[WELCOME_LEN] = {0};
	if (len != HELLO_LEN || lc__get_u32(m + HDR) != SHM_MAGIC)
		return -1;
	uint32_t version = lc__get_u32(m + HDR + 4), flags = lc__get_u32(m + HDR + 8);
	int status = 0;
	if (version != SHM_VERSION) {
		status = LC_ERR_PROTO;
		LC_WARN("shm://%s: pid %ld speaks version %u, we speak %u", sl->name, (long)dc->pid,
			version, SHM_VERSION);
	} else if (!lc__ctx_token_accepted(sl->ctx, m + HDR + 16, flags & HELLO_FLAG_TOKEN)) {
		status = LC_ERR_AUTH;
		LC__COUNT(sl->ctx, conns_rejected_auth);
		LC_WARN("shm://%s: rejected a connection from pid %ld: %s", sl->name, (long)dc->pid,
			flags & HELLO_FLAG_TOKEN ? "token not accepted" : "no token presented");
	}
	put_hdr(w, MSG_WELCOME, 0);
	lc__put_u32(w + HDR, SHM_MAGIC);
	lc__put_u32(w + HDR + 4, SHM_VERSION);
	lc__put_u32(w + HDR + 8, (uint32_t)status);
	int rc = send_msg(dc->fd, w, sizeof w, -1);
	if (rc || status)
		return 1;
	dc->ready = true;
	return 0;
}

/* Serve one connection: handle up to a few messages; close it on error.
 * Acks of one message fit in dc->acks, so a new message is read only once
 * the previous acks are out (backpressure instead of unbounded buffers). */
static void dconn_serve(shm_listener_t *sl, dconn_t *dc)
{
	for (int round = 0; round < 16; round++) {
		int rc = ack_flush(dc);
		if (rc == -EAGAIN) {
			if (!dc->want_out) {
				struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = dc};
				epoll_ctl(sl->epfd, EPOLL_CTL_MOD, dc->fd, &ev);
				dc->want_out = true;
			}
			return;
		}
		if (rc) {
			dconn_close(sl, dc, "send failed");
			return;
		}
		if (dc->want_out) {
			struct epoll_event ev = {.events = EPOLLIN, .data.ptr = dc};
			epoll_ctl(sl->epfd, EPOLL_CTL_MOD, dc->fd, &ev);
			dc->want_out = false;
		}

		int fd;
		bool truncated;
		ssize_t n = recv_msg(dc->fd, dc->in, MSG_MAX, &fd, &truncated);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return;
		if (n <= 0) {
			dconn_close(sl, dc, n ? strerror(errno) : "peer closed");
			return;
		}
		const char *bad = truncated ? "truncated" : NULL;
		uint32_t type = n >= HDR ? lc__get_u32(dc->in) : 0;
		if (fd >= 0 && !(type == MSG_REGION && dc->ready)) {
			close(fd); /* only a REGION message after the handshake passes one */
			fd = -1;
		}
		if (!bad && n < HDR)
			bad = "short";
		if (!bad) {
			if (!dc->ready && type != MSG_HELLO)
				bad = "no handshake";
			else if (type == MSG_HELLO)
				rc = dc->ready ? -1 : on_hello(sl, dc, dc->in, (size_t)n);
			else if (type == MSG_REGION)
				rc = on_region(sl, dc, dc->in, (size_t)n, fd);
			else if (type == MSG_DROP)
				rc = on_drop(dc, dc->in, (size_t)n);
			else if (type == MSG_WRITES)
				rc = on_writes(sl, dc, dc->in, (size_t)n);
			else
				rc = -1;
			if (!bad && rc < 0)
				bad = type == MSG_HELLO	   ? "bad hello"
				      : type == MSG_REGION ? "bad region"
				      : type == MSG_DROP   ? "bad drop"
				      : type == MSG_WRITES ? "bad writes"
							   : "unknown type";
		}
		if (fd >= 0)
			close(fd); /* mapped (or not): the mapping keeps the memory */
		if (bad) {
			malformed(sl, dc, bad);
			dconn_close(sl, dc, NULL);
			return;
		}
		if (rc > 0) {
			dconn_close(sl, dc, "handshake refused or closing");
			return;
		}
	}
}

static void accept_all(shm_listener_t *sl)
{
	for (;;) {
		int fd = accept4(sl->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		struct ucred cred;
		socklen_t cl = sizeof cred;
		dconn_t *dc = NULL;
		if (sl->nconns >= MAX_CONNS || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) ||
		    !(dc = calloc(1, sizeof *dc)) || !(dc->in = malloc(MSG_MAX)) ||
		    !(dc->acks = malloc(ACKS_MAX))) {
			LC_WARN("shm://%s: refusing a connection (%zu open)", sl->name, sl->nconns);
			if (dc) {
				free(dc->in);
				free(dc);
			}
			close(fd);
			continue;
		}
		dc->fd = fd;
		dc->pid = cred.pid;
		dc->uid = cred.uid;
		dc->accepted_ns = lc__now_ns();
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = dc};
		if (epoll_ctl(sl->epfd, EPOLL_CTL_ADD, fd, &ev)) {
			free(dc->acks);
			free(dc->in);
			free(dc);
			close(fd);
			continue;
		}
		dc->next = sl->conns.next;
		dc->prev = &sl->conns;
		sl->conns.next->prev = dc;
		sl->conns.next = dc;
		sl->nconns++;
		LC_DEBUG("shm://%s: connection from pid %ld uid %ld", sl->name, (long)cred.pid,
			 (long)cred.uid);
	}
}

/* Connections that never completed the handshake go after connect_timeout. */
static void sweep_handshakes(shm_listener_t *sl)
{
	uint64_t limit = (uint64_t)lc__ctx_cfg(sl->ctx, LC__CFG_connect_timeout_ms) * 1000000ull;
	uint64_t now = lc__now_ns();
	for (dconn_t *dc = sl->conns.next, *nx; dc != &sl->conns; dc = nx) {
		nx = dc->next;
		if (!dc->ready && now - dc->accepted_ns > limit)
			dconn_close(sl, dc, "no handshake within connect_timeout_ms");
	}
}

static void *listener_main(void *arg)
{
	pthread_setname_np(pthread_self(), "lc-shm-listen");
	shm_listener_t *sl = arg;
	struct epoll_event evs[32];
	while (!atomic_load(&sl->stop)) {
		int n = epoll_wait(sl->epfd, evs, 32, 500);
		for (int i = 0; i < n && !atomic_load(&sl->stop); i++) {
			if (evs[i].data.ptr == &sl->lfd) {
				accept_all(sl);
			} else if (evs[i].data.ptr == &sl->evfd) {
				drain(sl->evfd);
			} else {
				/* Only dconn_serve(dc) closes dc within a round, and
				 * epoll reports each fd once: no stale pointers. */
				dconn_serve(sl, evs[i].data.ptr);
			}
		}
		sweep_handshakes(sl);
	}
	while (sl->conns.next != &sl->conns)
		dconn_close(sl, sl->conns.next, NULL);
	return NULL;
}

static int shm_listen(lc_listener_t *l, const char *url)
{
	struct sockaddr_un sa;
	int rc;
	shm_listener_t *sl = calloc(1, sizeof *sl);
	if (!sl)
		return -ENOMEM;
	sl->l = l;
	sl->ctx = l->ctx;
	sl->lfd = sl->epfd = sl->evfd = -1;
	sl->conns.next = sl->conns.prev = &sl->conns;
	rc = name_from_url(url, sl->name, sizeof sl->name, true);
	if (rc)
		goto fail;
	socklen_t alen = abstract_addr(sl->name, &sa);
	sl->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	sl->epfd = epoll_create1(EPOLL_CLOEXEC);
	sl->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (sl->lfd < 0 || sl->epfd < 0 || sl->evfd < 0) {
		rc = -errno;
		goto fail;
	}
	if (bind(sl->lfd, (struct sockaddr *)&sa, alen) || listen(sl->lfd, 128)) {
		rc = errno == EADDRINUSE ? -EEXIST : -errno;
		goto fail;
	}
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &sl->lfd};
	struct epoll_event ev2 = {.events = EPOLLIN, .data.ptr = &sl->evfd};
	if (epoll_ctl(sl->epfd, EPOLL_CTL_ADD, sl->lfd, &ev) ||
	    epoll_ctl(sl->epfd, EPOLL_CTL_ADD, sl->evfd, &ev2)) {
		rc = -errno;
		goto fail;
	}
	snprintf(l->url, sizeof l->url, "shm://%s", sl->name);
	if (getenv("LC_SHM_COPY_THREADS") && atoi(getenv("LC_SHM_COPY_THREADS")) >= 2 &&
	    sysconf(_SC_NPROCESSORS_ONLN) >= 2)
		sl->helper = helper_start();
	rc = -pthread_create(&sl->thread, NULL, listener_main, sl);
	if (rc) {
		helper_stop(sl->helper);
		goto fail;
	}
	l->tp = sl;
	return 0;
fail:
	if (sl->evfd >= 0)
		close(sl->evfd);
	if (sl->epfd >= 0)
		close(sl->epfd);
	if (sl->lfd >= 0)
		close(sl->lfd);
	free(sl);
	return rc;
}

static void shm_listener_close(lc_listener_t *l)
{
	shm_listener_t *sl = l->tp;
	if (!sl)
		return;
	atomic_store(&sl->stop, 1);
	wake(sl->evfd);
	pthread_join(sl->thread, NULL);
	helper_stop(sl->helper);
	close(sl->lfd);
	close(sl->epfd);
	close(sl->evfd);
	free(sl);
	l->tp = NULL;
}

/* ====================================================================
 * Sender (P)
 * ================================================================== */

typedef struct pbatch {
	lc__batch_t *b; /* referenced */
	size_t sent;    /* writes sent (a prefix of b->writes) */
	size_t acked;   /* writes acknowledged (<= sent) */
	struct pbatch *next;
} pbatch_t;

enum pstate { P_DOWN, P_HELLO, P_READY };

typedef struct shm_conn {
	lc_conn_t *c;
	char name[NAME_MAX_LEN + 1];
	pthread_t thread;
	int evfd;
	_Atomic int stop;

	pthread_mutex_t lock; /* protects the list links and cursor */
	pbatch_t *head, *tail;
	pbatch_t *cursor; /* first batch that may have writes left to send */
	size_t nlist;
	size_t unacked; /* writes sent and not yet acknowledged */

	/* I/O thread only. */
	int fd;
	enum pstate state;
	bool want_connect; /* try (again) when there is work */
	uint64_t deadline_ns; /* handshake deadline in P_HELLO */
	uint64_t progress_ns; /* last ack, or when acks started being awaited */
	uint32_t srcs[MAX_SRC_REGIONS]; /* source regions D holds, oldest first */
	size_t nsrcs;
	uint8_t *out; /* one message waiting to be sent */
	size_t out_len;
	int out_fd;
	uint8_t *in;
} shm_conn_t;

static void pbatch_drop(pbatch_t *pb)
{
	lc__batch_unref(pb->b);
	free(pb);
}

/* Under lock: pop batches at the head that need nothing more. */
static void pop_done(shm_conn_t *sc)
{
	while (sc->head) {
		pbatch_t *pb = sc->head;
		bool sending_done = pb->sent == pb->b->nwrites || lc__batch_is_completed(pb->b);
		if (!sending_done || pb->acked < pb->sent)
			return;
		sc->head = pb->next;
		if (!sc->head)
			sc->tail = NULL;
		if (sc->cursor == pb)
			sc->cursor = pb->next;
		sc->nlist--;
		pbatch_drop(pb);
	}
}

/* Fail every batch we hold and forget them. */
static void fail_all(shm_conn_t *sc, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void fail_all(shm_conn_t *sc, int code, const char *fmt, ...)
{
	char reason[LC_REASON_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(reason, sizeof reason, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&sc->lock);
	pbatch_t *pb = sc->head;
	sc->head = sc->tail = sc->cursor = NULL;
	sc->nlist = 0;
	sc->unacked = 0;
	pthread_mutex_unlock(&sc->lock);
	while (pb) {
		pbatch_t *nx = pb->next;
		lc__batch_fail(pb->b, code, "%s", reason);
		pbatch_drop(pb);
		pb = nx;
	}
}

static bool has_work(shm_conn_t *sc)
{
	pthread_mutex_lock(&sc->lock);
	bool w = sc->head != NULL;
	pthread_mutex_unlock(&sc->lock);
	return w;
}

static void p_disconnect(shm_conn_t *sc)
{
	if (sc->fd >= 0)
		close(sc->fd);
	sc->fd = -1;
	if (sc->out_fd >= 0)
		close(sc->out_fd);
	sc->out_fd = -1;
	sc->out_len = 0;
	sc->nsrcs = 0;
	sc->state = P_DOWN;
}

static void p_fail(shm_conn_t *sc, int code, const char *why)
{
	LC_DEBUG("%s: %s: %s", sc->c->url, lc_err_name(code), why);
	p_disconnect(sc);
	fail_all(sc, code, "%s: %s", sc->c->url, why);
}

static void p_connect(shm_conn_t *sc)
{
	struct sockaddr_un sa;
	char why[160];
	socklen_t alen = abstract_addr(sc->name, &sa);
	sc->want_connect = false;
	sc->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (sc->fd < 0) {
		snprintf(why, sizeof why, "socket: %s", strerror(errno));
		p_fail(sc, LC_ERR_IO, why);
		return;
	}
	/* A unix connect completes at once or fails at once (EAGAIN: the
	 * listener's backlog is full; treated as unreachable). */
	if (connect(sc->fd, (struct sockaddr *)&sa, alen)) {
		snprintf(why, sizeof why, "no shm listener named \"%s\" on this host (%s)",
			 sc->name, strerror(errno));
		LC__COUNT(sc->c->ctx, conns_failed);
		p_fail(sc, LC_ERR_UNREACHABLE, why);
		return;
	}
	uint8_t h[HELLO_LEN] = {0};
	put_hdr(h, MSG_HELLO, 0);
	lc__put_u32(h + HDR, SHM_MAGIC);
	lc__put_u32(h + HDR + 4, SHM_VERSION);
	lc__put_u32(h + HDR + 8, sc->c->has_token ? HELLO_FLAG_TOKEN : 0);
	if (sc->c->has_token)
		memcpy(h + HDR + 16, sc->c->token.bytes, LC_TOKEN_LEN);
	int rc = send_msg(sc->fd, h, sizeof h, -1);
	if (rc) {
		snprintf(why, sizeof why, "sending the handshake: %s", strerror(-rc));
		p_fail(sc, LC_ERR_UNREACHABLE, why);
		return;
	}
	sc->state = P_HELLO;
	sc->deadline_ns = lc__now_ns() +
			  (uint64_t)lc__ctx_cfg(sc->c->ctx, LC__CFG_connect_timeout_ms) * 1000000ull;
}

/* Under lock. Put the next message into sc->out: a REGION or DROP when a
 * write needs one, else up to MAX_WRITES_PER_MSG writes. */
static void build_next(shm_conn_t *sc)
{
	lc_ctx_t *ctx = sc->c->ctx;
	uint8_t *m = sc->out;
	uint32_t n = 0;
	lc__region_info_t ri = {0};
	bool have_ri = false;
	pbatch_t *pb = sc->cursor;
	while (pb && n < MAX_WRITES_PER_MSG) {
		lc__batch_t *b = pb->b;
		if (lc__batch_is_completed(b) || pb->sent == b->nwrites) {
			pb = pb->next;
			if (!n)
				sc->cursor = pb;
			continue;
		}
		const lc_write_t *w = &b->writes[pb->sent];
		const uint8_t *local = w->local;
		if (!have_ri || local < ri.addr || w->length > ri.len ||
		    (size_t)(local - ri.addr) > ri.len - w->length) {
			if (lc__source_find(ctx, local, w->length, &ri)) {
				lc__batch_fail(b, LC_ERR_REGION,
					       "%s: write %zu: source %p+%llu is no longer registered",
					       sc->c->url, pb->sent, (const void *)local,
					       (unsigned long long)w->length);
				have_ri = false;
				continue; /* completed now: skipped above */
			}
			have_ri = true;
		}
		bool known = false;
		for (size_t i = 0; i < sc->nsrcs && !known; i++)
			known = sc->srcs[i] == ri.id;
		if (!known) {
			if (n)
				break; /* send the writes first */
			if (sc->nsrcs == MAX_SRC_REGIONS) {
				/* D processes in order: writes already sent that
				 * name the oldest are copied before this DROP. */
				put_hdr(m, MSG_DROP, 0);
				lc__put_u32(m + HDR, sc->srcs[0]);
				lc__put_u32(m + HDR + 4, 0);
				memmove(sc->srcs, sc->srcs + 1, --sc->nsrcs * sizeof *sc->srcs);
				sc->out_len = DROP_LEN;
				return;
			}
			int fd = ri.memfd >= 0 ? fcntl(ri.memfd, F_DUPFD_CLOEXEC, 0) : -1;
			put_hdr(m, MSG_REGION, 0);
			lc__put_u32(m + HDR, ri.id);
			lc__put_u32(m + HDR + 4, fd >= 0 ? REGION_FLAG_FD : 0);
			lc__put_u64(m + HDR + 8, (uint64_t)(uintptr_t)ri.addr);
			lc__put_u64(m + HDR + 16, ri.len);
			lc__put_u64(m + HDR + 24, ri.memfd_offset);
			sc->srcs[sc->nsrcs++] = ri.id;
			sc->out_len = REGION_LEN;
			sc->out_fd = fd;
			return;
		}
		uint8_t *r = m + HDR + (size_t)n * WRITE_REC;
		lc__put_u64(r, b->id);
		lc__put_u64(r + 8, b->room);
		lc__put_u32(r + 16, ri.id);
		lc__put_u32(r + 20, w->remote_region);
		lc__put_u64(r + 24, (uint64_t)(local - ri.addr));
		lc__put_u64(r + 32, w->remote_offset);
		lc__put_u64(r + 40, w->length);
		pb->sent++;
		n++;
	}
	sc->unacked += n;
	if (n) {
		put_hdr(m, MSG_WRITES, n);
		sc->out_len = HDR + (size_t)n * WRITE_REC;
	}
}

/* Send what can be sent without blocking. Returns false if the socket is
 * full (wait for POLLOUT). */
static bool p_send(shm_conn_t *sc)
{
	for (;;) {
		if (!sc->out_len) {
			pthread_mutex_lock(&sc->lock);
			build_next(sc);
			pop_done(sc);
			pthread_mutex_unlock(&sc->lock);
			if (!sc->out_len)
				return true;
		}
		int rc = send_msg(sc->fd, sc->out, sc->out_len, sc->out_fd);
		if (rc == -EAGAIN || rc == -EWOULDBLOCK)
			return false;
		if (sc->out_fd >= 0)
			close(sc->out_fd);
		sc->out_fd = -1;
		sc->out_len = 0;
		if (rc) {
			char why[128];
			snprintf(why, sizeof why, "send: %s", strerror(-rc));
			p_fail(sc, LC_ERR_PEER_CLOSED, why);
			return true;
		}
	}
}

static const char *reject_text(int status)
{
	switch (status) {
	case -ENOTSUP:
		return "source memory is not shareable with the receiver: allocate it with "
		       "lc_mem_alloc(LC_MEM_SHAREABLE)";
	default:
		return lc_strerror(status);
	}
}

/* Returns false when the connection went down. */
static bool p_on_acks(shm_conn_t *sc, const uint8_t *m, size_t len)
{
	uint32_t n = lc__get_u32(m + 4);
	if (n == 0 || n > MAX_WRITES_PER_MSG || len != HDR + (size_t)n * ACK_REC)
		return false;
	pthread_mutex_lock(&sc->lock);
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *a = m + HDR + (size_t)i * ACK_REC;
		uint64_t id = lc__get_u64(a);
		uint32_t count = lc__get_u32(a + 8);
		int32_t status = (int32_t)lc__get_u32(a + 12);
		pbatch_t *pb = sc->head;
		while (pb && pb->acked == pb->sent)
			pb = pb->next;
		if (!pb || pb->b->id != id || count == 0 || count > pb->sent - pb->acked) {
			pthread_mutex_unlock(&sc->lock);
			return false;
		}
		pb->acked += count;
		sc->unacked -= count;
		if (status == 0)
			lc__batch_applied(pb->b, count);
		else
			lc__batch_fail(pb->b, status, "%s: write %zu rejected by the receiver: %s",
				       sc->c->url, pb->acked - count, reject_text(status));
	}
	pop_done(sc);
	pthread_mutex_unlock(&sc->lock);
	sc->progress_ns = lc__now_ns();
	return true;
}

static void p_receive(shm_conn_t *sc)
{
	char why[128];
	while (sc->fd >= 0) {
		int fd;
		bool truncated;
		ssize_t n = recv_msg(sc->fd, sc->in, ACKS_MAX, &fd, &truncated);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return;
		if (n <= 0) {
			snprintf(why, sizeof why, "the receiver closed the connection%s%s",
				 n ? ": " : "", n ? strerror(errno) : "");
			p_fail(sc, sc->state == P_HELLO ? LC_ERR_UNREACHABLE : LC_ERR_PEER_CLOSED,
			       why);
			return;
		}
		if (fd >= 0)
			close(fd); /* the receiver never passes fds */
		uint32_t type = n >= HDR ? lc__get_u32(sc->in) : 0;
		bool ok = !truncated && n >= HDR;
		if (ok && sc->state == P_HELLO) {
			ok = type == MSG_WELCOME && n == WELCOME_LEN &&
			     lc__get_u32(sc->in + HDR) == SHM_MAGIC;
			int status = ok ? (int32_t)lc__get_u32(sc->in + HDR + 8) : 0;
			if (ok && status) {
				LC__COUNT(sc->c->ctx, conns_failed);
				p_fail(sc, status == LC_ERR_AUTH ? LC_ERR_AUTH : status,
				       status == LC_ERR_AUTH
					       ? "the receiver refused our session token"
					       : "the receiver refused the handshake");
				return;
			}
			if (ok) {
				sc->state = P_READY;
				LC_DEBUG("%s: connected", sc->c->url);
			}
		} else if (ok) {
			ok = type == MSG_ACKS && p_on_acks(sc, sc->in, (size_t)n);
		}
		if (!ok) {
			LC__COUNT(sc->c->ctx, frames_malformed);
			LC_WARN("%s: malformed message from the receiver; closing", sc->c->url);
			p_fail(sc, LC_ERR_PROTO, "malformed message from the receiver");
			return;
		}
	}
}

static bool awaiting_acks(shm_conn_t *sc)
{
	pthread_mutex_lock(&sc->lock);
	bool w = sc->unacked != 0;
	pthread_mutex_unlock(&sc->lock);
	return w;
}

static void *conn_main(void *arg)
{
	pthread_setname_np(pthread_self(), "lc-shm-send");
	shm_conn_t *sc = arg;
	bool out_blocked = false;
	while (!atomic_load(&sc->stop)) {
		if (sc->state == P_DOWN && (sc->want_connect || has_work(sc)))
			p_connect(sc);
		if (sc->state == P_READY)
			out_blocked = !p_send(sc);

		struct pollfd pf[2] = {{.fd = sc->evfd, .events = POLLIN},
				       {.fd = sc->fd, .events = POLLIN}};
		if (out_blocked && sc->state == P_READY)
			pf[1].events |= POLLOUT;
		int timeout = -1;
		uint64_t now = lc__now_ns();
		bool waiting = sc->state == P_READY && awaiting_acks(sc);
		uint64_t progress_limit =
			(uint64_t)lc__ctx_cfg(sc->c->ctx, LC__CFG_progress_timeout_ms) * 1000000ull;
		if (sc->state == P_HELLO)
			timeout = sc->deadline_ns > now ? (int)((sc->deadline_ns - now) / 1000000 + 1)
							: 0;
		else if (waiting)
			timeout = 100;
		int rc = poll(pf, sc->fd >= 0 ? 2 : 1, timeout);
		if (rc < 0 && errno != EINTR)
			break;
		if (pf[0].revents & POLLIN)
			drain(sc->evfd);
		if (sc->fd >= 0 && (pf[1].revents & (POLLIN | POLLHUP | POLLERR)))
			p_receive(sc);
		now = lc__now_ns();
		if (sc->state == P_HELLO && now >= sc->deadline_ns) {
			LC__COUNT(sc->c->ctx, conns_failed);
			p_fail(sc, LC_ERR_UNREACHABLE, "no handshake within connect_timeout_ms");
		} else if (sc->state == P_READY && waiting && awaiting_acks(sc) &&
			   now - sc->progress_ns > progress_limit) {
			LC__COUNT(sc->c->ctx, lanes_stalled);
			p_fail(sc, LC_ERR_STALLED, "no acknowledgement within progress_timeout_ms");
		}
		if (sc->state == P_READY && !awaiting_acks(sc))
			sc->progress_ns = now;
	}
	return NULL;
}

static int shm_conn_open(lc_conn_t *c, const char *url, const lc_conn_params_t *p)
{
	int rc;
	shm_conn_t *sc = calloc(1, sizeof *sc);
	if (!sc)
		return -ENOMEM;
	sc->c = c;
	sc->fd = sc->out_fd = sc->evfd = -1;
	sc->want_connect = true; /* handshake early, before the first post */
	rc = name_from_url(url, sc->name, sizeof sc->name, false);
	if (rc)
		goto fail;
	sc->out = malloc(MSG_MAX);
	sc->in = malloc(ACKS_MAX);
	if (!sc->out || !sc->in) {
		rc = -ENOMEM;
		goto fail;
	}
	sc->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (sc->evfd < 0) {
		rc = -errno;
		goto fail;
	}
	pthread_mutex_init(&sc->lock, NULL);
	c->tp = sc;
	rc = -pthread_create(&sc->thread, NULL, conn_main, sc);
	if (rc) {
		c->tp = NULL;
		pthread_mutex_destroy(&sc->lock);
		goto fail;
	}
	return 0;
fail:
	if (sc->evfd >= 0)
		close(sc->evfd);
	free(sc->in);
	free(sc->out);
	free(sc);
	return rc;
}

static void shm_conn_close(lc_conn_t *c)
{
	shm_conn_t *sc = c->tp;
	if (!sc)
		return;
	atomic_store(&sc->stop, 1);
	wake(sc->evfd);
	pthread_join(sc->thread, NULL);
	p_disconnect(sc);
	/* The generic layer completes the batches (cancelled); drop ours. */
	for (pbatch_t *pb = sc->head, *nx; pb; pb = nx) {
		nx = pb->next;
		pbatch_drop(pb);
	}
	close(sc->evfd);
	pthread_mutex_destroy(&sc->lock);
	free(sc->in);
	free(sc->out);
	free(sc);
	c->tp = NULL;
}

static int shm_post(lc_conn_t *c, lc__batch_t *b)
{
	shm_conn_t *sc = c->tp;
	pbatch_t *pb = calloc(1, sizeof *pb);
	if (!pb)
		return -ENOMEM;
	lc__batch_ref(b);
	pb->b = b;
	pthread_mutex_lock(&sc->lock);
	if (sc->tail)
		sc->tail->next = pb;
	else
		sc->head = pb;
	sc->tail = pb;
	if (!sc->cursor)
		sc->cursor = pb;
	sc->nlist++;
	pthread_mutex_unlock(&sc->lock);
	if (!b->defer)
		wake(sc->evfd);
	return 0;
}

static void shm_flush(lc_conn_t *c)
{
	shm_conn_t *sc = c->tp;
	wake(sc->evfd);
}

static void shm_cancel_room(lc_conn_t *c, uint64_t room)
{
	shm_conn_t *sc = c->tp;
	(void)room; /* its batches are completed: the I/O thread skips them */
	wake(sc->evfd);
}

const lc__transport_ops_t lc__shm_ops = {
	.scheme = "shm",
	.listen = shm_listen,
	.listener_close = shm_listener_close,
	.conn_open = shm_conn_open,
	.conn_close = shm_conn_close,
	.post = shm_post,
	.flush = shm_flush,
	.cancel_room = shm_cancel_room,
};
