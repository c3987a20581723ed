/* The id map (idmap.h). */
#include <errno.h>
#include <stdlib.h>

#include "core/idmap.h"

static char tomb;
#define TOMB ((void *)&tomb)

void lc__idmap_init(lc__idmap_t *m, size_t max)
{
	*m = (lc__idmap_t){.max = max};
}

void lc__idmap_fini(lc__idmap_t *m)
{
	free(m->ids);
	free(m->vals);
	*m = (lc__idmap_t){.max = m->max};
}

/* The slot holding id, or SIZE_MAX. */
static size_t find(const lc__idmap_t *m, uint64_t id)
{
	if (!m->cap)
		return SIZE_MAX;
	size_t mask = m->cap - 1, i = (size_t)lc__hash64(id) & mask;
	for (size_t probe = 0; probe < m->cap; probe++, i = (i + 1) & mask) {
		if (!m->vals[i])
			return SIZE_MAX;
		if (m->vals[i] != TOMB && m->ids[i] == id)
			return i;
	}
	return SIZE_MAX;
}

void *lc__idmap_get(const lc__idmap_t *m, uint64_t id)
{
	size_t i = find(m, id);
	return i == SIZE_MAX ? NULL : m->vals[i];
}

/* Rehash into ncap slots, dropping deleted ones. */
static int rehash(lc__idmap_t *m, size_t ncap)
{
	uint64_t *ids = malloc(ncap * sizeof *ids);
	void **vals = calloc(ncap, sizeof *vals);
	if (!ids || !vals) {
		free(ids);
		free(vals);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->vals[i] || m->vals[i] == TOMB)
			continue;
		size_t j = (size_t)lc__hash64(m->ids[i]) & (ncap - 1);
		while (vals[j])
			j = (j + 1) & (ncap - 1);
		ids[j] = m->ids[i];
		vals[j] = m->vals[i];
	}
	free(m->ids);
	free(m->vals);
	m->ids = ids;
	m->vals = vals;
	m->cap = ncap;
	m->used = m->live;
	return 0;
}

int lc__idmap_put(lc__idmap_t *m, uint64_t id, void *v)
{
	if (find(m, id) != SIZE_MAX)
		return -EEXIST;
	if (m->max && m->live >= m->max)
		return -ENOSPC;
	if ((m->used + 1) * 4 > m->cap * 3) {
		/* Grow when live entries fill half; else just drop the deleted. */
		size_t ncap = !m->cap ? 16 : (m->live + 1) * 2 > m->cap ? m->cap * 2 : m->cap;
		int rc = rehash(m, ncap);
		if (rc)
			return rc;
	}
	size_t mask = m->cap - 1, i = (size_t)lc__hash64(id) & mask;
	while (m->vals[i] && m->vals[i] != TOMB)
		i = (i + 1) & mask;
	if (!m->vals[i])
		m->used++;
	m->ids[i] = id;
	m->vals[i] = v;
	m->live++;
	return 0;
}

void *lc__idmap_del(lc__idmap_t *m, uint64_t id)
{
	size_t i = find(m, id);
	if (i == SIZE_MAX)
		return NULL;
	void *v = m->vals[i];
	m->vals[i] = TOMB;
	m->live--;
	return v;
}

bool lc__idmap_next(const lc__idmap_t *m, size_t *it, uint64_t *id, void **v)
{
	for (; *it < m->cap; (*it)++) {
		size_t i = *it;
		if (m->vals[i] && m->vals[i] != TOMB) {
			(*it)++;
			*id = m->ids[i];
			*v = m->vals[i];
			return true;
		}
	}
	return false;
}
