/*
 * The shm receiver (D): a listener and its accepted connections, one task
 * on the context's I/O core (transport/io/io.h).
 *
 * Each connection passes P's source regions once (REGION, with a memfd),
 * then small write requests (WRITES); D checks each request against the
 * source region, lands it through the memory seam with memcpy from its
 * read-only mapping of the memfd (or process_vm_readv, copy.c) and
 * acknowledges in order, coalesced per batch (ACKS). Sockets are
 * non-blocking and edge-triggered: on_event() only records readiness, and
 * service() does the work, a bounded amount per connection per pass
 * (SERVE_MSGS messages, SERVE_BYTES copied) so that one busy peer does not
 * hold up the other tasks of the loop; a WRITES message cut short by the
 * budget is resumed on the next pass.
 *
 * CUDA IPC (docs/gpu.md): a connection whose HELLO offered it, to a
 * listener that loaded CUDA and was not told ?ipc=0, is accepted in the
 * WELCOME. Its IPC_REGION messages name allocations of P's GPU memory; D
 * imports each once per listener (refcounted across connections and
 * regions of one allocation, at most LC__SHM_MAX_IPC_IMPORTS) and copies
 * each write from it with its own CUDA copy engine (copy.c), inside the
 * grant bracket, acknowledging after the copy completed. An import that
 * fails, or that is smaller than P claims, makes the region's writes fail
 * with a code (ipc_rejected, a log line); a malformed message closes the
 * connection as any other.
 *
 * Threading: the loop thread owns the listener and every dconn; listen()
 * and listener_close() touch them only before the task is attached and
 * after it is detached. `stop` is the one field another thread writes: it
 * cuts a long WRITES message short while listener_close() waits to detach.
 * Shared state is reached only through the context's thread-safe helpers
 * (the memory seam, counters, tokens).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/cuda.h"
#include "transport/shm/recv_int.h"

/* Connections one listener serves at a time. */
#define MAX_CONNS 1024
/* Connections accepted per event on the listening socket (level-triggered:
 * the rest come next round), so that a real peer's HELLO is read before
 * newer connections can make it the oldest pending one. */
#define ACCEPT_BURST 16
/* Source regions up to this size get their mapping pre-faulted. */
#define POPULATE_MAX (4ull << 30)
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
/* What one connection may do in one service pass before the others (and
 * the other tasks of the loop) get a turn. */
#define SERVE_MSGS 16
#define SERVE_BYTES (16u << 20)
/* What an fd of the listener task is. */
#define LISTEN_TAG 0
#define CONN_TAG 1

enum serve { SERVE_IDLE, SERVE_MORE, SERVE_CLOSED };

/* ---- connections ---- */

static void import_put(shm_listener_t *sl, ipc_import_t *imp)
{
	if (--imp->refs)
		return;
	/* No copy from it is in flight: each is waited for on this thread. */
	if (imp->local)
		;
	else if (imp->vmm)
		lc__cuda_vmm_close(imp->device, imp->ptr, imp->size);
	else
		lc__cuda_ipc_close_on(imp->device, imp->ptr);
	for (size_t i = 0; i < sl->nimports; i++)
		if (sl->imports[i] == imp) {
			sl->imports[i] = sl->imports[--sl->nimports];
			break;
		}
	free(imp);
}

static void src_release(shm_listener_t *sl, src_region_t *s)
{
	if (s->map)
		munmap(s->map, s->map_len);
	s->map = NULL;
	if (s->imp)
		import_put(sl, s->imp);
	s->imp = NULL;
}

static void dconn_close(shm_listener_t *sl, dconn_t *dc, const char *why)
{
	if (why)
		LC__DEBUG("shm://%s: closing connection from pid %ld: %s", sl->name, (long)dc->pid,
			  why);
	lc__io_fd_del(&sl->task, &dc->iofd);
	close(dc->fd);
	for (size_t i = 0; i < dc->nsrcs; i++)
		src_release(sl, &dc->srcs[i]);
	free(dc->srcs);
	free(dc->in);
	free(dc->acks);
	lc__shm_lane_unmap(&dc->lane);
	dc->prev->next = dc->next;
	dc->next->prev = dc->prev;
	sl->nconns--;
	free(dc);
}

static void malformed(shm_listener_t *sl, dconn_t *dc, const char *what)
{
	LC__COUNT(sl->ctx, frames_malformed);
	LC__WARN_PEER("shm://%s: malformed message from pid %ld (%s); closing the connection",
		      sl->name, (long)dc->pid, what);
}

static src_region_t *src_find(dconn_t *dc, uint32_t id)
{
	for (size_t i = 0; i < dc->nsrcs; i++)
		if (dc->srcs[i].id == id)
			return &dc->srcs[i];
	return NULL;
}

/* ---- source regions ---- */

/* Map a received memfd read-only. Returns 0, or -1 when the fd is not fit
 * for mapping (the caller then tries CMA). */
static int src_map(shm_listener_t *sl, src_region_t *s, int fd, uint64_t off)
{
	struct stat st;
	/* Only shmem (memfd) answers F_GET_SEALS: refuse other files, which
	 * could block (FUSE) or shrink under us. */
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		LC__WARN_PEER("shm://%s: source region %u: the passed fd is not a memfd", sl->name,
			      s->id);
		return -1;
	}
	if (!(seals & F_SEAL_SHRINK) && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK)) {
		/* A peer that shrank an unsealed memfd would make our reads
		 * fault (SIGBUS): use CMA, which fails with EFAULT instead. */
		LC__INFO("shm://%s: source region %u: memfd cannot be sealed against "
			 "shrinking (%s); reading it with process_vm_readv",
			 sl->name, s->id, strerror(errno));
		return -1;
	}
	if (off > (uint64_t)st.st_size || s->len > (uint64_t)st.st_size - off) {
		LC__WARN_PEER(
			"shm://%s: source region %u: [%llu, +%llu) beyond the memfd (%lld bytes)",
			sl->name, s->id, (unsigned long long)off, (unsigned long long)s->len,
			(long long)st.st_size);
		return -1;
	}
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t aligned = off & ~(page - 1);
	size_t map_len = (size_t)(s->len + (off - aligned));
	void *m = mmap(NULL, map_len, PROT_READ, MAP_SHARED, fd, (off_t)aligned);
	if (m == MAP_FAILED) {
		LC__WARN_PEER("shm://%s: source region %u: mmap: %s", sl->name, s->id,
			      strerror(errno));
		return -1;
	}
	/* Huge pages where shmem THP is enabled ("advise"); harmless where not.
	 * Page tables filled now, not by faults inside the first copies; beyond
	 * POPULATE_MAX the setup would stall the loop too long, so large pools
	 * fault in lazily. */
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
static void src_cma(shm_listener_t *sl, dconn_t *dc, src_region_t *s)
{
	uint8_t probe;
	struct iovec lv = {&probe, 1}, rv = {(void *)(uintptr_t)s->p_addr, 1};
	s->mode = SRC_CMA;
	if (process_vm_readv(dc->pid, &lv, 1, &rv, 1, 0) == 1)
		return;
	s->err = -ENOTSUP;
	LC__WARN_PEER("shm://%s: source region %u of pid %ld is not memfd-backed and cross-memory "
		      "attach is refused (%s); its writes fail: allocate sender memory with "
		      "lc_mem_alloc(LC_MEM_SHAREABLE)",
		      sl->name, s->id, (long)dc->pid, strerror(errno));
}

/* The slot of source region id: its old one (released) or a new one;
 * NULL when the table is full. */
static src_region_t *src_slot(shm_listener_t *sl, dconn_t *dc, uint32_t id)
{
	src_region_t *s = src_find(dc, id);
	if (s) {
		src_release(sl, s);
		return s;
	}
	if (dc->nsrcs == LC__SHM_MAX_SRC_REGIONS)
		return NULL;
	if (!dc->srcs) {
		dc->srcs = calloc(LC__SHM_MAX_SRC_REGIONS, sizeof *dc->srcs);
		if (!dc->srcs)
			return NULL;
	}
	return &dc->srcs[dc->nsrcs++];
}

static int on_region(shm_listener_t *sl, dconn_t *dc, const uint8_t *m, size_t len, int fd)
{
	lc__shm_region_t r;
	if (lc__shm_get_region(m, len, &r) || r.len == 0 || r.addr + r.len < r.addr ||
	    ((r.flags & LC__SHM_REGION_FD) != 0) != (fd >= 0))
		return -1;
	src_region_t *s = src_slot(sl, dc, r.id);
	if (!s)
		return -1;
	*s = (src_region_t){.id = r.id, .p_addr = r.addr, .len = r.len};
	if (fd < 0 || src_map(sl, s, fd, r.offset))
		src_cma(sl, dc, s);
	LC__DEBUG("shm://%s: source region %u of pid %ld (%llu bytes): %s", sl->name, r.id,
		  (long)dc->pid, (unsigned long long)r.len,
		  s->err               ? "unusable"
		  : s->mode == SRC_MAP ? "mapped memfd"
				       : "process_vm_readv");
	return 0;
}

/* ---- CUDA IPC ---- */

/* Our ordinal of the device with this PCI bus id, else device 0 (the
 * import then reaches it as a peer). */
static int ipc_device(const char *pci)
{
	int n = 0;
	char mine[LC__SHM_PCI_LEN];
	if (pci[0] && !lc__cuda_device_count(&n))
		for (int i = 0; i < n; i++)
			if (!lc__cuda_device_describe(i, NULL, 0, mine, sizeof mine, NULL) &&
			    !strcasecmp(mine, pci))
				return i;
	return 0;
}

static int ipc_reject(shm_listener_t *sl, dconn_t *dc, uint32_t id, int code, const char *why)
{
	LC__COUNT(sl->ctx, ipc_rejected);
	LC__WARN_PEER("shm://%s: CUDA IPC region %u of pid %ld: %s; its writes fail (%s)", sl->name,
		      id, (long)dc->pid, why, lc_err_name(code));
	return code;
}

/* Import the allocation of r (fd: a VMM allocation's) or find it imported;
 * the region then reads at +r->offset. 0 or the code its writes fail with. */
static int ipc_import(shm_listener_t *sl, dconn_t *dc, const lc__shm_ipc_region_t *r, int fd,
		      src_region_t *s)
{
	/* A handle cannot be opened in the process that exported it; there
	 * P's address is ours (still checked against the driver below). */
	bool local = dc->pid == getpid();
	bool vmm = fd >= 0 && !local;
	int device = ipc_device(r->pci);
	for (size_t i = 0; i < sl->nimports && !vmm; i++) {
		ipc_import_t *imp = sl->imports[i];
		if (!imp->vmm && imp->local == local && imp->device == device &&
		    (!local || imp->ptr == r->base) &&
		    !memcmp(imp->handle, r->handle, sizeof imp->handle)) {
			if (r->alloc_size > imp->size)
				return ipc_reject(sl, dc, r->id, LC_ERR_OUT_OF_REGION,
						  "larger than the allocation imported");
			imp->refs++;
			s->imp = imp;
			return 0;
		}
	}
	if (sl->nimports == LC__SHM_MAX_IPC_IMPORTS)
		return ipc_reject(sl, dc, r->id, -ENOSPC, "too many imported allocations");
	if (!sl->imports && !(sl->imports = calloc(LC__SHM_MAX_IPC_IMPORTS, sizeof *sl->imports)))
		return -ENOMEM;
	ipc_import_t *imp = calloc(1, sizeof *imp);
	if (!imp)
		return -ENOMEM;
	imp->vmm = vmm;
	imp->local = local;
	imp->device = device;
	memcpy(imp->handle, r->handle, sizeof imp->handle);
	int rc = 0;
	if (local) {
		imp->ptr = r->base;
	} else if (vmm) {
		imp->size = r->alloc_size;
		rc = lc__cuda_vmm_import(device, fd, (size_t)r->alloc_size, &imp->ptr);
	} else {
		CUipcMemHandle h;
		memcpy(h.reserved, r->handle, sizeof h.reserved);
		rc = lc__cuda_ipc_open_on(device, &h, &imp->ptr);
	}
	if (rc) {
		free(imp);
		return ipc_reject(sl, dc, r->id, rc, "the import failed");
	}
	/* What P says the allocation is, against what the driver mapped. */
	CUdeviceptr base = 0;
	size_t size = 0;
	rc = lc__cuda_mem_range(imp->ptr, &base, &size);
	if (!vmm)
		imp->size = size;
	if (local && !rc && base == imp->ptr && size >= r->alloc_size) {
		imp->refs = 1;
		sl->imports[sl->nimports++] = imp;
		s->imp = imp;
		LC__COUNT(sl->ctx, ipc_imports);
		LC__DEBUG(
			"shm://%s: CUDA IPC within this process: allocation at %#llx used as it is",
			sl->name, (unsigned long long)imp->ptr);
		return 0;
	}
	if (rc || base != imp->ptr || size < r->alloc_size) {
		imp->refs = 1;
		sl->imports[sl->nimports++] = imp;
		import_put(sl, imp);
		return ipc_reject(sl, dc, r->id, rc ? rc : LC_ERR_OUT_OF_REGION,
				  "the imported allocation is smaller than the sender says");
	}
	imp->refs = 1;
	sl->imports[sl->nimports++] = imp;
	s->imp = imp;
	LC__COUNT(sl->ctx, ipc_imports);
	LC__DEBUG("shm://%s: imported %s allocation of %llu bytes from pid %ld into device %d",
		  sl->name, vmm ? "a VMM" : "an IPC", (unsigned long long)imp->size, (long)dc->pid,
		  device);
	return 0;
}

static int on_ipc_region(shm_listener_t *sl, dconn_t *dc, const uint8_t *m, size_t len, int fd)
{
	lc__shm_ipc_region_t r;
	if (!dc->ipc || lc__shm_get_ipc_region(m, len, &r) || r.len == 0 ||
	    (r.flags & ~LC__SHM_IPC_VMM) || ((r.flags & LC__SHM_IPC_VMM) != 0) != (fd >= 0) ||
	    r.offset > r.alloc_size || r.len > r.alloc_size - r.offset)
		return -1;
	src_region_t *s = src_slot(sl, dc, r.id);
	if (!s)
		return -1;
	*s = (src_region_t){.id = r.id, .mode = SRC_IPC, .len = r.len, .ipc_off = r.offset};
	s->err = ipc_import(sl, dc, &r, fd, s);
	return 0;
}

static int on_drop(shm_listener_t *sl, dconn_t *dc, const uint8_t *m, size_t len)
{
	uint32_t id;
	if (lc__shm_get_drop(m, len, &id))
		return -1;
	src_region_t *s = src_find(dc, id);
	if (s) {
		src_release(sl, s);
		*s = dc->srcs[--dc->nsrcs];
	}
	return 0;
}

/* ---- writes and acknowledgements ---- */

static void ack_add(dconn_t *dc, uint64_t batch, int32_t status)
{
	if (dc->nacks) {
		lc__shm_ack_t last;
		lc__shm_get_ack(dc->acks, (uint32_t)dc->nacks - 1, &last);
		if (last.batch == batch && last.status == status) {
			last.writes++;
			lc__shm_put_ack(dc->acks, (uint32_t)dc->nacks - 1, &last);
			return;
		}
	}
	lc__shm_ack_t a = {.batch = batch, .writes = 1, .status = status};
	lc__shm_put_ack(dc->acks, (uint32_t)dc->nacks++, &a);
}

/* Send pending acks. Returns 0 (sent or nothing to send), -EAGAIN, or an
 * error (connection gone; -EPROTO: P broke the lane's rules). */
static int ack_flush(dconn_t *dc)
{
	if (!dc->nacks)
		return 0;
	if (dc->in_lane)
		return lc__shm_ack_lane(dc);
	lc__shm_put_hdr(dc->acks, LC__SHM_ACKS, (uint32_t)dc->nacks);
	int rc = lc__shm_send(dc->fd, dc->acks, lc__shm_acks_len((uint32_t)dc->nacks), -1);
	if (rc == -EAGAIN) {
		dc->writable = false;
		return rc;
	}
	dc->nacks = 0;
	return rc;
}

static int write_one(shm_listener_t *sl, dconn_t *dc, const src_region_t *s,
		     const lc__shm_write_t *w)
{
	if (s->err)
		return s->err;
	if (s->mode == SRC_IPC) {
		int rc = lc__shm_copy_ipc(sl->ctx, dc->who, s->imp->device, w->room, w->dst,
					  w->dst_off, s->imp->ptr + s->ipc_off + w->src_off, w);
		if (!rc) {
			LC__COUNT(sl->ctx, ipc_writes);
			LC__COUNT_ADD(sl->ctx, ipc_bytes,
				      (uint64_t)(w->count > 1 ? w->count : 1) * w->length);
		}
		return rc;
	}
	if (w->count > 1 && s->mode == SRC_MAP) /* strided: one span check, block by block */
		return lc__land_strided(sl->ctx, dc->who, w->room, w->dst, w->dst_off,
					s->base + w->src_off, w->length, w->count, w->src_stride,
					w->dst_stride);
	if (w->count > 1) {
		uint64_t span;
		int rc = lc__land_strided_span(sl->ctx, w->room, w->dst_off, w->length, w->count,
					       w->dst_stride, &span);
		for (uint32_t k = 0; k < w->count && !rc; k++)
			rc = lc__shm_copy_cma(sl->ctx, dc->who, dc->pid, w->room, w->dst,
					      w->dst_off + (uint64_t)k * w->dst_stride,
					      s->p_addr + w->src_off + (uint64_t)k * w->src_stride,
					      w->length);
		return rc;
	}
	if (s->mode == SRC_MAP && sl->helper && w->length >= LC__SHM_SPLIT_MIN)
		return lc__shm_copy_split(sl->helper, sl->ctx, dc->who, w->room, w->dst, w->dst_off,
					  s->base + w->src_off, w->length);
	if (s->mode == SRC_MAP)
		return lc__land_write(sl->ctx, dc->who, w->room, w->dst, w->dst_off,
				      s->base + w->src_off, w->length);
	return lc__shm_copy_cma(sl->ctx, dc->who, dc->pid, w->room, w->dst, w->dst_off,
				s->p_addr + w->src_off, w->length);
}

/* Apply the records of the WRITES message in dc->in from dc->in_next on,
 * while *budget lasts. Returns 0 (done, or cut short: dc->in_n stays set),
 * -1 for a malformed record, 1 to close the connection. Acks of one message
 * fit in dc->acks, so they may wait for the socket while records go on. */
static int writes_apply(shm_listener_t *sl, dconn_t *dc, uint64_t *budget)
{
	src_region_t *s = NULL;
	while (dc->in_next < dc->in_n) {
		uint32_t i = dc->in_next;
		lc__shm_write_t w;
		if (*budget == 0)
			return 0;
		if (atomic_load_explicit(&sl->stop, memory_order_relaxed))
			return 1; /* closing: P learns from the hangup */
		lc__shm_get_write(dc->in, i, &w);
		if (!s || s->id != w.src)
			s = src_find(dc, w.src);
		if (!s || w.length == 0 || !lc__shm_src_span_ok(s->len, &w))
			return -1;
		ack_add(dc, w.batch, write_one(sl, dc, s, &w));
		dc->in_next++;
		*budget -= LC__MIN(*budget, w.length * (w.count > 1 ? w.count : 1));
		/* Acknowledge at each batch boundary, so P completes early. */
		if (i + 1 == dc->in_n || lc__shm_write_batch(dc->in, i + 1) != w.batch) {
			int rc = ack_flush(dc);
			if (rc == -EPROTO)
				return -1;
			if (rc && rc != -EAGAIN)
				return 1;
		}
	}
	dc->in_n = dc->in_next = 0;
	return 0;
}

static int on_writes(shm_listener_t *sl, dconn_t *dc, size_t len, uint64_t *budget)
{
	uint32_t n = lc__shm_count(dc->in, len, LC__SHM_WRITE_REC);
	if (!n)
		return -1;
	dc->in_n = n;
	dc->in_next = 0;
	return writes_apply(sl, dc, budget);
}

static int on_hello(shm_listener_t *sl, dconn_t *dc, const uint8_t *m, size_t len)
{
	lc__shm_hello_t h;
	uint8_t buf[LC__SHM_WELCOME_LEN];
	if (dc->ready || lc__shm_get_hello(m, len, &h))
		return -1;
	lc__shm_welcome_t w = {.magic = LC__SHM_MAGIC, .version = LC__SHM_VERSION};
	if (h.version != LC__SHM_VERSION) {
		w.status = LC_ERR_PROTO;
		LC__WARN_PEER("shm://%s: pid %ld speaks version %u, we speak %u", sl->name,
			      (long)dc->pid, h.version, LC__SHM_VERSION);
	} else if (!lc__ctx_token_accepted(sl->ctx, h.token, h.flags & LC__SHM_HELLO_TOKEN,
					   &dc->who)) {
		w.status = LC_ERR_AUTH;
		LC__COUNT(sl->ctx, conns_rejected_auth);
		LC__WARN_PEER("shm://%s: rejected a connection from pid %ld: %s", sl->name,
			      (long)dc->pid,
			      h.flags & LC__SHM_HELLO_TOKEN ? "token not accepted"
							    : "no token presented");
	}
	/* CUDA IPC where P offers it and device memory made us load CUDA. */
	if (!w.status && (h.flags & LC__SHM_HELLO_IPC) && !sl->no_ipc && lc__cuda_loaded())
		w.flags = LC__SHM_WELCOME_IPC;
	int lane_fd = w.status ? -1 : lc__shm_lane_offer(sl, dc, &h);
	if (lane_fd >= 0)
		w.flags |= LC__SHM_WELCOME_LANE;
	int rc = lc__shm_send(dc->fd, buf, lc__shm_put_welcome(buf, &w), lane_fd);
	if (lane_fd >= 0)
		close(lane_fd); /* P maps its copy; ours stays mapped */
	if (rc || w.status)
		return 1;
	dc->ready = true;
	dc->ipc = w.flags & LC__SHM_WELCOME_IPC;
	return 0;
}

/* ---- serving a connection ---- */

/* Handle one message of len bytes in dc->in (fd: passed with it, or -1).
 * Returns 0, -1 (malformed), 1 (close). */
static int on_message(shm_listener_t *sl, dconn_t *dc, size_t len, int fd, uint64_t *budget)
{
	switch (lc__shm_type(dc->in, len)) {
	case LC__SHM_HELLO:
		return on_hello(sl, dc, dc->in, len);
	case LC__SHM_REGION:
		return on_region(sl, dc, dc->in, len, fd);
	case LC__SHM_DROP:
		return on_drop(sl, dc, dc->in, len);
	case LC__SHM_IPC_REGION:
		return on_ipc_region(sl, dc, dc->in, len, fd);
	case LC__SHM_WRITES:
		dc->in_lane = false;
		return on_writes(sl, dc, len, budget);
	case LC__SHM_LANE_RING:
		return dc->lane.base && len == LC__SHM_HDR ? 0 : -1;
	default:
		return -1;
	}
}

/* Read and handle one message. */
static enum serve dconn_read(shm_listener_t *sl, dconn_t *dc, uint64_t *budget)
{
	int fd;
	bool truncated;
	ssize_t n = lc__shm_recv(dc->fd, dc->in, LC__SHM_MSG_MAX, &fd, &truncated);
	int err = errno;
	if (n < 0 && err == EINTR)
		return SERVE_MORE;
	if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK)) {
		dc->readable = false;
		return SERVE_IDLE;
	}
	if (n <= 0) {
		dconn_close(sl, dc, n ? strerror(err) : "peer closed");
		return SERVE_CLOSED;
	}
	uint32_t type = lc__shm_type(dc->in, (size_t)n);
	if (fd >= 0 && !((type == LC__SHM_REGION || type == LC__SHM_IPC_REGION) && dc->ready)) {
		close(fd); /* only a REGION message after the handshake passes one */
		fd = -1;
	}
	const char *bad = NULL;
	if (truncated)
		bad = "truncated";
	else if (n < LC__SHM_HDR)
		bad = "short";
	else if (!dc->ready && type != LC__SHM_HELLO)
		bad = "no handshake";
	int rc = 0;
	if (!bad && (rc = on_message(sl, dc, (size_t)n, fd, budget)) < 0)
		bad = lc__shm_bad_text(type);
	if (fd >= 0)
		close(fd); /* mapped (or not): the mapping keeps the memory */
	if (bad) {
		malformed(sl, dc, bad);
		dconn_close(sl, dc, NULL);
		return SERVE_CLOSED;
	}
	if (rc > 0) {
		dconn_close(sl, dc, "handshake refused or closing");
		return SERVE_CLOSED;
	}
	if (type != LC__SHM_HELLO && type != LC__SHM_LANE_RING)
		dc->sock_msgs++; /* what P's lane records count */
	return SERVE_MORE;
}

/* Serve one connection within the pass's budget. A new message is read
 * only once the acks of the previous one are out (backpressure instead of
 * unbounded buffers). */
static enum serve dconn_serve(shm_listener_t *sl, dconn_t *dc)
{
	uint64_t budget = SERVE_BYTES;
	if (dc->lane_tail_bad) {
		malformed(sl, dc, "lane acks tail");
		dconn_close(sl, dc, NULL);
		return SERVE_CLOSED;
	}
	for (int round = 0; round < SERVE_MSGS; round++) {
		int rc = ack_flush(dc);
		if (rc == -EAGAIN)
			return SERVE_IDLE; /* EPOLLOUT brings us back */
		if (rc) {
			if (rc == -EPROTO)
				malformed(sl, dc, "lane acks overrun");
			dconn_close(sl, dc, rc == -EPROTO ? NULL : "send failed");
			return SERVE_CLOSED;
		}
		if (dc->in_n) {
			rc = writes_apply(sl, dc, &budget);
			if (rc) {
				if (rc < 0)
					malformed(sl, dc, "bad writes");
				dconn_close(sl, dc, rc < 0 ? NULL : "closing");
				return SERVE_CLOSED;
			}
			if (dc->in_n)
				return SERVE_MORE; /* out of budget */
			continue;
		}
		if (budget == 0)
			return SERVE_MORE;
		/* The lane before the socket: while it holds records P sends
		 * nothing on the socket but a ring (docs/transport-shm.md). */
		if (lc__shm_lane_ready(dc)) {
			if (lc__shm_lane_take(sl, dc) < 0) {
				malformed(sl, dc, "lane head");
				dconn_close(sl, dc, NULL);
				return SERVE_CLOSED;
			}
			if (dc->in_n)
				continue;
		}
		if (!dc->readable)
			return SERVE_IDLE;
		enum serve s = dconn_read(sl, dc, &budget);
		if (s != SERVE_MORE)
			return s;
	}
	return SERVE_MORE;
}

/* Room for one more connection before its handshake: past shm_pending_max
 * (or with the listener full) the oldest connection still without a HELLO
 * is closed, so that idle connections cannot keep a real peer out.
 * Connections that completed the handshake are never closed here. */
static void make_room(shm_listener_t *sl)
{
	size_t pending = 0;
	dconn_t *oldest = NULL;
	for (dconn_t *dc = sl->conns.next; dc != &sl->conns; dc = dc->next)
		if (!dc->ready) {
			pending++;
			oldest = dc;
		}
	if (!oldest || (pending < sl->pending_max && sl->nconns < MAX_CONNS))
		return;
	LC__COUNT(sl->ctx, conns_evicted_pending);
	sl->evicted++;
	LC__WARN_PEER("shm://%s: closing the oldest connection without a handshake to take a "
		      "new one (%llu closed so far)",
		      sl->name, (unsigned long long)sl->evicted);
	dconn_close(sl, oldest, "too many connections without a handshake");
}

static void dconn_add(shm_listener_t *sl, int fd)
{
	struct ucred cred;
	socklen_t cl = sizeof cred;
	dconn_t *dc = NULL;
	make_room(sl);
	if (sl->nconns >= MAX_CONNS || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) ||
	    !(dc = calloc(1, sizeof *dc)) || !(dc->in = malloc(LC__SHM_MSG_MAX)) ||
	    !(dc->acks = malloc(LC__SHM_ACKS_MAX)))
		goto refuse;
	dc->fd = fd;
	dc->pid = cred.pid;
	dc->uid = cred.uid;
	dc->accepted_ns = lc__now_ns();
	dc->readable = dc->writable = true;
	if (lc__io_fd_add(&sl->task, &dc->iofd, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
			  CONN_TAG))
		goto refuse;
	dc->next = sl->conns.next;
	dc->prev = &sl->conns;
	sl->conns.next->prev = dc;
	sl->conns.next = dc;
	sl->nconns++;
	LC__DEBUG("shm://%s: connection from pid %ld uid %ld", sl->name, (long)cred.pid,
		  (long)cred.uid);
	return;
refuse:
	LC__WARN_PEER("shm://%s: refusing a connection (%zu open)", sl->name, sl->nconns);
	if (dc) {
		free(dc->acks);
		free(dc->in);
		free(dc);
	}
	close(fd);
}

static void accept_burst(shm_listener_t *sl)
{
	for (int k = 0; k < ACCEPT_BURST; k++) {
		int fd = accept4(sl->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				LC__WARN_PEER("shm://%s: accept: %s", sl->name, strerror(errno));
			if (errno != EINTR && errno != ECONNABORTED)
				return;
			continue;
		}
		dconn_add(sl, fd);
	}
}

/* ---- the listener as a task of the I/O core ---- */

/* Serve ready connections and expire handshakes. Returns the next
 * deadline: now when a connection ran out of budget, 0 for none. */
static uint64_t listener_service(lc__io_task_t *t, uint64_t now)
{
	shm_listener_t *sl = LC__CONTAINER_OF(t, shm_listener_t, task);
	uint64_t next = UINT64_MAX;
	bool again = false;
	for (dconn_t *dc = sl->conns.next, *nx; dc != &sl->conns; dc = nx) {
		nx = dc->next;
		enum serve s = dconn_serve(sl, dc);
		if (s == SERVE_CLOSED)
			continue;
		again |= s == SERVE_MORE;
		uint64_t ring = lc__shm_lane_ring_due(sl, dc, now);
		if (ring)
			next = LC__MIN(next, ring);
		if (dc->ready)
			continue;
		if (now >= dc->accepted_ns + sl->hello_ns) /* accepted_ns may be > now */
			dconn_close(sl, dc, "no handshake within connect_timeout_ms");
		else
			next = LC__MIN(next, dc->accepted_ns + sl->hello_ns);
	}
	return again ? now : next == UINT64_MAX ? 0 : next;
}

static void listener_on_event(lc__io_task_t *t, lc__io_fd_t *f, uint32_t events, uint64_t now)
{
	shm_listener_t *sl = LC__CONTAINER_OF(t, shm_listener_t, task);
	(void)now;
	if (f->tag == LISTEN_TAG) {
		accept_burst(sl);
		return;
	}
	dconn_t *dc = LC__CONTAINER_OF(f, dconn_t, iofd);
	dc->readable |= (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
	dc->writable |= (events & EPOLLOUT) != 0;
}

static const lc__io_task_ops_t listener_task_ops = {
	.name = "shm-listen",
	.on_event = listener_on_event,
	.service = listener_service,
	.poll = lc__shm_listener_poll,
};

/* ---- ops: receiver ---- */

/* On the loop thread, as the task detaches: close every connection. */
static void listener_release(lc__io_task_t *t, void *arg)
{
	shm_listener_t *sl = arg;
	while (sl->conns.next != &sl->conns)
		dconn_close(sl, sl->conns.next, NULL);
	lc__io_fd_del(t, &sl->liofd);
}

static void listener_free(shm_listener_t *sl)
{
	free(sl->imports); /* empty: every connection released its imports */
	lc__shm_helper_stop(sl->helper);
	if (sl->lfd >= 0)
		close(sl->lfd);
	free(sl);
}

static int listen_socket(shm_listener_t *sl)
{
	struct sockaddr_un sa;
	socklen_t alen = lc__shm_addr(sl->name, &sa);
	sl->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (sl->lfd < 0)
		return -errno;
	if (bind(sl->lfd, (struct sockaddr *)&sa, alen) || listen(sl->lfd, 128))
		return errno == EADDRINUSE ? -EEXIST : -errno;
	return 0;
}

int lc__shm_listen(lc_listener_t *l, const char *url)
{
	int rc;
	shm_listener_t *sl = calloc(1, sizeof *sl);
	if (!sl)
		return -ENOMEM;
	sl->l = l;
	sl->ctx = l->ctx;
	sl->lfd = -1;
	sl->conns.next = sl->conns.prev = &sl->conns;
	sl->hello_ns = (uint64_t)lc__ctx_cfg(l->ctx, LC__CFG_connect_timeout_ms) * 1000000ull;
	sl->pending_max = (size_t)lc__ctx_cfg(l->ctx, LC__CFG_shm_pending_max);
	rc = lc__shm_name_from_url(url, sl->name, sizeof sl->name, true);
	uint64_t ipc = 1;
	lc__url_query_u64(url, "ipc", &ipc);
	sl->no_ipc = ipc == 0;
	if (!rc)
		rc = listen_socket(sl);
	if (rc)
		goto fail;
	snprintf(l->url, sizeof l->url, "shm://%s", sl->name);
	if (lc__ctx_cfg(l->ctx, LC__CFG_shm_copy_threads) >= 2 &&
	    sysconf(_SC_NPROCESSORS_ONLN) >= 2 && !(sl->helper = lc__shm_helper_start()))
		LC__WARN("shm://%s: no copy helper thread; copying on the I/O loop alone",
			 sl->name);
	rc = lc__io_attach(l->ctx, &sl->task, &listener_task_ops);
	if (rc)
		goto fail;
	rc = lc__io_fd_add(&sl->task, &sl->liofd, sl->lfd, EPOLLIN, LISTEN_TAG);
	if (rc) {
		lc__io_detach(&sl->task, NULL, NULL);
		goto fail;
	}
	l->priv = sl;
	return 0;
fail:
	listener_free(sl);
	return rc;
}

void lc__shm_listener_close(lc_listener_t *l)
{
	shm_listener_t *sl = l->priv;
	if (!sl)
		return;
	atomic_store(&sl->stop, 1);
	lc__io_detach(&sl->task, listener_release, sl);
	listener_free(sl);
	l->priv = NULL;
}
