/* D's landed count of one room: covered intervals and the layer watch. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/common.h"
#include "core/landed.h"

void lc__landed_init(lc__landed_t *l)
{
	memset(l, 0, sizeof *l);
	atomic_init(&l->ready, 0);
}

static void watch_free(lc__landed_t *l)
{
	free(l->spans);
	free(l->reach);
	free(l->left);
	l->spans = NULL;
	l->reach = l->left = NULL;
	l->nspans = 0;
	l->layers = 0;
}

void lc__landed_fini(lc__landed_t *l)
{
	free(l->iv);
	watch_free(l);
}

/* Index of the last interval <= (region, lo), or -1. */
static ptrdiff_t floor_ival(const lc__landed_t *l, uint32_t region, uint64_t lo)
{
	ptrdiff_t a = 0, b = (ptrdiff_t)l->niv - 1, best = -1;
	while (a <= b) {
		ptrdiff_t mid = a + (b - a) / 2;
		const lc__landed_ival_t *v = &l->iv[mid];
		if (v->region < region || (v->region == region && v->lo <= lo)) {
			best = mid;
			a = mid + 1;
		} else {
			b = mid - 1;
		}
	}
	return best;
}

static uint64_t overlap(uint64_t a, uint64_t b, uint64_t lo, uint64_t hi)
{
	a = LC__MAX(a, lo);
	b = LC__MIN(b, hi);
	return b > a ? b - a : 0;
}

/* First span of region that may overlap [lo, ...): reach is nondecreasing
 * within a region, so the first with reach > lo. */
static size_t first_span(const lc__landed_t *l, uint32_t region, uint64_t lo)
{
	size_t a = 0, b = l->nspans;
	while (a < b) {
		size_t mid = a + (b - a) / 2;
		const lc__landed_span_t *s = &l->spans[mid];
		if (s->region < region || (s->region == region && l->reach[mid] <= lo))
			a = mid + 1;
		else
			b = mid;
	}
	return a;
}

static void advance_ready(lc__landed_t *l)
{
	uint32_t r = atomic_load_explicit(&l->ready, memory_order_relaxed);
	while (r < l->layers && l->left[r] == 0)
		r++;
	atomic_store_explicit(&l->ready, r, memory_order_release);
}

/* Bytes [lo, hi) of region became covered (add) or granted (!add): each
 * watched span they fall in moves its layer's left. */
static void spans_move(lc__landed_t *l, uint32_t region, uint64_t lo, uint64_t hi, bool add)
{
	for (size_t i = first_span(l, region, lo);
	     i < l->nspans && l->spans[i].region == region && l->spans[i].lo < hi; i++) {
		uint64_t o = overlap(l->spans[i].lo, l->spans[i].hi, lo, hi);
		uint64_t *left = &l->left[l->spans[i].layer];
		*left = add ? *left - LC__MIN(o, *left) : *left + o;
	}
}

/* A new interval at index i, within the cap. */
static int ival_insert(lc__landed_t *l, size_t i, lc__landed_ival_t v, size_t max_ivals)
{
	if (l->niv >= max_ivals)
		return -ENOSPC;
	if (l->niv == l->civ) {
		size_t ncap = l->civ ? l->civ * 2 : 8;
		lc__landed_ival_t *nv = realloc(l->iv, ncap * sizeof *nv);
		if (!nv)
			return -ENOMEM;
		l->iv = nv;
		l->civ = ncap;
	}
	memmove(&l->iv[i + 1], &l->iv[i], (l->niv - i) * sizeof *l->iv);
	l->iv[i] = v;
	l->niv++;
	return 0;
}

/* The gaps of [lo, hi) between the intervals [k0, k) (which overlap or
 * touch it) are newly covered: take them off the watched layers. */
static void gaps_landed(lc__landed_t *l, uint32_t region, uint64_t lo, uint64_t hi, size_t k0,
			size_t k)
{
	uint64_t at = lo;
	for (size_t j = k0; j < k && at < hi; j++) {
		if (l->iv[j].lo > at)
			spans_move(l, region, at, LC__MIN(l->iv[j].lo, hi), true);
		at = LC__MAX(at, l->iv[j].hi);
	}
	if (at < hi)
		spans_move(l, region, at, hi, true);
}

int lc__landed_add(lc__landed_t *l, uint32_t region, uint64_t lo, uint64_t hi, size_t max_ivals,
		   uint64_t *twice, bool *broke)
{
	uint64_t seen = 0;
	*twice = 0;
	*broke = false;
	if (l->broken)
		return l->broken;
	if (hi <= lo)
		return 0;
	/* The intervals [k0, k) touch or overlap [lo, hi): they merge into one. */
	ptrdiff_t f = floor_ival(l, region, lo);
	size_t k0 = f >= 0 && l->iv[f].region == region && l->iv[f].hi >= lo ? (size_t)f
									     : (size_t)(f + 1);
	size_t k = k0;
	for (; k < l->niv && l->iv[k].region == region && l->iv[k].lo <= hi; k++)
		seen += overlap(l->iv[k].lo, l->iv[k].hi, lo, hi);
	if (k == k0) {
		int rc = ival_insert(l, k0, (lc__landed_ival_t){lo, hi, region}, max_ivals);
		if (rc) {
			*broke = true;
			return l->broken = rc;
		}
		if (l->nspans)
			spans_move(l, region, lo, hi, true);
	} else {
		if (l->nspans && seen < hi - lo)
			gaps_landed(l, region, lo, hi, k0, k);
		lc__landed_ival_t *v = &l->iv[k0];
		v->lo = LC__MIN(v->lo, lo);
		v->hi = LC__MAX(l->iv[k - 1].hi, hi);
		memmove(&l->iv[k0 + 1], &l->iv[k], (l->niv - k) * sizeof *l->iv);
		l->niv -= k - k0 - 1;
	}
	l->covered += hi - lo - seen;
	l->twice += seen;
	*twice = seen;
	if (l->nspans)
		advance_ready(l);
	return 0;
}

uint64_t lc__landed_in(const lc__landed_t *l, uint32_t region, uint64_t lo, uint64_t hi)
{
	uint64_t n = 0;
	ptrdiff_t f = floor_ival(l, region, lo);
	for (size_t k = f < 0 ? 0 : (size_t)f;
	     k < l->niv &&
	     (l->iv[k].region < region || (l->iv[k].region == region && l->iv[k].lo < hi));
	     k++)
		if (l->iv[k].region == region)
			n += overlap(l->iv[k].lo, l->iv[k].hi, lo, hi);
	return n;
}

static int span_cmp(const void *a, const void *b)
{
	const lc__landed_span_t *x = a, *y = b;
	if (x->region != y->region)
		return x->region < y->region ? -1 : 1;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

int lc__landed_watch(lc__landed_t *l, const lc__landed_span_t *spans, const uint64_t *need,
		     size_t n, uint32_t layers)
{
	for (size_t i = 0; i < n; i++)
		if (spans[i].layer >= layers || spans[i].hi < spans[i].lo)
			return -EINVAL;
	lc__landed_span_t *s = malloc((n ? n : 1) * sizeof *s);
	uint64_t *reach = malloc((n ? n : 1) * sizeof *reach);
	uint64_t *left = calloc(layers ? layers : 1, sizeof *left);
	if (!s || !reach || !left) {
		free(s);
		free(reach);
		free(left);
		return -ENOMEM;
	}
	/* Each span's need, less what landed already, is its layer's. */
	for (size_t i = 0; i < n; i++) {
		uint64_t got = lc__landed_in(l, spans[i].region, spans[i].lo, spans[i].hi);
		left[spans[i].layer] += need[i] - LC__MIN(got, need[i]);
		s[i] = spans[i];
	}
	qsort(s, n, sizeof *s, span_cmp);
	for (size_t i = 0; i < n; i++)
		reach[i] = i && s[i - 1].region == s[i].region ? LC__MAX(reach[i - 1], s[i].hi)
							       : s[i].hi;
	watch_free(l);
	l->spans = s;
	l->reach = reach;
	l->nspans = n;
	l->left = left;
	l->layers = layers;
	atomic_store(&l->ready, 0);
	advance_ready(l);
	return 0;
}

void lc__landed_granted(lc__landed_t *l, uint32_t region, uint64_t lo, uint64_t hi)
{
	if (l->nspans && hi > lo)
		spans_move(l, region, lo, hi, false);
}

uint32_t lc__landed_ready(const lc__landed_t *l)
{
	return atomic_load_explicit(&l->ready, memory_order_acquire);
}
