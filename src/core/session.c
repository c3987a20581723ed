/* Session health and the table of sessions by name. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/session.h"

void lc__session_fail(lc__session_t *s, uint64_t now_ns, const char *reason)
{
	s->failures++;
	s->failed_at_ns = now_ns ? now_ns : 1;
	lc__reason(s->reason, sizeof(s->reason), "%s", reason ? reason : "failed");
	LC__WARN("session %s failed (%llu failures): %s", s->name, (unsigned long long)s->failures,
		 s->reason);
}

bool lc__session_blocked(lc__session_t *s, uint64_t now_ns, uint64_t ttl_ns)
{
	if (!s->failed_at_ns || !ttl_ns)
		return false;
	if (now_ns - s->failed_at_ns < ttl_ns)
		return true;
	LC__INFO("session %s: failure block expired", s->name);
	s->failed_at_ns = 0;
	return false;
}

void lc__session_clear(lc__session_t *s)
{
	if (s->failed_at_ns)
		LC__INFO("session %s registered again: failure block cleared", s->name);
	s->failed_at_ns = 0;
	s->reason[0] = '\0';
}

lc__session_t *lc__session_find(const lc__session_table_t *t, const char *name)
{
	if (!name)
		return NULL;
	for (size_t i = 0; i < t->count; i++)
		if (!strcmp(t->items[i]->name, name))
			return t->items[i];
	return NULL;
}

int lc__session_add(lc__session_table_t *t, const char *name, lc__session_t **out)
{
	lc__session_t *s;
	if (!name || !*name)
		return -EINVAL;
	if (lc__session_find(t, name))
		return -EEXIST;
	if (t->count == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 8;
		lc__session_t **items = realloc(t->items, cap * sizeof(*items));
		if (!items)
			return -ENOMEM;
		t->items = items;
		t->cap = cap;
	}
	s = calloc(1, sizeof(*s));
	if (!s || !(s->name = strdup(name))) {
		free(s);
		return -ENOMEM;
	}
	t->items[t->count++] = s;
	*out = s;
	return 0;
}

void lc__session_remove(lc__session_table_t *t, lc__session_t *s)
{
	for (size_t i = 0; i < t->count; i++)
		if (t->items[i] == s) {
			t->items[i] = t->items[--t->count];
			break;
		}
	free(s->name);
	free(s);
}

void lc__session_table_fini(lc__session_table_t *t)
{
	while (t->count)
		lc__session_remove(t, t->items[0]);
	free(t->items);
	memset(t, 0, sizeof(*t));
}
