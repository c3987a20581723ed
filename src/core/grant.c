/* Grant table: a hash map from room to sorted, merged byte ranges. What
 * landed in each room is counted by the entry's lc__landed_t (landed.c). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "core/grant.h"
#include "core/idmap.h"
#include "core/landed.h"

typedef struct range {
	uint32_t region;
	uint64_t offset;
	uint64_t length;
} range_t;

struct lc__grant_room {
	uint64_t room;
	range_t *ranges; /* sorted by (region, offset), merged; under table lock + mu */
	size_t n, cap;
	/* The token ids of the writers the room is bound to (none: every
	 * writer), under the table lock. */
	uint64_t *writers;
	uint32_t nwriters, writers_cap;
	_Atomic int refs;    /* table's ref (while mapped) + receivers' refs */
	_Atomic int active;  /* copies in progress */
	_Atomic int revoked; /* set once; entry leaves the map at the same time */
	/* Accounting (decode side). granted: bytes of the merged ranges. The
	 * rest is under mu: what landed, each granted byte once. */
	_Atomic uint64_t granted;
	pthread_mutex_t mu;
	size_t ivmax; /* intervals allowed beyond one per range */
	lc__landed_t landed;
};

struct lc__grant_table {
	pthread_mutex_t lock;
	lc__idmap_t rooms;      /* room id -> lc__grant_room_t (D's own grants: no cap) */
	_Atomic uint64_t ivmax; /* for rooms created from now on */
};

int lc__grant_table_create(lc__grant_table_t **out)
{
	lc__grant_table_t *t = calloc(1, sizeof *t);
	if (!t)
		return -ENOMEM;
	lc__idmap_init(&t->rooms, 0);
	pthread_mutex_init(&t->lock, NULL);
	atomic_init(&t->ivmax, 65536);
	*out = t;
	return 0;
}

void lc__grant_set_intervals_max(lc__grant_table_t *t, uint64_t n)
{
	atomic_store(&t->ivmax, n ? n : 1);
}

static void room_free(lc__grant_room_t *g)
{
	pthread_mutex_destroy(&g->mu);
	lc__landed_fini(&g->landed);
	free(g->ranges);
	free(g->writers);
	free(g);
}

void lc__grant_put(lc__grant_room_t *g)
{
	if (atomic_fetch_sub(&g->refs, 1) == 1)
		room_free(g);
}

void lc__grant_table_destroy(lc__grant_table_t *t)
{
	if (!t)
		return;
	size_t it = 0;
	uint64_t id;
	void *v;
	while (lc__idmap_next(&t->rooms, &it, &id, &v)) {
		lc__grant_room_t *g = v;
		atomic_store(&g->revoked, 1);
		lc__grant_put(g);
	}
	lc__idmap_fini(&t->rooms);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

/* Under lock. */
static lc__grant_room_t *find(lc__grant_table_t *t, uint64_t room)
{
	return lc__idmap_get(&t->rooms, room);
}

/* Under lock: the room's entry if it has a live grant (a range: a room
 * only bound so far has none to count). */
static lc__grant_room_t *find_granted(lc__grant_table_t *t, uint64_t room)
{
	lc__grant_room_t *g = find(t, room);
	return g && g->n ? g : NULL;
}

static int range_cmp(const range_t *a, uint32_t region, uint64_t offset)
{
	if (a->region != region)
		return a->region < region ? -1 : 1;
	if (a->offset != offset)
		return a->offset < offset ? -1 : 1;
	return 0;
}

/* Index of the last range <= (region, offset), or -1. */
static ptrdiff_t floor_range(const lc__grant_room_t *g, uint32_t region, uint64_t offset)
{
	ptrdiff_t lo = 0, hi = (ptrdiff_t)g->n - 1, best = -1;
	while (lo <= hi) {
		ptrdiff_t mid = lo + (hi - lo) / 2;
		if (range_cmp(&g->ranges[mid], region, offset) <= 0) {
			best = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return best;
}

/* Room for one more range, so that room_add_range cannot fail. */
static int ranges_reserve(lc__grant_room_t *g)
{
	if (g->n < g->cap)
		return 0;
	size_t ncap = g->cap ? g->cap * 2 : 4;
	range_t *nr = realloc(g->ranges, ncap * sizeof *nr);
	if (!nr)
		return -ENOMEM;
	g->ranges = nr;
	g->cap = ncap;
	return 0;
}

/* The parts of [offset, end) of region not granted yet are about to be:
 * the landed count's watched layers have that much more to land. */
static void tell_granted(lc__grant_room_t *g, uint32_t region, uint64_t offset, uint64_t end)
{
	uint64_t at = offset;
	ptrdiff_t i = floor_range(g, region, offset);
	for (size_t k = i < 0 ? 0 : (size_t)i; k < g->n && at < end; k++) {
		const range_t *r = &g->ranges[k];
		if (r->region != region) {
			if (r->region > region)
				break;
			continue;
		}
		if (r->offset + r->length <= at)
			continue;
		if (r->offset >= end)
			break;
		if (r->offset > at)
			lc__landed_granted(&g->landed, region, at, r->offset);
		at = r->offset + r->length;
	}
	if (at < end)
		lc__landed_granted(&g->landed, region, at, end);
}

/* Merge [offset, offset+length) of region in; ranges_reserve came first. */
static void room_add_range(lc__grant_room_t *g, uint32_t region, uint64_t offset, uint64_t length)
{
	uint64_t end = offset + length;
	uint64_t before = 0; /* bytes the touched ranges held: granted grows by the rest */
	ptrdiff_t i = floor_range(g, region, offset);
	/* Merge with the range before if it touches or overlaps. */
	if (i >= 0 && g->ranges[i].region == region &&
	    g->ranges[i].offset + g->ranges[i].length >= offset) {
		range_t *r = &g->ranges[i];
		before = r->length;
		if (r->offset + r->length < end)
			r->length = end - r->offset;
	} else {
		i++;
		memmove(&g->ranges[i + 1], &g->ranges[i], (g->n - (size_t)i) * sizeof *g->ranges);
		g->ranges[i] = (range_t){region, offset, length};
		g->n++;
	}
	/* Absorb following ranges that the grown range now touches. */
	range_t *r = &g->ranges[i];
	size_t j = (size_t)i + 1;
	while (j < g->n && g->ranges[j].region == region &&
	       g->ranges[j].offset <= r->offset + r->length) {
		uint64_t jend = g->ranges[j].offset + g->ranges[j].length;
		before += g->ranges[j].length;
		if (jend > r->offset + r->length)
			r->length = jend - r->offset;
		j++;
	}
	size_t absorbed = j - (size_t)i - 1;
	if (absorbed) {
		memmove(&g->ranges[i + 1], &g->ranges[j], (g->n - j) * sizeof *g->ranges);
		g->n -= absorbed;
	}
	atomic_fetch_add(&g->granted, r->length - before);
}

/* Under lock: the room's entry, made (with no range) when it has none. */
static int room_get(lc__grant_table_t *t, uint64_t room, lc__grant_room_t **out)
{
	lc__grant_room_t *g = find(t, room);
	if (!g) {
		g = calloc(1, sizeof *g);
		if (!g)
			return -ENOMEM;
		g->room = room;
		g->ivmax = (size_t)atomic_load(&t->ivmax);
		atomic_init(&g->refs, 1);
		pthread_mutex_init(&g->mu, NULL);
		lc__landed_init(&g->landed);
		int rc = lc__idmap_put(&t->rooms, room, g);
		if (rc) {
			room_free(g);
			return rc;
		}
	}
	*out = g;
	return 0;
}

int lc__grant_issue(lc__grant_table_t *t, uint64_t room, uint32_t region, uint64_t offset,
		    uint64_t length)
{
	lc__grant_room_t *g;
	if (length == 0 || offset + length < offset)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	int rc = room_get(t, room, &g);
	if (!rc) {
		pthread_mutex_lock(&g->mu); /* the cap reads n; the watch */
		if (!(rc = ranges_reserve(g))) {
			tell_granted(g, region, offset, offset + length);
			room_add_range(g, region, offset, length);
		}
		pthread_mutex_unlock(&g->mu);
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

/* Under lock: whether writer `who` may write g's room. */
static bool writer_ok(const lc__grant_room_t *g, uint64_t who)
{
	if (!g->nwriters)
		return true;
	for (uint32_t i = 0; i < g->nwriters; i++)
		if (g->writers[i] == who)
			return true;
	return false;
}

int lc__grant_bind(lc__grant_table_t *t, uint64_t room, uint64_t who)
{
	lc__grant_room_t *g;
	if (!who)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	int rc = room_get(t, room, &g);
	if (!rc && !(g->nwriters && writer_ok(g, who))) {
		if (g->nwriters == g->writers_cap) {
			uint32_t ncap = g->writers_cap ? g->writers_cap * 2 : 2;
			uint64_t *nw = realloc(g->writers, ncap * sizeof *nw);
			if (!nw)
				rc = -ENOMEM;
			else {
				g->writers = nw;
				g->writers_cap = ncap;
			}
		}
		if (!rc)
			g->writers[g->nwriters++] = who;
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

/* Under lock: unmap the entry; the caller drains and drops the table ref. */
static lc__grant_room_t *unmap(lc__grant_table_t *t, lc__grant_room_t *g)
{
	lc__idmap_del(&t->rooms, g->room);
	atomic_store(&g->revoked, 1);
	return g;
}

static void drain_and_put(lc__grant_room_t *g)
{
	/* A copy inside runs at memory speed on a bounded chunk; wait it out. */
	while (atomic_load(&g->active) > 0)
		sched_yield();
	lc__grant_put(g);
}

int lc__grant_revoke(lc__grant_table_t *t, uint64_t room)
{
	pthread_mutex_lock(&t->lock);
	lc__grant_room_t *g = find(t, room);
	if (!g) {
		pthread_mutex_unlock(&t->lock);
		return 0;
	}
	unmap(t, g);
	int n = (int)g->n;
	pthread_mutex_unlock(&t->lock);
	drain_and_put(g);
	return n;
}

int lc__grant_revoke_region(lc__grant_table_t *t, uint32_t region)
{
	int revoked = 0;
	for (;;) {
		lc__grant_room_t *victim = NULL;
		pthread_mutex_lock(&t->lock);
		size_t it = 0;
		uint64_t id;
		void *v;
		while (!victim && lc__idmap_next(&t->rooms, &it, &id, &v)) {
			lc__grant_room_t *g = v;
			for (size_t k = 0; k < g->n; k++) {
				if (g->ranges[k].region == region) {
					victim = unmap(t, g);
					break;
				}
			}
		}
		pthread_mutex_unlock(&t->lock);
		if (!victim)
			return revoked;
		drain_and_put(victim);
		revoked++;
	}
}

size_t lc__grant_rooms(lc__grant_table_t *t)
{
	pthread_mutex_lock(&t->lock);
	size_t n = lc__idmap_count(&t->rooms);
	pthread_mutex_unlock(&t->lock);
	return n;
}

int lc__grant_lookup(lc__grant_table_t *t, uint64_t room, uint64_t who, uint32_t region,
		     uint64_t offset, uint64_t length, lc__grant_room_t **out)
{
	int rc = LC_ERR_GRANT;
	if (offset + length < offset)
		return LC_ERR_GRANT;
	pthread_mutex_lock(&t->lock);
	lc__grant_room_t *g = find(t, room);
	if (g && !writer_ok(g, who)) {
		rc = LC_ERR_AUTH;
	} else if (g) {
		ptrdiff_t i = floor_range(g, region, offset);
		if (i >= 0 && g->ranges[i].region == region &&
		    offset + length <= g->ranges[i].offset + g->ranges[i].length) {
			atomic_fetch_add(&g->refs, 1);
			*out = g;
			rc = 0;
		}
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

bool lc__grant_enter(lc__grant_room_t *g)
{
	/* Announce, then check: revoke sets revoked, then waits for active. With
	 * sequentially consistent atomics one of the two sides sees the other. */
	atomic_fetch_add(&g->active, 1);
	if (atomic_load(&g->revoked)) {
		atomic_fetch_sub(&g->active, 1);
		return false;
	}
	return true;
}

void lc__grant_exit(lc__grant_room_t *g)
{
	atomic_fetch_sub(&g->active, 1);
}

int lc__grant_landed(lc__grant_room_t *g, uint32_t region, uint64_t offset, uint64_t length,
		     lc__grant_landing_t *out)
{
	*out = (lc__grant_landing_t){0};
	if (!length)
		return 0;
	pthread_mutex_lock(&g->mu);
	bool first = g->landed.twice == 0;
	int rc = lc__landed_add(&g->landed, region, offset, offset + length, g->n + g->ivmax,
				&out->twice, &out->broke);
	out->first_twice = first && out->twice;
	pthread_mutex_unlock(&g->mu);
	return rc;
}

static uint64_t overlap(uint64_t a, uint64_t b, uint64_t lo, uint64_t hi)
{
	a = LC__MAX(a, lo);
	b = LC__MIN(b, hi);
	return b > a ? b - a : 0;
}

/* Granted bytes of the room inside [lo, hi) of region. Under a lock. */
static uint64_t granted_in(const lc__grant_room_t *g, uint32_t region, uint64_t lo, uint64_t hi)
{
	uint64_t n = 0;
	ptrdiff_t i = floor_range(g, region, lo);
	for (size_t k = i < 0 ? 0 : (size_t)i;
	     k < g->n && (g->ranges[k].region < region ||
			  (g->ranges[k].region == region && g->ranges[k].offset < hi));
	     k++)
		if (g->ranges[k].region == region)
			n += overlap(g->ranges[k].offset, g->ranges[k].offset + g->ranges[k].length,
				     lo, hi);
	return n;
}

int lc__grant_watch(lc__grant_table_t *t, uint64_t room, const lc__landed_span_t *spans, size_t n,
		    uint32_t layers)
{
	uint64_t *need = malloc((n ? n : 1) * sizeof *need);
	if (!need)
		return -ENOMEM;
	int rc = LC_ERR_GRANT;
	pthread_mutex_lock(&t->lock);
	lc__grant_room_t *g = find_granted(t, room);
	if (g) {
		for (size_t i = 0; i < n; i++)
			need[i] = granted_in(g, spans[i].region, spans[i].lo, spans[i].hi);
		pthread_mutex_lock(&g->mu);
		rc = lc__landed_watch(&g->landed, spans, need, n, layers);
		pthread_mutex_unlock(&g->mu);
	}
	pthread_mutex_unlock(&t->lock);
	free(need);
	return rc;
}

int lc__grant_layers_ready(lc__grant_table_t *t, uint64_t room, uint32_t *out)
{
	int rc = LC_ERR_GRANT;
	pthread_mutex_lock(&t->lock);
	lc__grant_room_t *g = find_granted(t, room);
	if (g) {
		*out = lc__landed_ready(&g->landed);
		rc = 0;
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

int lc__grant_room_count(lc__grant_table_t *t, uint64_t room, lc__grant_count_t *out)
{
	int rc = LC_ERR_GRANT;
	pthread_mutex_lock(&t->lock);
	lc__grant_room_t *g = find_granted(t, room);
	if (g) {
		pthread_mutex_lock(&g->mu);
		*out = (lc__grant_count_t){.granted = atomic_load(&g->granted),
					   .covered = g->landed.covered,
					   .twice = g->landed.twice,
					   .intervals = g->landed.niv,
					   .broken = g->landed.broken != 0};
		pthread_mutex_unlock(&g->mu);
		rc = 0;
	}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

int lc__grant_covered(lc__grant_table_t *t, uint64_t room, uint32_t region, uint64_t offset,
		      uint64_t length, uint64_t *granted, uint64_t *covered)
{
	uint64_t lo = offset, hi = offset + length, gs = 0, cs = 0;
	if (hi < lo)
		return -EINVAL;
	pthread_mutex_lock(&t->lock);
	lc__grant_room_t *g = find_granted(t, room);
	if (!g) {
		pthread_mutex_unlock(&t->lock);
		return LC_ERR_GRANT;
	}
	gs = granted_in(g, region, lo, hi);
	pthread_mutex_lock(&g->mu);
	cs = lc__landed_in(&g->landed, region, lo, hi);
	pthread_mutex_unlock(&g->mu);
	pthread_mutex_unlock(&t->lock);
	*granted = gs;
	*covered = cs;
	return 0;
}

bool lc__grant_revoked(const lc__grant_room_t *g)
{
	return atomic_load(&g->revoked);
}
