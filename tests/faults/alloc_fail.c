/*
 * Resource-failure injection through the public API (issue 20, coverage of
 * the unwinding paths): every allocation, thread creation and descriptor-
 * creating call that liblayercake.so makes is counted, and for n = 1..K (K
 * counted by a clean run; sampled evenly past AF_MAX_RUNS) a fresh child
 * runs the scenario with the n-th of them failing (ENOMEM, EAGAIN, EMFILE).
 * The child must return an error or succeed: never crash, abort, hang,
 * deliver wrong bytes, leak what it allocated or a descriptor after it
 * undid everything.
 *
 *     lc_alloc_fail <scenario> [from]   (lc_alloc_fail list: the scenarios)
 *
 * With "from", every call from the n-th on fails too (memory stays short):
 * the unwinding itself, and every teardown after it, meet failures.
 *
 * How: the test links the shared library and defines malloc, calloc,
 * realloc, strdup, strndup, posix_memalign, aligned_alloc, pthread_create,
 * socket, accept4, eventfd, epoll_create1, memfd_create, open, fopen and
 * mmap itself (exported), so the library's calls to them come here through
 * its PLT; a call fails only when its return address lies inside the
 * library's mapping, never one of libc's, libzmq's, libcurl's or UCX's
 * own (they abort on OOM, which is not ours to test). free is defined too,
 * to keep the set of the library's live blocks: after the scenario undid
 * everything, a failing run may hold no more of them than the clean run.
 *
 * Skipped (77) under AddressSanitizer, ThreadSanitizer and valgrind, whose
 * allocators this would bypass. Knobs (environment): AF_MAX_RUNS (runs per
 * scenario, default 300), AF_JOBS (children at once, default 4),
 * AF_BUDGET_S (stop starting runs after this, default 45), AF_ONLY (run
 * just that n), AF_ONLY_FN (count and fail only the calls of that function,
 * "pthread_create" say: its n-th call is then the same call in every run),
 * AF_VERBOSE=1 (a line for every n, not only the bad ones).
 * Exit: 0 pass, 1 a bad outcome, 77 skipped.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "alloc_fail.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define AF_SANITIZED 1
#else
#define AF_SANITIZED 0
#endif

/* ---- what a child reports, in memory shared with the parent ---- */

typedef struct af_slot {
	unsigned long calls; /* injectable calls seen */
	unsigned long site;  /* the failed call's return address, library-relative */
	char fn[16];         /* the failed function */
	char stage[48];      /* the public call in progress */
	char call[48];       /* the first public call that failed */
	int rc;              /* its code */
	int reason;          /* lc_last_error named a reason for it */
	long live;           /* the library's live blocks after undoing everything */
	int fds;             /* descriptors open after, minus before */
	char why[200];       /* af_broken's text, or the last warning logged */
	char log[200];
	char held[200]; /* allocation sites of the blocks still held */
} af_slot_t;

static af_slot_t *slot;
static uintptr_t lib_lo, lib_hi, lib_base;
static volatile int mode; /* 0 off, 1 count, 2 count and fail the fail_at-th */
static unsigned long fail_at;
static int sticky;          /* "from": every call from the fail_at-th on fails */
static const char *only_fn; /* AF_ONLY_FN: count and fail only calls of this one */

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

__attribute__((unused)) static int inject(const void *ra, const char *fn)
{
	if (!mode || (uintptr_t)ra < lib_lo || (uintptr_t)ra >= lib_hi)
		return 0;
	if (only_fn && strcmp(fn, only_fn))
		return 0;
	unsigned long n = __atomic_add_fetch(&slot->calls, 1, __ATOMIC_RELAXED);
	if (mode != 2 || n < fail_at || (n > fail_at && !sticky))
		return 0;
	if (n > fail_at)
		return 1;
	slot->site = (uintptr_t)ra - lib_base;
	snprintf(slot->fn, sizeof slot->fn, "%s", fn);
	return 1;
}

__attribute__((unused)) static int from_lib(const void *ra)
{
	return mode && (uintptr_t)ra >= lib_lo && (uintptr_t)ra < lib_hi;
}

/* ---- the library's live blocks: linear probing, backward-shift delete ---- */

#define TRACK_BITS 20
#define TRACK_SLOTS (1ul << TRACK_BITS)
static uintptr_t track[TRACK_SLOTS];
static uintptr_t track_ra[TRACK_SLOTS]; /* who allocated it, library-relative */
static long track_live;
static int track_busy;

static void track_lock(void)
{
	while (__atomic_exchange_n(&track_busy, 1, __ATOMIC_ACQUIRE))
		sched_yield();
}

static void track_unlock(void)
{
	__atomic_store_n(&track_busy, 0, __ATOMIC_RELEASE);
}

static size_t track_hash(uintptr_t p)
{
	return (size_t)((p >> 4) * 0x9e3779b97f4a7c15ull >> (64 - TRACK_BITS));
}

__attribute__((unused)) static void track_add(void *p, const void *ra)
{
	if (!p)
		return;
	track_lock();
	if (track_live < (long)(TRACK_SLOTS / 2)) {
		size_t i = track_hash((uintptr_t)p);
		while (track[i])
			i = (i + 1) & (TRACK_SLOTS - 1);
		track[i] = (uintptr_t)p;
		track_ra[i] = (uintptr_t)ra - lib_base;
		track_live++;
	}
	track_unlock();
}

__attribute__((unused)) static int track_del(void *p)
{
	if (!p || !__atomic_load_n(&track_live, __ATOMIC_RELAXED))
		return 0;
	track_lock();
	size_t i = track_hash((uintptr_t)p);
	while (track[i] && track[i] != (uintptr_t)p)
		i = (i + 1) & (TRACK_SLOTS - 1);
	int found = track[i] != 0;
	if (found) {
		track_live--;
		for (size_t j = i;;) { /* shift the cluster back over the hole */
			track[i] = 0;
			for (;;) {
				j = (j + 1) & (TRACK_SLOTS - 1);
				if (!track[j])
					goto done;
				size_t k = track_hash(track[j]);
				if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
					continue;
				break;
			}
			track[i] = track[j];
			track_ra[i] = track_ra[j];
			i = j;
		}
	}
done:
	track_unlock();
	return found;
}

/* ---- the interposed calls (not in sanitizer builds: their runtime owns
 * malloc, and a definition here would take it over before main runs) ---- */
#if !AF_SANITIZED

#define RA __builtin_return_address(0)

void *malloc(size_t n)
{
	if (inject(RA, "malloc")) {
		errno = ENOMEM;
		return NULL;
	}
	void *p = __libc_malloc(n);
	if (from_lib(RA))
		track_add(p, RA);
	return p;
}

void *calloc(size_t n, size_t m)
{
	if (inject(RA, "calloc")) {
		errno = ENOMEM;
		return NULL;
	}
	void *p = __libc_calloc(n, m);
	if (from_lib(RA))
		track_add(p, RA);
	return p;
}

void *realloc(void *p, size_t n)
{
	if (inject(RA, "realloc")) {
		errno = ENOMEM;
		return NULL;
	}
	int tracked = track_del(p);
	void *q = __libc_realloc(p, n);
	if (!q && n && tracked)
		track_add(p, RA); /* p stays valid (its first allocator forgotten) */
	else if (q && (tracked || from_lib(RA)))
		track_add(q, RA);
	return q;
}

void free(void *p)
{
	track_del(p);
	__libc_free(p);
}

static char *dup_n(const char *s, size_t n, const void *ra)
{
	/* n is (size_t)-1 for strdup: strlen, which GCC's bound check on
	 * strnlen (-Wstringop-overread at -O3) accepts. */
	size_t len = n == (size_t)-1 ? strlen(s) : strnlen(s, n);
	char *d = __libc_malloc(len + 1);
	if (!d) {
		errno = ENOMEM;
		return NULL;
	}
	memcpy(d, s, len);
	d[len] = '\0';
	if (from_lib(ra))
		track_add(d, ra);
	return d;
}

char *strdup(const char *s)
{
	if (inject(RA, "strdup")) {
		errno = ENOMEM;
		return NULL;
	}
	return dup_n(s, (size_t)-1, RA);
}

char *strndup(const char *s, size_t n)
{
	if (inject(RA, "strndup")) {
		errno = ENOMEM;
		return NULL;
	}
	return dup_n(s, n, RA);
}

int posix_memalign(void **out, size_t align, size_t n)
{
	if (inject(RA, "posix_memalign"))
		return ENOMEM;
	if (align < sizeof(void *) || (align & (align - 1)))
		return EINVAL;
	void *p = __libc_memalign(align, n);
	if (!p)
		return ENOMEM;
	if (from_lib(RA))
		track_add(p, RA);
	*out = p;
	return 0;
}

void *aligned_alloc(size_t align, size_t n)
{
	if (inject(RA, "aligned_alloc")) {
		errno = ENOMEM;
		return NULL;
	}
	void *p = __libc_memalign(align, n);
	if (from_lib(RA))
		track_add(p, RA);
	return p;
}

/* The rest are found once, before anything is armed. */
static int (*real_pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
static int (*real_socket)(int, int, int);
static int (*real_accept4)(int, struct sockaddr *, socklen_t *, int);
static int (*real_eventfd)(unsigned, int);
static int (*real_epoll_create1)(int);
static int (*real_memfd_create)(const char *, unsigned);
static int (*real_open)(const char *, int, ...);
static FILE *(*real_fopen)(const char *, const char *);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);

static void *next(const char *name)
{
	void *f = dlsym(RTLD_NEXT, name);
	if (!f) {
		fprintf(stderr, "alloc_fail: dlsym(%s): %s\n", name, dlerror());
		abort();
	}
	return f;
}

#define RESOLVE(name)                                                                              \
	do {                                                                                       \
		if (!real_##name)                                                                  \
			*(void **)&real_##name = next(#name);                                      \
	} while (0)

static void resolve_all(void)
{
	RESOLVE(pthread_create);
	RESOLVE(socket);
	RESOLVE(accept4);
	RESOLVE(eventfd);
	RESOLVE(epoll_create1);
	RESOLVE(memfd_create);
	RESOLVE(open);
	RESOLVE(fopen);
	RESOLVE(mmap);
}

int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
	RESOLVE(pthread_create);
	if (inject(RA, "pthread_create"))
		return EAGAIN;
	return real_pthread_create(t, a, fn, arg);
}

#define FAIL_FD(name, err)                                                                         \
	do {                                                                                       \
		RESOLVE(name);                                                                     \
		if (inject(RA, #name)) {                                                           \
			errno = (err);                                                             \
			return -1;                                                                 \
		}                                                                                  \
	} while (0)

int socket(int domain, int type, int proto)
{
	FAIL_FD(socket, EMFILE);
	return real_socket(domain, type, proto);
}

int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	FAIL_FD(accept4, EMFILE);
	return real_accept4(fd, sa, len, flags);
}

int eventfd(unsigned init, int flags)
{
	FAIL_FD(eventfd, EMFILE);
	return real_eventfd(init, flags);
}

int epoll_create1(int flags)
{
	FAIL_FD(epoll_create1, EMFILE);
	return real_epoll_create1(flags);
}

int memfd_create(const char *name, unsigned flags)
{
	FAIL_FD(memfd_create, EMFILE);
	return real_memfd_create(name, flags);
}

int open(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	int m = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, int) : 0;
	va_end(ap);
	FAIL_FD(open, EMFILE);
	return real_open(path, flags, m);
}

FILE *fopen(const char *path, const char *how)
{
	RESOLVE(fopen);
	if (inject(RA, "fopen")) {
		errno = EMFILE;
		return NULL;
	}
	return real_fopen(path, how);
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	RESOLVE(mmap);
	if (inject(RA, "mmap")) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	return real_mmap(addr, len, prot, flags, fd, off);
}

#else
static void resolve_all(void)
{
}
#endif

/* ---- the library's mapping ---- */

static int find_lib(struct dl_phdr_info *info, size_t size, void *arg)
{
	const Dl_info *want = arg;
	if ((void *)info->dlpi_addr != want->dli_fbase &&
	    !(info->dlpi_name && !strcmp(info->dlpi_name, want->dli_fname)))
		return 0;
	uintptr_t lo = UINTPTR_MAX, hi = 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uintptr_t a = info->dlpi_addr + ph->p_vaddr;
		lo = a < lo ? a : lo;
		hi = a + ph->p_memsz > hi ? a + ph->p_memsz : hi;
	}
	lib_lo = lo;
	lib_hi = hi;
	lib_base = info->dlpi_addr;
	return 1;
}

/* ---- the child's side ---- */

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

uint64_t af_now_ms(void)
{
	return now_ms();
}

void af_stage(const char *what)
{
	snprintf(slot->stage, sizeof slot->stage, "%s", what);
}

int af_failed(const char *call, int rc)
{
	if (!slot->call[0]) {
		snprintf(slot->call, sizeof slot->call, "%s", call);
		slot->rc = rc;
		const char *t = lc_last_error();
		slot->reason = t && t[0] && lc_last_error_code() == rc;
		if (!t)
			af_broken("%s: lc_last_error() returned NULL", call);
	}
	return AF_ERROR;
}

int af_broken(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (!slot->why[0])
		vsnprintf(slot->why, sizeof slot->why, fmt, ap);
	va_end(ap);
	return AF_BROKEN;
}

static void on_log(lc_log_level_t level, const char *line, void *arg)
{
	if (level <= LC_LOG_WARN)
		snprintf(slot->log, sizeof slot->log, "%s", line);
}

static int count_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void child(const af_scenario_t *s, unsigned long n)
{
	signal(SIGALRM, SIG_DFL);
	alarm((unsigned)s->deadline_s);
	lc_log_set_handler(on_log, NULL);
	lc_log_set_level(LC_LOG_DEBUG);
	int fds = count_fds();
	fail_at = n;
	mode = n ? 2 : 1;
	int rc = s->run();
	mode = 0;
	/* Threads the library ended may still be exiting. */
	for (int i = 0; i < 50 && count_fds() > fds; i++)
		usleep(10000);
	slot->fds = count_fds() - fds;
	slot->live = __atomic_load_n(&track_live, __ATOMIC_RELAXED);
	/* Where the blocks still held were allocated, for the report. */
	size_t at = 0;
	for (size_t i = 0; i < TRACK_SLOTS && slot->live && at + 24 < sizeof slot->held; i++)
		if (track[i])
			at += (size_t)snprintf(slot->held + at, sizeof slot->held - at,
					       " lib+0x%lx", (unsigned long)track_ra[i]);
	/* exit, not _exit: in coverage builds the shared library's own copy of
	 * gcov dumps its counters from its destructor (its symbols are local:
	 * the executable's __gcov_dump cannot reach them). */
	exit(rc);
}

/* ---- the parent's side ---- */

typedef struct run {
	pid_t pid;
	unsigned long n;
} run_t;

static int env_int(const char *name, int def)
{
	const char *v = getenv(name);
	return v && *v ? atoi(v) : def;
}

static int bad;
static long clean_live;
static int verbose;

static void report(const af_slot_t *r, unsigned long n, int st)
{
	char what[400];
	int worst = 0;
	if (WIFSIGNALED(st)) {
		int sig = WTERMSIG(st);
		snprintf(what, sizeof what, "%s in %s (last log: %s)",
			 sig == SIGALRM ? "HANG" : strsignal(sig), r->stage, r->log);
		worst = 1;
	} else if (WEXITSTATUS(st) == AF_BROKEN) {
		snprintf(what, sizeof what, "BROKEN: %s", r->why);
		worst = 1;
	} else if (WEXITSTATUS(st) == AF_ERROR) {
		snprintf(what, sizeof what, "error %s from %s%s", lc_err_name(r->rc), r->call,
			 r->reason ? " (with a reason)" : "");
	} else if (WEXITSTATUS(st) == AF_SUCCESS) {
		snprintf(what, sizeof what, "success");
	} else {
		snprintf(what, sizeof what, "exit %d", WEXITSTATUS(st));
		worst = 1;
	}
	if (!worst && WIFEXITED(st) && r->fds > 0) {
		snprintf(what + strlen(what), sizeof what - strlen(what), "; LEAK: %d descriptors",
			 r->fds);
		worst = 1;
	}
	if (!worst && WIFEXITED(st) && r->live > clean_live) {
		snprintf(what + strlen(what), sizeof what - strlen(what),
			 "; LEAK: %ld blocks (clean run %ld), allocated at%s", r->live - clean_live,
			 clean_live, r->held);
		worst = 1;
	}
	bad |= worst;
	if (worst || verbose)
		printf("n=%lu %s@lib+0x%lx: %s\n", n, r->fn[0] ? r->fn : "-", r->site, what);
}

static pid_t start(const af_scenario_t *s, af_slot_t *r, unsigned long n)
{
	memset(r, 0, sizeof *r);
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid == 0) {
		slot = r;
		child(s, n);
	}
	return pid;
}

int main(int argc, char **argv)
{
	const char *name = argc > 1 ? argv[1] : "list";
	const af_scenario_t *s = NULL;
	for (const af_scenario_t *i = af_scenarios; i->name; i++)
		if (!strcmp(name, i->name))
			s = i;
	if (!s) {
		for (const af_scenario_t *i = af_scenarios; i->name; i++)
			printf("%s\n", i->name);
		return strcmp(name, "list") ? 1 : 0;
	}
	sticky = argc > 2 && !strcmp(argv[2], "from");
	only_fn = getenv("AF_ONLY_FN");
	if (only_fn && !*only_fn)
		only_fn = NULL;
	const char *pre = getenv("LD_PRELOAD");
	if (AF_SANITIZED || (pre && strstr(pre, "vgpreload"))) {
		fprintf(stderr, "skip: a sanitizer or valgrind owns malloc here\n");
		return AF_SKIP;
	}
	resolve_all();
	Dl_info di;
	if (!dladdr((void *)lc_version, &di) || !dl_iterate_phdr(find_lib, &di) || !lib_hi) {
		fprintf(stderr, "alloc_fail: cannot find liblayercake.so's mapping\n");
		return 1;
	}
	/* Short deadlines, so that a run whose failure is noticed by a timeout
	 * ends well inside its alarm (the caller's environment wins). */
	static const char *const knobs[][2] = {
		{"LAYERCAKE_CONNECT_TIMEOUT_MS", "1500"},
		{"LAYERCAKE_BOOTSTRAP_TIMEOUT_MS", "3000"},
		{"LAYERCAKE_WAITING_TIMEOUT_MS", "5000"},
		{"LAYERCAKE_TRANSFER_TIMEOUT_MS", "5000"},
		{"LAYERCAKE_LAYER_TIMEOUT_MS", "5000"},
		{"LAYERCAKE_METADATA_TIMEOUT_MS", "5000"},
		{"LAYERCAKE_HEARTBEAT_INTERVAL_MS", "500"},
		{"LAYERCAKE_P_REPLY_MS", "1000"},
		{"LAYERCAKE_BOOTSTRAP_REQUEST_MS", "1000"},
		{"LAYERCAKE_PROGRESS_TIMEOUT_MS", "3000"},
	};
	for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++)
		setenv(knobs[i][0], knobs[i][1], 0);
	verbose = env_int("AF_VERBOSE", 0);
	int jobs = env_int("AF_JOBS", 4);
	jobs = jobs < 1 ? 1 : jobs > 16 ? 16 : jobs;
	af_slot_t *slots = mmap(NULL, sizeof(af_slot_t) * (size_t)jobs, PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (slots == MAP_FAILED)
		return 1;

	/* The clean run: what K is, and what the library holds after it. */
	int st;
	pid_t pid = start(s, &slots[0], 0);
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return 1;
	if (WIFEXITED(st) && WEXITSTATUS(st) == AF_SKIP) {
		fprintf(stderr, "skip: %s: %s\n", s->name, slots[0].why);
		return AF_SKIP;
	}
	unsigned long k = slots[0].calls;
	clean_live = slots[0].live;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != AF_SUCCESS || slots[0].fds > 0) {
		printf("clean run: ");
		report(&slots[0], 0, st);
		printf("%s: the clean run failed (exit %d, signal %d, %d descriptors left): %s %s "
		       "(last log: %s)\n",
		       s->name, WIFEXITED(st) ? WEXITSTATUS(st) : -1,
		       WIFSIGNALED(st) ? WTERMSIG(st) : 0, slots[0].fds, slots[0].why,
		       slots[0].call, slots[0].log);
		return 1;
	}
	int max = env_int("AF_MAX_RUNS", 300);
	unsigned long runs = k < (unsigned long)max ? k : (unsigned long)max;
	unsigned long only = (unsigned long)env_int("AF_ONLY", 0);
	if (only)
		runs = 1;
	printf("%s: %lu injectable calls from the library (%ld blocks live after), %lu runs, "
	       "%d at once, failing %s\n",
	       s->name, k, clean_live, runs, jobs,
	       sticky ? "every call from the n-th on" : "the n-th call");

	/* The n-th of `runs` evenly spread over 1..k, deterministically. */
	run_t *live = calloc((size_t)jobs, sizeof *live);
	uint64_t t0 = now_ms(), budget = (uint64_t)env_int("AF_BUDGET_S", 45) * 1000;
	unsigned long next_i = 0, done = 0, errors = 0, successes = 0, reasons = 0;
	int running = 0;
	while (next_i < runs || running) {
		while (next_i < runs && running < jobs && now_ms() - t0 < budget) {
			unsigned long n = only        ? only
					  : runs == 1 ? 1
						      : 1 + next_i * (k - 1) / (runs - 1);
			int j = 0;
			while (live[j].pid)
				j++;
			live[j].pid = start(s, &slots[j], n);
			live[j].n = n;
			next_i++;
			running++;
		}
		if (!running)
			break;
		pid = wait(&st);
		for (int j = 0; j < jobs; j++)
			if (pid > 0 && live[j].pid == pid) {
				report(&slots[j], live[j].n, st);
				errors += WIFEXITED(st) && WEXITSTATUS(st) == AF_ERROR;
				reasons += WIFEXITED(st) && WEXITSTATUS(st) == AF_ERROR &&
					   slots[j].reason;
				successes += WIFEXITED(st) && WEXITSTATUS(st) == AF_SUCCESS;
				live[j].pid = 0;
				running--;
				done++;
			}
	}
	printf("%s: %lu of %lu runs in %.1f s: %lu errors (%lu with a reason), %lu successes; %s\n",
	       s->name, done, runs, (double)(now_ms() - t0) / 1e3, errors, reasons, successes,
	       bad ? "FAILED" : "every run unwound cleanly");
	if (done < runs)
		printf("%s: the time budget (AF_BUDGET_S) ran out: %lu runs not done\n", s->name,
		       runs - done);
	return bad ? 1 : 0;
}
