/*
 * shm://'s receiver against a P that speaks the wire by hand (the real
 * encoders of transport/shm/wire.h over its unix socket): the listener runs
 * in this process, the raw P on its own socket, so D's memory and counters
 * are read directly. Run as `adversarial_shm <case>`:
 *
 *   handshake  a message before HELLO, HELLO twice, a short message, another
 *              version, an fd passed with a HELLO: malformed or refused,
 *              each connection closed, the listener still serving
 *   sources    source regions D cannot map: a regular file, a memfd that
 *              cannot be sealed, a memfd shorter than the region: D reads
 *              them with process_vm_readv, strided too, every byte landed;
 *              an address P does not have: its writes fail (-ENOTSUP); a
 *              region whose second page is gone: LC_ERR_IO; a region id
 *              sent again replaces the first; a dropped region is unknown
 *   flags      a REGION that says it passes an fd and passes none, and one
 *              that passes an fd it does not declare: malformed
 *   idle       a P that connects and says nothing is closed after D's
 *              connect_timeout_ms; a message larger than any is truncated
 *              (malformed); a second listener on a name in use is refused
 *   raw_d      P against a D that speaks the wire by hand: one that never
 *              answers the HELLO (LC_ERR_UNREACHABLE after connect_timeout_ms),
 *              one that never acknowledges (LC_ERR_STALLED after
 *              progress_timeout_ms), one that answers garbage and passes an
 *              fd, one that acknowledges a batch P never sent or more
 *              writes than the batch has (LC_ERR_PROTO, frames_malformed
 *              at P); each batch fails with its reason. With a lane (the
 *              WELCOME passes one): an ack in it for a batch P never sent,
 *              an acks head far ahead (LC_ERR_PROTO), and a lane memfd
 *              that is not sealed (not used: the write goes by the socket)
 *   lane       the lane (lane.h) against a P that writes it by hand: a
 *              write lands and is acknowledged there; a record that counts
 *              a socket message not sent yet waits for it; a record out of
 *              the grant is rejected in its ack; a malformed record, a
 *              head beyond the ring, a forged acks tail, and a ring on a
 *              connection without a lane close the connection (counted);
 *              records that never become takeable hold nothing else up;
 *              shm_lane=0 makes no lane
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "testutil.h"
#include "transport/shm/lane.h"
#include "transport/shm/shm_int.h"

#define DST (1u << 20)
#define SRC (64u << 10)
#define ROOM 9

typedef struct d_side {
	lc_ctx_t *rx;
	lc_listener_t *l;
	lc_region_t *r;
	uint8_t *dst;
	char url[256];
	lc_token_t token;
	uint32_t id; /* the region's id, named in write records */
} d_side_t;

static void d_up(d_side_t *d)
{
	TU_OK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = "d"},
			    &d->rx));
	d->dst = calloc(1, DST);
	TU_OK(lc_region_register(d->rx, d->dst, DST, &d->r));
	TU_OK(lc_listener_create(d->rx, tu_listen_url("shm"), &d->l));
	TU_OK(lc_listener_url(d->l, d->url, sizeof d->url));
	TU_OK(lc_token_issue(d->rx, &d->token));
	TU_OK(lc_grant_issue(d->rx, ROOM, d->r, 0, DST));
	uint8_t desc[LC_REGION_DESC_MAX];
	lc_region_desc_t rd;
	int n = lc_region_pack(d->r, desc, sizeof desc);
	TU_OK(n);
	TU_OK(lc_region_unpack(desc, (size_t)n, &rd));
	d->id = rd.region_id;
}
static uint32_t dst_id; /* d->id, for send_write */

static void d_down(d_side_t *d)
{
	lc_listener_destroy(d->l);
	lc_ctx_destroy(d->rx);
	free(d->dst);
}

static uint64_t counter(d_side_t *d, const char *name)
{
	uint64_t v = 0;
	TU_OK(lc_ctx_counter_by_name(d->rx, name, &v));
	return v;
}

static int raw_socket(d_side_t *d)
{
	char name[LC__SHM_NAME_MAX + 1];
	struct sockaddr_un sa;
	TU_OK(lc__shm_name_from_url(d->url, name, sizeof name, false));
	socklen_t alen = lc__shm_addr(name, &sa);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	TU_CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&sa, alen) == 0, "connect");
	struct timeval tv = {10, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	return fd;
}

static void send_hello(d_side_t *d, int fd, uint32_t version, int pass_fd)
{
	lc__shm_hello_t h = {.magic = LC__SHM_MAGIC, .version = version, .flags = LC__SHM_HELLO_TOKEN};
	memcpy(h.token, d->token.bytes, LC_TOKEN_LEN);
	uint8_t m[LC__SHM_HELLO_LEN];
	TU_OK(lc__shm_send(fd, m, lc__shm_put_hello(m, &h), pass_fd));
}

/* The WELCOME's status, or 1 when D closed instead. */
static int welcome(int fd)
{
	uint8_t m[LC__SHM_ACKS_MAX];
	ssize_t n = recv(fd, m, sizeof m, 0);
	TU_CHECK(n >= 0, "no answer from D: %s", strerror(errno));
	if (n == 0)
		return 1;
	lc__shm_welcome_t w;
	TU_CHECK(lc__shm_get_welcome(m, (size_t)n, &w) == 0, "not a WELCOME");
	return w.status;
}

static int raw_connect(d_side_t *d)
{
	int fd = raw_socket(d);
	send_hello(d, fd, LC__SHM_VERSION, -1);
	TU_CHECK(welcome(fd) == 0, "handshake refused");
	return fd;
}

/* D closed the connection (within 10 s). */
static void expect_closed(int fd, const char *what)
{
	uint8_t m[LC__SHM_ACKS_MAX];
	ssize_t n;
	while ((n = recv(fd, m, sizeof m, 0)) > 0)
		;
	TU_CHECK(n == 0 || errno == ECONNRESET, "D kept a connection after %s (%s)", what,
		 n < 0 ? strerror(errno) : "");
	close(fd);
}

static void send_region(int fd, uint32_t id, const void *addr, uint64_t len, uint64_t off,
			uint32_t flags, int pass_fd)
{
	lc__shm_region_t r = {.id = id, .flags = flags, .addr = (uint64_t)(uintptr_t)addr,
			      .len = len, .offset = off};
	uint8_t m[LC__SHM_REGION_LEN];
	TU_OK(lc__shm_send(fd, m, lc__shm_put_region(m, &r), pass_fd));
}

static void send_write(int fd, uint64_t batch, uint32_t src, uint64_t src_off, uint64_t dst_off,
		       uint64_t len, uint32_t count, uint64_t src_stride, uint64_t dst_stride)
{
	uint8_t m[LC__SHM_MSG_MAX];
	lc__shm_write_t w = {.batch = batch,
			     .room = ROOM,
			     .src = src,
			     .dst = dst_id,
			     .src_off = src_off,
			     .dst_off = dst_off,
			     .length = len,
			     .count = count,
			     .src_stride = src_stride,
			     .dst_stride = dst_stride};
	lc__shm_put_write(m, 0, &w);
	lc__shm_put_hdr(m, LC__SHM_WRITES, 1);
	TU_OK(lc__shm_send(fd, m, lc__shm_writes_len(1), -1));
}

/* The status of the one ack that follows, or 1 when D closed instead. */
static int ack(int fd)
{
	uint8_t m[LC__SHM_ACKS_MAX];
	ssize_t n = recv(fd, m, sizeof m, 0);
	TU_CHECK(n >= 0, "no ack from D: %s", strerror(errno));
	if (n == 0)
		return 1;
	TU_CHECK(lc__shm_type(m, (size_t)n) == LC__SHM_ACKS && lc__shm_count(m, (size_t)n, 16) == 1,
		 "not one ack");
	lc__shm_ack_t a;
	lc__shm_get_ack(m, 0, &a);
	return a.status;
}

static void case_handshake(void)
{
	d_side_t d = {0};
	d_up(&d);
	uint64_t before = counter(&d, "frames_malformed");
	/* 1. A REGION before any HELLO. */
	int fd = raw_socket(&d);
	send_region(fd, 1, d.dst, 4096, 0, 0, -1);
	expect_closed(fd, "a message before HELLO");
	/* 2. HELLO twice. */
	fd = raw_connect(&d);
	send_hello(&d, fd, LC__SHM_VERSION, -1);
	expect_closed(fd, "a second HELLO");
	/* 3. Four bytes. */
	fd = raw_connect(&d);
	TU_OK(lc__shm_send(fd, "four", 4, -1));
	expect_closed(fd, "a short message");
	/* 4. A message of no known type. */
	fd = raw_connect(&d);
	uint8_t m[LC__SHM_HDR];
	lc__shm_put_hdr(m, 99, 0);
	TU_OK(lc__shm_send(fd, m, sizeof m, -1));
	expect_closed(fd, "an unknown type");
	TU_CHECK(counter(&d, "frames_malformed") == before + 4, "malformed %llu, expected %llu",
		 (unsigned long long)counter(&d, "frames_malformed"),
		 (unsigned long long)before + 4);
	/* 5. Another version: refused in the WELCOME, then closed. */
	fd = raw_socket(&d);
	send_hello(&d, fd, LC__SHM_VERSION + 1, -1);
	TU_CHECK(welcome(fd) == LC_ERR_PROTO, "another version was not refused");
	expect_closed(fd, "a refused handshake");
	/* 6. An fd passed with the HELLO is dropped; the handshake goes on. */
	fd = raw_socket(&d);
	int junk = memfd_create("junk", MFD_CLOEXEC);
	send_hello(&d, fd, LC__SHM_VERSION, junk);
	close(junk);
	TU_CHECK(welcome(fd) == 0, "a HELLO with an fd was refused");
	close(fd);
	d_down(&d);
}

/* Every byte of [dst_off, +len) at D equals src + src_off. */
static void expect_bytes(d_side_t *d, uint64_t dst_off, const uint8_t *src, uint64_t len)
{
	TU_CHECK(!memcmp(d->dst + dst_off, src, len), "bytes at D's %llu differ",
		 (unsigned long long)dst_off);
}

static void case_sources(void)
{
	d_side_t d = {0};
	d_up(&d);
	dst_id = d.id;
	uint8_t *src = malloc(SRC);
	tu_fill(src, SRC, 77);
	int fd = raw_connect(&d);
	/* 1. A regular file: not a memfd, read by CMA from our address. */
	FILE *tf = tmpfile();
	TU_CHECK(tf && ftruncate(fileno(tf), SRC) == 0, "tmpfile");
	send_region(fd, 1, src, SRC, 0, LC__SHM_REGION_FD, fileno(tf));
	fclose(tf);
	send_write(fd, 1, 1, 0, 0, 8192, 0, 0, 0);
	TU_CHECK(ack(fd) == 0, "CMA write from a file-backed region");
	expect_bytes(&d, 0, src, 8192);
	/* Strided from the same region: four rows of 256 bytes. */
	send_write(fd, 2, 1, 1024, 65536, 256, 4, 1024, 512);
	TU_CHECK(ack(fd) == 0, "strided CMA write");
	for (int k = 0; k < 4; k++)
		expect_bytes(&d, 65536 + 512 * (uint64_t)k, src + 1024 + 1024 * k, 256);
	/* 2. A memfd that cannot be sealed against shrinking. */
	int mf = memfd_create("unsealable", MFD_CLOEXEC);
	TU_CHECK(mf >= 0 && ftruncate(mf, SRC) == 0, "memfd");
	send_region(fd, 2, src, SRC, 0, LC__SHM_REGION_FD, mf);
	close(mf);
	send_write(fd, 3, 2, 4096, 131072, 4096, 0, 0, 0);
	TU_CHECK(ack(fd) == 0, "CMA write from an unsealable memfd");
	expect_bytes(&d, 131072, src + 4096, 4096);
	/* 3. A memfd shorter than the region. */
	mf = memfd_create("short", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	TU_CHECK(mf >= 0 && ftruncate(mf, 4096) == 0, "memfd");
	send_region(fd, 3, src, SRC, 0, LC__SHM_REGION_FD, mf);
	close(mf);
	send_write(fd, 4, 3, 8192, 196608, 8192, 0, 0, 0);
	TU_CHECK(ack(fd) == 0, "CMA write from a short memfd");
	expect_bytes(&d, 196608, src + 8192, 8192);
	/* 4. An address P does not have: the probe fails, its writes too. */
	send_region(fd, 4, (void *)(uintptr_t)0x1000, SRC, 0, 0, -1);
	send_write(fd, 5, 4, 0, 262144, 4096, 0, 0, 0);
	int st = ack(fd);
	TU_CHECK(st == -ENOTSUP, "a write from memory P has not: %s", lc_err_name(st));
	/* 5. A region whose second page is gone. */
	long page = sysconf(_SC_PAGESIZE);
	uint8_t *two = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	TU_CHECK(two != MAP_FAILED, "mmap");
	memset(two, 0x3c, (size_t)page);
	TU_CHECK(munmap(two + page, (size_t)page) == 0, "munmap");
	send_region(fd, 5, two, 2 * (uint64_t)page, 0, 0, -1);
	send_write(fd, 6, 5, 0, 327680, 2 * (uint64_t)page, 0, 0, 0);
	st = ack(fd);
	TU_CHECK(st == LC_ERR_IO, "a write running off P's memory: %s", lc_err_name(st));
	/* 6. Region 5 again, now whole: it replaces the first. */
	send_region(fd, 5, src, SRC, 0, 0, -1);
	send_write(fd, 7, 5, 0, 393216, 4096, 0, 0, 0);
	TU_CHECK(ack(fd) == 0, "a write from a replaced region");
	expect_bytes(&d, 393216, src, 4096);
	TU_CHECK(counter(&d, "frames_malformed") == 0, "malformed frames");
	/* 7. Dropped, then written from: unknown, the connection closes. */
	uint8_t m[LC__SHM_DROP_LEN];
	TU_OK(lc__shm_send(fd, m, lc__shm_put_drop(m, 5), -1));
	send_write(fd, 8, 5, 0, 0, 4096, 0, 0, 0);
	TU_CHECK(ack(fd) == 1, "D wrote from a dropped region");
	close(fd);
	TU_CHECK(counter(&d, "frames_malformed") == 1, "malformed %llu",
		 (unsigned long long)counter(&d, "frames_malformed"));
	munmap(two, (size_t)page);
	free(src);
	d_down(&d);
}

static void case_flags(void)
{
	d_side_t d = {0};
	d_up(&d);
	uint8_t *src = calloc(1, SRC);
	int fd = raw_connect(&d);
	send_region(fd, 1, src, SRC, 0, LC__SHM_REGION_FD, -1);
	expect_closed(fd, "a REGION without its fd");
	fd = raw_connect(&d);
	int mf = memfd_create("undeclared", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	TU_CHECK(mf >= 0 && ftruncate(mf, SRC) == 0, "memfd");
	send_region(fd, 1, src, SRC, 0, 0, mf);
	close(mf);
	expect_closed(fd, "a REGION with an undeclared fd");
	fd = raw_connect(&d);
	send_region(fd, 1, src, 0, 0, 0, -1);
	expect_closed(fd, "an empty REGION");
	TU_CHECK(counter(&d, "frames_malformed") == 3, "malformed %llu",
		 (unsigned long long)counter(&d, "frames_malformed"));
	free(src);
	d_down(&d);
}

static void case_idle(void)
{
	d_side_t d = {0};
	d_up(&d);
	TU_OK(lc_ctx_config_set(d.rx, "connect_timeout_ms", "200"));
	uint64_t before = counter(&d, "frames_malformed");
	/* 1. Connected, silent: closed after connect_timeout_ms. */
	int fd = raw_socket(&d);
	expect_closed(fd, "a connection without a handshake");
	/* 2. A message larger than the biggest one there is. */
	fd = raw_connect(&d);
	size_t big = LC__SHM_MSG_MAX + 4096;
	uint8_t *m = calloc(1, big);
	lc__shm_put_hdr(m, LC__SHM_WRITES, 1);
	TU_CHECK(send(fd, m, big, 0) == (ssize_t)big, "send: %s", strerror(errno));
	free(m);
	expect_closed(fd, "a truncated message");
	TU_CHECK(counter(&d, "frames_malformed") == before + 1, "malformed %llu",
		 (unsigned long long)counter(&d, "frames_malformed"));
	/* 3. The same name again. */
	lc_listener_t *l2 = NULL;
	TU_CHECK(lc_listener_create(d.rx, d.url, &l2) == -EEXIST && !l2,
		 "a second listener on %s", d.url);
	/* Still serving. */
	fd = raw_connect(&d);
	close(fd);
	d_down(&d);
}

/* ---- a D that speaks the wire by hand, for an honest P ---- */

enum raw_d_mode {
	D_SILENT,
	D_NO_ACKS,
	D_GARBAGE,
	D_ACK_OTHER,
	D_ACK_EXTRA,
	D_LANE_OTHER,    /* a lane; an ack there for a batch P never sent */
	D_LANE_HEAD,     /* a lane; its acks head far beyond the ring */
	D_LANE_UNSEALED, /* a "lane" memfd not sealed: P keeps to the socket */
};

/* The raw D's side of a lane: wait (10 s) for P's first record there. */
static bool raw_d_lane_record(lc__shm_lane_t *ln)
{
	for (int i = 0; i < 10000; i++) {
		if (atomic_load(ln->w_head) > 0)
			return true;
		usleep(1000);
	}
	return false;
}


typedef struct raw_d {
	int lfd;
	char name[LC__SHM_NAME_MAX + 1];
	enum raw_d_mode mode;
	pthread_t th;
} raw_d_t;

static void *raw_d_main(void *arg)
{
	raw_d_t *r = arg;
	int fd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return NULL;
	uint8_t m[LC__SHM_MSG_MAX];
	struct timeval tv = {10, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	if (recv(fd, m, sizeof m, 0) <= 0) /* the HELLO */
		goto out;
	lc__shm_lane_t ln = {0};
	if (r->mode >= D_LANE_OTHER) {
		int lfd = -1;
		lc__shm_welcome_t w = {.magic = LC__SHM_MAGIC,
				       .version = LC__SHM_VERSION,
				       .flags = LC__SHM_WELCOME_LANE};
		if (r->mode == D_LANE_UNSEALED) {
			lfd = memfd_create("unsealed-lane", MFD_CLOEXEC);
			if (ftruncate(lfd, LC__SHM_LANE_SIZE))
				goto out;
		} else if (lc__shm_lane_create(&ln, &lfd)) {
			goto out;
		}
		lc__shm_send(fd, m, lc__shm_put_welcome(m, &w), lfd);
		close(lfd);
	} else if (r->mode != D_SILENT) {
		lc__shm_welcome_t w = {.magic = LC__SHM_MAGIC, .version = LC__SHM_VERSION};
		lc__shm_send(fd, m, lc__shm_put_welcome(m, &w), -1);
	}
	if (r->mode == D_LANE_OTHER || r->mode == D_LANE_HEAD) {
		/* P passes its region on the socket, then puts the write in
		 * the lane: answer there, with a lie. */
		if (!raw_d_lane_record(&ln))
			goto out;
		if (r->mode == D_LANE_OTHER) {
			uint8_t *slot = lc__shm_lane_wslot(&ln, 0);
			uint8_t a[LC__SHM_HDR + LC__SHM_ACK_REC];
			lc__shm_ack_t ack = {.batch = lc__get_u64(slot) + 1, .writes = 1};
			lc__shm_put_ack(a, 0, &ack);
			memcpy(lc__shm_lane_aslot(&ln, 0), a + LC__SHM_HDR, LC__SHM_ACK_REC);
			atomic_store(ln.a_head, 1);
		} else {
			atomic_store(ln.a_head, 5000);
		}
		uint8_t bell[LC__SHM_HDR];
		lc__shm_put_hdr(bell, LC__SHM_LANE_RING, 0);
		lc__shm_send(fd, bell, sizeof bell, -1);
		while (recv(fd, m, sizeof m, 0) > 0)
			;
		goto out;
	}
	/* Garbage once the batch is on the wire (its WRITES read): sooner, P
	 * would fail only that connection and send the batch on a new one. */
	ssize_t k = 0;
	bool answers = r->mode == D_GARBAGE || r->mode == D_ACK_OTHER || r->mode == D_ACK_EXTRA ||
		       r->mode == D_LANE_UNSEALED;
	while (answers && (k = recv(fd, m, sizeof m, 0)) > 0 &&
	       lc__shm_type(m, (size_t)k) != LC__SHM_WRITES)
		; /* its REGION */
	if (r->mode == D_GARBAGE && k > 0) {
		int junk = memfd_create("junk", MFD_CLOEXEC);
		lc__shm_send(fd, "garbage!", 8, junk);
		close(junk);
	} else if (answers && k > 0) {
		/* A well-formed ACKS that lies: for a batch P never sent, or for
		 * more writes than the batch has (a replayed or forged count). */
		lc__shm_ack_t a = {.batch = lc__shm_write_batch(m, 0), .writes = 1};
		if (r->mode == D_ACK_OTHER)
			a.batch++;
		else if (r->mode != D_LANE_UNSEALED) /* that one acknowledges honestly */
			a.writes = 2;
		lc__shm_put_ack(m, 0, &a);
		lc__shm_put_hdr(m, LC__SHM_ACKS, 1);
		lc__shm_send(fd, m, LC__SHM_HDR + LC__SHM_ACK_REC, -1);
	}
	/* Read (and drop) whatever P sends until it hangs up. */
	while (recv(fd, m, sizeof m, 0) > 0)
		;
out:
	lc__shm_lane_unmap(&ln);
	close(fd);
	return NULL;
}

static void raw_d_start(raw_d_t *r, enum raw_d_mode mode)
{
	struct sockaddr_un sa;
	r->mode = mode;
	snprintf(r->name, sizeof r->name, "lc-rawd-%d-%d", (int)getpid(), (int)mode);
	socklen_t alen = lc__shm_addr(r->name, &sa);
	r->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	TU_CHECK(r->lfd >= 0 && bind(r->lfd, (struct sockaddr *)&sa, alen) == 0 &&
			 listen(r->lfd, 4) == 0,
		 "raw D listen: %s", strerror(errno));
	TU_CHECK(pthread_create(&r->th, NULL, raw_d_main, r) == 0, "thread");
}

static void raw_d_stop(raw_d_t *r)
{
	pthread_join(r->th, NULL);
	close(r->lfd);
}

static void p_against(enum raw_d_mode mode, int want, const char *words)
{
	raw_d_t r;
	raw_d_start(&r, mode);
	lc_ctx_t *tx, *other;
	TU_OK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = "p"},
			    &tx));
	/* Only the deadline under test is short: a raw D slowed by a loaded
	 * machine must not fail the others' handshake first. */
	if (mode == D_SILENT)
		TU_OK(lc_ctx_config_set(tx, "connect_timeout_ms", "300"));
	if (mode == D_NO_ACKS)
		TU_OK(lc_ctx_config_set(tx, "progress_timeout_ms", "300"));
	/* A real descriptor to import (the raw D checks nothing). */
	TU_OK(lc_ctx_create(&(lc_ctx_params_t){.size = sizeof(lc_ctx_params_t), .name = "x"},
			    &other));
	uint8_t *dmem = calloc(1, SRC), *src;
	lc_region_t *dr, *sr;
	TU_OK(lc_region_register(other, dmem, SRC, &dr));
	uint8_t desc[LC_REGION_DESC_MAX];
	int n = lc_region_pack(dr, desc, sizeof desc);
	TU_OK(n);
	TU_OK(lc_mem_alloc(SRC, LC_MEM_SHAREABLE, (void **)&src));
	TU_OK(lc_region_register(tx, src, SRC, &sr));
	lc_cq_t *cq;
	TU_OK(lc_cq_create(tx, &cq));
	char url[128];
	snprintf(url, sizeof url, "shm://%s", r.name);
	lc_conn_t *conn;
	lc_conn_params_t cp = {.size = sizeof cp, .cq = cq};
	TU_OK(lc_conn_create(tx, url, &cp, &conn));
	uint32_t remote;
	TU_OK(lc_conn_import_region(conn, desc, (size_t)n, &remote));
	lc_write_t w = {.local = src, .remote_region = remote, .length = 4096};
	lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM, .timeout_ms = 20000};
	uint64_t id;
	TU_OK(lc_batch_post(conn, &w, 1, &bp, &id));
	lc_completion_t c = tu_wait_one(cq, 15000);
	fprintf(stderr, "raw D mode %d: %s (%s)\n", mode, lc_err_name(c.status), c.reason);
	TU_CHECK(c.batch_id == id && c.status == want && strstr(c.reason, words),
		 "raw D mode %d: %s (%s), expected %s with \"%s\"", mode, lc_err_name(c.status),
		 c.reason, lc_err_name(want), words);
	if (mode == D_GARBAGE || mode == D_ACK_OTHER || mode == D_ACK_EXTRA ||
	    mode == D_LANE_OTHER || mode == D_LANE_HEAD) {
		uint64_t v = 0;
		TU_OK(lc_ctx_counter_by_name(tx, "frames_malformed", &v));
		TU_CHECK(v == 1, "P counted %llu malformed frames", (unsigned long long)v);
	}
	lc_conn_destroy(conn);
	raw_d_stop(&r);
	lc_cq_destroy(cq);
	lc_ctx_destroy(tx);
	lc_ctx_destroy(other);
	lc_mem_free(src);
	free(dmem);
}

static void case_raw_d(void)
{
	p_against(D_SILENT, LC_ERR_UNREACHABLE, "no handshake within");
	p_against(D_NO_ACKS, LC_ERR_STALLED, "no acknowledgement within");
	p_against(D_GARBAGE, LC_ERR_PROTO, "malformed message from the receiver");
	/* An ack is never taken on trust: one for another batch, or for a
	 * write the batch does not have, fails it; it never completes. */
	p_against(D_ACK_OTHER, LC_ERR_PROTO, "malformed message from the receiver");
	p_against(D_ACK_EXTRA, LC_ERR_PROTO, "malformed message from the receiver");
	/* Through a lane the same: what D publishes there is checked. */
	p_against(D_LANE_OTHER, LC_ERR_PROTO, "malformed acknowledgements in the lane");
	p_against(D_LANE_HEAD, LC_ERR_PROTO, "malformed acknowledgements in the lane");
	p_against(D_LANE_UNSEALED, 0, "");
}


/* ---- records a receiver must refuse, or take with care ---- */

/* Descriptors open in this process (D's included: the listener is here). */
static int open_fds(void)
{
	int n = 0;
	for (int fd = 0; fd < 4096; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

/* D closed fd as malformed, counted once since `before`. */
static void closed_malformed(d_side_t *d, int fd, uint64_t before, const char *what)
{
	expect_closed(fd, what);
	TU_CHECK(counter(d, "frames_malformed") == before + 1, "%s: malformed +%llu", what,
		 (unsigned long long)(counter(d, "frames_malformed") - before));
}

/* A connection that sends m (len bytes) is closed as malformed. */
static void expect_malformed(d_side_t *d, int fd, const void *m, size_t len, const char *what)
{
	uint64_t before = counter(d, "frames_malformed");
	TU_OK(lc__shm_send(fd, m, len, -1));
	closed_malformed(d, fd, before, what);
}

static void case_records(void)
{
	d_side_t d = {0};
	d_up(&d);
	dst_id = d.id;
	uint8_t *src = malloc(SRC);
	tu_fill(src, SRC, 31);
	uint8_t m[LC__SHM_MSG_MAX];

	/* 1. A token D did not issue, and none: LC_ERR_AUTH, counted. */
	for (int k = 0; k < 2; k++) {
		uint64_t before = counter(&d, "conns_rejected_auth");
		int fd = raw_socket(&d);
		lc__shm_hello_t h = {.magic = LC__SHM_MAGIC,
				     .version = LC__SHM_VERSION,
				     .flags = k ? 0 : LC__SHM_HELLO_TOKEN};
		memcpy(h.token, d.token.bytes, LC_TOKEN_LEN);
		h.token[5] ^= 1;
		TU_OK(lc__shm_send(fd, m, lc__shm_put_hello(m, &h), -1));
		TU_CHECK(welcome(fd) == LC_ERR_AUTH, "%s token admitted", k ? "no" : "a wrong");
		expect_closed(fd, "a refused token");
		TU_CHECK(counter(&d, "conns_rejected_auth") == before + 1, "not counted");
	}
	/* 1b. CUDA IPC offered to a D that loaded no CUDA: not accepted, the
	 *     connection goes on without it; an IPC_REGION is then malformed. */
	int fd = raw_socket(&d);
	lc__shm_hello_t hi = {.magic = LC__SHM_MAGIC,
			      .version = LC__SHM_VERSION,
			      .flags = LC__SHM_HELLO_TOKEN | LC__SHM_HELLO_IPC};
	memcpy(hi.token, d.token.bytes, LC_TOKEN_LEN);
	TU_OK(lc__shm_send(fd, m, lc__shm_put_hello(m, &hi), -1));
	ssize_t wn = recv(fd, m, sizeof m, 0);
	lc__shm_welcome_t wl;
	TU_CHECK(wn > 0 && lc__shm_get_welcome(m, (size_t)wn, &wl) == 0 && wl.status == 0 &&
			 !(wl.flags & LC__SHM_WELCOME_IPC),
		 "IPC accepted by a D without CUDA");
	memset(m, 0, LC__SHM_IPC_REGION_LEN);
	lc__shm_put_hdr(m, LC__SHM_IPC_REGION, 0);
	expect_malformed(&d, fd, m, LC__SHM_IPC_REGION_LEN, "an IPC_REGION after IPC was declined");
	/* 2. A HELLO cut short. */
	lc__shm_hello_t h = {.magic = LC__SHM_MAGIC, .version = LC__SHM_VERSION};
	size_t hl = lc__shm_put_hello(m, &h);
	expect_malformed(&d, raw_socket(&d), m, hl - 8, "a short HELLO");
	/* 3. A REGION whose address range wraps. */
	lc__shm_region_t r = {.id = 1, .addr = UINT64_MAX - 100, .len = 4096};
	expect_malformed(&d, raw_connect(&d), m, lc__shm_put_region(m, &r), "a wrapping REGION");
	/* 4. A DROP cut short. */
	size_t dl = lc__shm_put_drop(m, 1);
	expect_malformed(&d, raw_connect(&d), m, dl - 4, "a short DROP");
	/* 5. An IPC_REGION on a connection that did not negotiate IPC. */
	memset(m, 0, LC__SHM_IPC_REGION_LEN);
	lc__shm_put_hdr(m, LC__SHM_IPC_REGION, 0);
	expect_malformed(&d, raw_connect(&d), m, LC__SHM_IPC_REGION_LEN, "an IPC_REGION unasked");
	/* 6. WRITES of no record, of a zero-length record, of a record past
	 *    its source region, from a source never declared. */
	lc__shm_put_hdr(m, LC__SHM_WRITES, 0);
	expect_malformed(&d, raw_connect(&d), m, LC__SHM_HDR, "WRITES of none");
	static const struct {
		uint64_t src_off, len;
		uint32_t src;
		const char *what;
	} bad[] = {{0, 0, 1, "a zero-length write"},
		   {SRC - 8, 16, 1, "a write past its source"},
		   {0, 16, 7, "a write from an undeclared source"}};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		fd = raw_connect(&d);
		send_region(fd, 1, src, SRC, 0, 0, -1);
		lc__shm_write_t w = {.batch = 1, .room = ROOM, .src = bad[i].src, .dst = d.id,
				     .src_off = bad[i].src_off, .length = bad[i].len};
		lc__shm_put_write(m, 0, &w);
		lc__shm_put_hdr(m, LC__SHM_WRITES, 1);
		expect_malformed(&d, fd, m, lc__shm_writes_len(1), bad[i].what);
	}
	/* 7. Source regions past LC__SHM_MAX_SRC_REGIONS: the one too many. */
	fd = raw_connect(&d);
	for (uint32_t id = 1; id <= LC__SHM_MAX_SRC_REGIONS; id++)
		send_region(fd, id, src, SRC, 0, 0, -1);
	send_write(fd, 1, LC__SHM_MAX_SRC_REGIONS, 0, DST / 2 + 4096, 64, 0, 0, 0);
	TU_CHECK(ack(fd) == 0, "a write from the last region that fits");
	r = (lc__shm_region_t){.id = LC__SHM_MAX_SRC_REGIONS + 1,
			       .addr = (uint64_t)(uintptr_t)src,
			       .len = SRC};
	expect_malformed(&d, fd, m, lc__shm_put_region(m, &r), "a region too many");

	/* 8. Fds D must not take as memory: a pipe declared as a REGION's fd
	 *    (not a memfd: read by CMA), a memfd with the region's offset past
	 *    its end (CMA too), an fd passed with a WRITES (closed, the write
	 *    applied); D holds none of them afterwards. */
	memset(d.dst, 0, DST);
	fd = raw_connect(&d);
	int base_fds = open_fds();
	int pp[2];
	TU_CHECK(pipe(pp) == 0, "pipe");
	send_region(fd, 1, src, SRC, 0, LC__SHM_REGION_FD, pp[0]);
	send_write(fd, 1, 1, 0, 0, 4096, 0, 0, 0);
	TU_CHECK(ack(fd) == 0, "a write from a region declared with a pipe");
	expect_bytes(&d, 0, src, 4096);
	int mf = memfd_create("past", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	TU_CHECK(mf >= 0 && ftruncate(mf, SRC) == 0, "memfd");
	send_region(fd, 2, src, SRC, 2 * (uint64_t)SRC, LC__SHM_REGION_FD, mf);
	send_write(fd, 2, 2, 4096, 8192, 4096, 0, 0, 0);
	TU_CHECK(ack(fd) == 0, "a write from a region past its memfd");
	expect_bytes(&d, 8192, src + 4096, 4096);
	send_write(fd, 3, 2, 0, 16384, 1, 0, 0, 0); /* the write alone, then with an fd */
	TU_CHECK(ack(fd) == 0, "a write");
	lc__shm_write_t w = {.batch = 4, .room = ROOM, .src = 2, .dst = d.id, .src_off = 8192,
			     .dst_off = 20480, .length = 4096};
	lc__shm_put_write(m, 0, &w);
	lc__shm_put_hdr(m, LC__SHM_WRITES, 1);
	TU_OK(lc__shm_send(fd, m, lc__shm_writes_len(1), mf));
	TU_CHECK(ack(fd) == 0, "a write that came with an fd");
	expect_bytes(&d, 20480, src + 8192, 4096);
	/* A DROP of a region never declared changes nothing. */
	TU_OK(lc__shm_send(fd, m, lc__shm_put_drop(m, 99), -1));
	send_write(fd, 5, 1, 0, 24576, 64, 0, 0, 0);
	TU_CHECK(ack(fd) == 0, "a write after a DROP of nothing");
	close(pp[0]);
	close(pp[1]);
	close(mf);
	int left = open_fds();
	TU_CHECK(left == base_fds, "D holds %d descriptors more than before", left - base_fds);

	/* 9. Acks are per batch, in order: 3 writes of batch 50, one of 51
	 *    outside the grant, 2 of 52: three acks (50: 3 ok, 51: 1 refused,
	 *    52: 2 ok), in one ACKS message or more. */
	TU_OK(lc_grant_revoke(d.rx, ROOM));
	TU_OK(lc_grant_issue(d.rx, ROOM, d.r, 0, DST / 2));
	static const struct {
		uint64_t batch, dst_off;
	} recs[] = {{50, 0}, {50, 64}, {50, 128}, {51, DST - 64}, {52, 192}, {52, 256}};
	for (uint32_t i = 0; i < 6; i++) {
		lc__shm_write_t x = {.batch = recs[i].batch, .room = ROOM, .src = 1, .dst = d.id,
				     .src_off = 64 * i, .dst_off = recs[i].dst_off, .length = 64};
		lc__shm_put_write(m, i, &x);
	}
	lc__shm_put_hdr(m, LC__SHM_WRITES, 6);
	TU_OK(lc__shm_send(fd, m, lc__shm_writes_len(6), -1));
	static const struct {
		uint64_t batch;
		uint32_t writes;
		int32_t status;
	} want[] = {{50, 3, 0}, {51, 1, LC_ERR_GRANT}, {52, 2, 0}};
	uint32_t got = 0;
	while (got < 3) {
		ssize_t n = recv(fd, m, sizeof m, 0);
		TU_CHECK(n > 0 && lc__shm_type(m, (size_t)n) == LC__SHM_ACKS, "no ACKS");
		uint32_t k = lc__shm_count(m, (size_t)n, LC__SHM_ACK_REC);
		for (uint32_t i = 0; i < k; i++, got++) {
			lc__shm_ack_t a;
			lc__shm_get_ack(m, i, &a);
			TU_CHECK(got < 3 && a.batch == want[got].batch &&
					 a.writes == want[got].writes && a.status == want[got].status,
				 "ack %u: batch %llu, %u writes, %s", got,
				 (unsigned long long)a.batch, a.writes, lc_err_name(a.status));
		}
	}
	TU_CHECK(d.dst[DST - 1] == 0, "the refused write landed");
	close(fd);
	free(src);
	d_down(&d);
}

/* ---- caps and backpressure ---- */

typedef struct writer {
	int fd, n;
	pthread_t th;
} writer_t;

#define BACKLOG 3000

/* BACKLOG WRITES messages of one 64-byte write each, batch 1..BACKLOG. */
static void *writer_main(void *arg)
{
	writer_t *wr = arg;
	uint8_t m[LC__SHM_HDR + LC__SHM_WRITE_REC];
	for (int i = 0; i < wr->n; i++) {
		lc__shm_write_t w = {.batch = (uint64_t)i + 1, .room = ROOM, .src = 1, .dst = dst_id,
				     .src_off = 64 * (uint64_t)(i % 64),
				     .dst_off = 64 * (uint64_t)i, .length = 64};
		lc__shm_put_write(m, 0, &w);
		lc__shm_put_hdr(m, LC__SHM_WRITES, 1);
		struct msghdr mh = {.msg_iov = &(struct iovec){m, sizeof m}, .msg_iovlen = 1};
		if (sendmsg(wr->fd, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof m)
			break;
	}
	return NULL;
}

static void case_caps(void)
{
	d_side_t d = {0};
	d_up(&d);
	dst_id = d.id;
	/* 1. shm_pending_max=2: of four silent connections, the two oldest go. */
	TU_OK(lc_ctx_config_set(d.rx, "shm_pending_max", "2"));
	lc_listener_destroy(d.l);
	TU_OK(lc_listener_create(d.rx, tu_listen_url("shm"), &d.l));
	TU_OK(lc_listener_url(d.l, d.url, sizeof d.url));
	int fds[4];
	for (int i = 0; i < 4; i++) {
		fds[i] = raw_socket(&d);
		usleep(50000); /* accepted in this order */
	}
	for (int i = 0; i < 2; i++)
		expect_closed(fds[i], "an old silent connection");
	TU_CHECK(counter(&d, "conns_evicted_pending") == 2, "evicted %llu",
		 (unsigned long long)counter(&d, "conns_evicted_pending"));
	for (int i = 2; i < 4; i++) {
		send_hello(&d, fds[i], LC__SHM_VERSION, -1);
		TU_CHECK(welcome(fds[i]) == 0, "a newer silent connection was closed");
		close(fds[i]);
	}
	/* 2. A P that does not read its acks: D stops reading its writes
	 *    instead of buffering acks; none is lost. */
	uint8_t *src = malloc(SRC);
	tu_fill(src, SRC, 3);
	writer_t wr = {.fd = raw_connect(&d), .n = BACKLOG};
	send_region(wr.fd, 1, src, SRC, 0, 0, -1);
	TU_CHECK(pthread_create(&wr.th, NULL, writer_main, &wr) == 0, "thread");
	usleep(500000); /* let the acks back up (the test holds either way) */
	uint64_t next = 1;
	uint8_t m[LC__SHM_ACKS_MAX];
	while (next <= BACKLOG) {
		ssize_t n = recv(wr.fd, m, sizeof m, 0);
		TU_CHECK(n > 0 && lc__shm_type(m, (size_t)n) == LC__SHM_ACKS, "ack %llu: %s",
			 (unsigned long long)next, n < 0 ? strerror(errno) : "not ACKS");
		uint32_t k = lc__shm_count(m, (size_t)n, LC__SHM_ACK_REC);
		for (uint32_t i = 0; i < k; i++, next++) {
			lc__shm_ack_t a;
			lc__shm_get_ack(m, i, &a);
			TU_CHECK(a.batch == next && a.writes == 1 && a.status == 0,
				 "ack of batch %llu: batch %llu, %u writes, %s",
				 (unsigned long long)next, (unsigned long long)a.batch, a.writes,
				 lc_err_name(a.status));
		}
	}
	pthread_join(wr.th, NULL);
	for (int i = 0; i < BACKLOG; i++)
		TU_CHECK(!memcmp(d.dst + 64 * i, src + 64 * (i % 64), 64), "write %d's bytes", i);
	close(wr.fd);
	free(src);
	d_down(&d);
}

/* ---- a P with more source regions than D's table ---- */

/* 300 source regions (D holds 256 per connection): P drops the oldest
 * before declaring a new one, D copies every write from the region it
 * names; region 0, dropped early, is declared again for a second batch. */
static void case_many_sources(void)
{
	enum { N = 300, W = 2048 };
	d_side_t d = {0};
	d_up(&d);
	lc_ctx_t *tx;
	TU_OK(lc_ctx_create(NULL, &tx));
	uint8_t *src;
	TU_OK(lc_mem_alloc((size_t)N * W, LC_MEM_SHAREABLE, (void **)&src));
	tu_fill(src, (size_t)N * W, 41);
	lc_region_t *sr[N];
	for (int i = 0; i < N; i++)
		TU_OK(lc_region_register(tx, src + (size_t)i * W, W, &sr[i]));
	lc_cq_t *cq;
	TU_OK(lc_cq_create(tx, &cq));
	lc_conn_params_t cp = {.size = sizeof cp, .cq = cq, .token = d.token, .has_token = 1};
	lc_conn_t *conn;
	TU_OK(lc_conn_create(tx, d.url, &cp, &conn));
	uint8_t desc[LC_REGION_DESC_MAX];
	int n = lc_region_pack(d.r, desc, sizeof desc);
	uint32_t remote;
	TU_OK(lc_conn_import_region(conn, desc, (size_t)n, &remote));
	static lc_write_t w[N];
	for (int i = 0; i < N; i++)
		w[i] = (lc_write_t){.local = src + (size_t)i * W,
				    .remote_region = remote,
				    .remote_offset = (uint64_t)i * W,
				    .length = W};
	lc_batch_params_t bp = {.size = sizeof bp, .room = ROOM, .timeout_ms = 30000};
	uint64_t id;
	TU_OK(lc_batch_post(conn, w, N, &bp, &id));
	lc_completion_t c = tu_wait_one(cq, 30000);
	TU_CHECK(c.status == 0, "300 sources: %s (%s)", lc_err_name(c.status), c.reason);
	expect_bytes(&d, 0, src, (uint64_t)N * W);
	lc_write_t again = {.local = src, .remote_region = remote, .remote_offset = N * W,
			    .length = W};
	TU_OK(lc_batch_post(conn, &again, 1, &bp, &id));
	c = tu_wait_one(cq, 30000);
	TU_CHECK(c.status == 0, "region 0 again: %s (%s)", lc_err_name(c.status), c.reason);
	expect_bytes(&d, (uint64_t)N * W, src, W);
	TU_CHECK(counter(&d, "frames_malformed") == 0, "malformed frames");
	lc_conn_destroy(conn);
	lc_cq_destroy(cq);
	lc_ctx_destroy(tx);
	lc_mem_free(src);
	d_down(&d);
}

/* ---- the lane, written by hand ---- */

typedef struct raw_lane {
	int fd;
	lc__shm_lane_t ln;
	uint64_t w_head, a_tail;
} raw_lane_t;

/* A connection whose HELLO offers a lane; false when D made none. */
static bool lane_connect(d_side_t *d, raw_lane_t *rl)
{
	*rl = (raw_lane_t){.fd = raw_socket(d)};
	lc__shm_hello_t h = {.magic = LC__SHM_MAGIC,
			     .version = LC__SHM_VERSION,
			     .flags = LC__SHM_HELLO_TOKEN | LC__SHM_HELLO_LANE};
	memcpy(h.token, d->token.bytes, LC_TOKEN_LEN);
	uint8_t m[LC__SHM_HELLO_LEN];
	TU_OK(lc__shm_send(rl->fd, m, lc__shm_put_hello(m, &h), -1));
	struct pollfd pf = {.fd = rl->fd, .events = POLLIN};
	TU_CHECK(poll(&pf, 1, 10000) == 1, "no WELCOME");
	uint8_t b[LC__SHM_ACKS_MAX];
	int lfd;
	bool trunc;
	ssize_t n = lc__shm_recv(rl->fd, b, sizeof b, &lfd, &trunc);
	lc__shm_welcome_t w;
	TU_CHECK(n > 0 && lc__shm_get_welcome(b, (size_t)n, &w) == 0 && w.status == 0,
		 "handshake refused");
	if (!(w.flags & LC__SHM_WELCOME_LANE)) {
		TU_CHECK(lfd < 0, "an fd without the lane flag");
		return false;
	}
	TU_CHECK(lfd >= 0, "the lane flag without an fd");
	TU_OK(lc__shm_lane_map(&rl->ln, lfd));
	close(lfd);
	return true;
}

static void lane_close(raw_lane_t *rl)
{
	lc__shm_lane_unmap(&rl->ln);
	close(rl->fd);
}

static void lane_ring(raw_lane_t *rl)
{
	uint8_t m[LC__SHM_HDR];
	lc__shm_put_hdr(m, LC__SHM_LANE_RING, 0);
	TU_OK(lc__shm_send(rl->fd, m, sizeof m, -1));
}

/* One record in the lane, counting `seq` socket messages before it;
 * published and rung. */
static void lane_write(raw_lane_t *rl, uint64_t batch, uint32_t src, uint64_t src_off,
		       uint64_t dst_off, uint64_t len, uint64_t seq)
{
	uint8_t m[LC__SHM_HDR + LC__SHM_WRITE_REC];
	lc__shm_write_t w = {.batch = batch,
			     .room = ROOM,
			     .src = src,
			     .dst = dst_id,
			     .src_off = src_off,
			     .dst_off = dst_off,
			     .length = len};
	lc__shm_put_write(m, 0, &w);
	uint8_t *slot = lc__shm_lane_wslot(&rl->ln, rl->w_head);
	memcpy(slot, m + LC__SHM_HDR, LC__SHM_WRITE_REC);
	lc__put_u64(slot + LC__SHM_WRITE_REC, seq);
	lc__shm_lane_publish(&rl->ln, rl->ln.w_head, ++rl->w_head, rl->ln.d_parked, NULL);
	lane_ring(rl);
}

/* The next ack in the lane within ms: 1 with *a, 0 for none. */
static int lane_ack(raw_lane_t *rl, lc__shm_ack_t *a, int ms)
{
	for (int i = 0; i < ms; i++) {
		if (lc__shm_lane_avail(&rl->ln, rl->ln.a_head, rl->a_tail)) {
			uint8_t m[LC__SHM_HDR + LC__SHM_ACK_REC];
			memcpy(m + LC__SHM_HDR, lc__shm_lane_aslot(&rl->ln, rl->a_tail),
			       LC__SHM_ACK_REC);
			lc__shm_get_ack(m, 0, a);
			lc__shm_lane_release(&rl->ln, rl->ln.a_tail, ++rl->a_tail);
			return 1;
		}
		usleep(1000);
	}
	return 0;
}

/* A source region in a sealed memfd, passed as REGION id. */
static void lane_region(raw_lane_t *rl, uint32_t id, uint8_t **mem)
{
	int mf = memfd_create("lane-src", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	TU_CHECK(mf >= 0 && ftruncate(mf, SRC) == 0 &&
			 fcntl(mf, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0,
		 "memfd");
	*mem = mmap(NULL, SRC, PROT_READ | PROT_WRITE, MAP_SHARED, mf, 0);
	TU_CHECK(*mem != MAP_FAILED, "mmap");
	tu_fill(*mem, SRC, 40 + id);
	send_region(rl->fd, id, *mem, SRC, 0, LC__SHM_REGION_FD, mf);
	close(mf);
}

/* D closed the lane's connection as malformed after what the caller did. */
static void lane_expect_malformed(d_side_t *d, raw_lane_t *rl, uint64_t before, const char *what)
{
	closed_malformed(d, rl->fd, before, what);
	lc__shm_lane_unmap(&rl->ln);
}

static void case_lane(void)
{
	d_side_t d = {0};
	d_up(&d);
	dst_id = d.id;
	raw_lane_t rl;
	lc__shm_ack_t a;
	uint8_t *src1, *src2;
	TU_CHECK(lane_connect(&d, &rl), "D made no lane");
	/* 1. A write through the lane lands and is acknowledged there. */
	uint64_t taken = counter(&d, "lane_writes");
	lane_region(&rl, 1, &src1);
	lane_write(&rl, 1, 1, 0, 0, 8192, 1);
	TU_CHECK(lane_ack(&rl, &a, 10000) && a.batch == 1 && a.writes == 1 && a.status == 0,
		 "the lane write was not acknowledged in the lane");
	expect_bytes(&d, 0, src1, 8192);
	TU_CHECK(counter(&d, "lane_writes") == taken + 1, "lane_writes");
	/* 2. A record that counts a socket message D has not had (the
	 *    REGION of its source, sent after it) waits for that message:
	 *    taken before, it would name an unknown source (malformed). */
	lane_write(&rl, 2, 2, 4096, 16384, 4096, 2);
	TU_CHECK(!lane_ack(&rl, &a, 100), "a record taken before the message it counts");
	lane_region(&rl, 2, &src2);
	TU_CHECK(lane_ack(&rl, &a, 10000) && a.batch == 2 && a.status == 0,
		 "the waiting record was not taken after its message");
	expect_bytes(&d, 16384, src2 + 4096, 4096);
	/* 3. Out of the grant (past D's region): rejected in its ack, nothing
	 *    lands, the connection goes on. */
	lane_write(&rl, 3, 1, 0, DST - 100, 4096, 2);
	TU_CHECK(lane_ack(&rl, &a, 10000) && a.batch == 3 && a.status != 0,
		 "an out-of-region lane write was accepted");
	lane_write(&rl, 4, 1, 8192, 32768, 4096, 2);
	TU_CHECK(lane_ack(&rl, &a, 10000) && a.batch == 4 && a.status == 0, "after a rejection");
	expect_bytes(&d, 32768, src1 + 8192, 4096);
	/* 4. A malformed record (no bytes) closes the connection. */
	uint64_t before = counter(&d, "frames_malformed");
	lane_write(&rl, 5, 1, 0, 0, 0, 2);
	lane_expect_malformed(&d, &rl, before, "a zero-length lane record");
	/* 5. A head more than the ring ahead of D's tail. */
	TU_CHECK(lane_connect(&d, &rl), "D made no lane");
	before = counter(&d, "frames_malformed");
	atomic_store(rl.ln.w_head, LC__SHM_LANE_SLOTS + 1);
	lane_ring(&rl);
	lane_expect_malformed(&d, &rl, before, "a lane head beyond the ring");
	/* 6. A forged acks tail: D finds it when its loop next parks (an ack
	 *    reads the tail only when D's copy says the ring is full). */
	TU_CHECK(lane_connect(&d, &rl), "D made no lane");
	lane_region(&rl, 1, &src1);
	before = counter(&d, "frames_malformed");
	atomic_store(rl.ln.a_tail, 7);
	lane_write(&rl, 1, 1, 0, 0, 4096, 1);
	lane_expect_malformed(&d, &rl, before, "a forged acks tail");
	/* 7. A ring on a connection without a lane. */
	int fd = raw_connect(&d);
	uint8_t bell[LC__SHM_HDR];
	lc__shm_put_hdr(bell, LC__SHM_LANE_RING, 0);
	expect_malformed(&d, fd, bell, sizeof bell, "a ring without a lane");
	/* 8. A full ring of records that count socket messages never sent:
	 *    D takes none, and serves another connection meanwhile. */
	TU_CHECK(lane_connect(&d, &rl), "D made no lane");
	for (uint32_t i = 0; i < LC__SHM_LANE_SLOTS; i++)
		lc__put_u64(lc__shm_lane_wslot(&rl.ln, i) + LC__SHM_WRITE_REC, UINT64_MAX);
	atomic_store(rl.ln.w_head, LC__SHM_LANE_SLOTS);
	lane_ring(&rl);
	raw_lane_t ok;
	TU_CHECK(lane_connect(&d, &ok), "D made no lane");
	lane_region(&ok, 1, &src2);
	lane_write(&ok, 1, 1, 0, 65536, 4096, 1);
	TU_CHECK(lane_ack(&ok, &a, 10000) && a.status == 0, "another connection held up");
	expect_bytes(&d, 65536, src2, 4096);
	TU_CHECK(!lane_ack(&rl, &a, 50), "a record taken before its messages");
	lane_close(&ok);
	lane_close(&rl);
	/* 9. shm_lane=0: no lane offered back. */
	TU_OK(lc_ctx_config_set(d.rx, "shm_lane", "0"));
	TU_CHECK(!lane_connect(&d, &rl), "a lane with shm_lane=0");
	close(rl.fd);
	munmap(src1, SRC);
	munmap(src2, SRC);
	d_down(&d);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: adversarial_shm <case>\n");
		return 2;
	}
	tu_watchdog(55);
	signal(SIGPIPE, SIG_IGN);
	if (!tu_transport_built("shm")) {
		fprintf(stderr, "skip: no shm transport\n");
		return TU_SKIP;
	}
	const char *n = argv[1];
	if (!strcmp(n, "handshake"))
		case_handshake();
	else if (!strcmp(n, "sources"))
		case_sources();
	else if (!strcmp(n, "flags"))
		case_flags();
	else if (!strcmp(n, "idle"))
		case_idle();
	else if (!strcmp(n, "raw_d"))
		case_raw_d();
	else if (!strcmp(n, "records"))
		case_records();
	else if (!strcmp(n, "lane"))
		case_lane();
	else if (!strcmp(n, "caps"))
		case_caps();
	else if (!strcmp(n, "many_sources"))
		case_many_sources();
	else {
		fprintf(stderr, "unknown case %s\n", n);
		return 2;
	}
	printf("adversarial_shm %s: ok\n", n);
	return 0;
}
