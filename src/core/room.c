/* Room table (an id map) and the status machine. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/histogram.h"
#include "core/idmap.h"
#include "core/room.h"

static const char *const status_names[] = {"Failed",          "Bootstrapping", "Bootstrapped",
					   "WaitingForInput", "Transferring",  "Success"};

const char *lc_room_status_name(int status)
{
	if (status < 0 || status > LC_ROOM_SUCCESS)
		return "Unknown";
	return status_names[status];
}

const char *lc_fail_reason_name(int reason)
{
	switch (reason) {
#define LC__FAIL_NAME(name, value, text)                                                           \
	case value:                                                                                \
		return text;
		LC_FAIL_REASONS(LC__FAIL_NAME)
#undef LC__FAIL_NAME
	default:
		return "unknown";
	}
}

const char *lc_fail_reason_symbol(int reason)
{
	switch (reason) {
#define LC__FAIL_SYMBOL(name, value, text)                                                         \
	case value:                                                                                \
		return #name;
		LC_FAIL_REASONS(LC__FAIL_SYMBOL)
#undef LC__FAIL_SYMBOL
	default:
		return "LC_FAIL_UNKNOWN";
	}
}

int lc_fail_reason_count(void)
{
	return LC_FAIL_REASON_COUNT;
}

/* legal[from][to]: the only place that decides which changes may happen.
 * Statuses only grow; any unfinished status may fail; final ones stay. */
static const bool legal[6][6] = {
	/* to:              F  Bing Bed  WFI  Tr   S */
	[LC_ROOM_FAILED] = {0, 0, 0, 0, 0, 0},
	[LC_ROOM_BOOTSTRAPPING] = {1, 0, 1, 1, 1, 1},
	[LC_ROOM_BOOTSTRAPPED] = {1, 0, 0, 1, 1, 1},
	[LC_ROOM_WAITING_FOR_INPUT] = {1, 0, 0, 0, 1, 1},
	[LC_ROOM_TRANSFERRING] = {1, 0, 0, 0, 0, 1},
	[LC_ROOM_SUCCESS] = {0, 0, 0, 0, 0, 0},
};

bool lc__room_transition_legal(int from, int to)
{
	if (from < 0 || from > LC_ROOM_SUCCESS || to < 0 || to > LC_ROOM_SUCCESS)
		return false;
	return legal[from][to];
}

int lc__room_table_init(lc__room_table_t *t)
{
	memset(t, 0, sizeof(*t));
	/* No cap of its own: where a peer opens rooms (P's engine, for D's
	 * transfer infos), p_rooms_max refuses them first (engine/rooms.c). */
	lc__idmap_init(&t->map, 0);
	return 0;
}

static void room_free(lc__room_t *r)
{
	for (uint32_t i = 0; i < r->ndst; i++) {
		lc__room_dst_t *d = &r->dst[i];
		free(d->session_name);
		free(d->pages);
		free(d->state_slots);
		free(d->dst_mask);
		free(d->dst_local);
	}
	free(r->dst);
	free(r->metadata);
	free(r);
}

void lc__room_table_fini(lc__room_table_t *t)
{
	size_t it = 0;
	for (lc__room_t *r; (r = lc__room_next(t, &it));)
		room_free(r);
	lc__idmap_fini(&t->map);
	t->count = 0;
}

lc__room_t *lc__room_find(const lc__room_table_t *t, uint64_t id)
{
	return lc__idmap_get(&t->map, id);
}

lc__room_t *lc__room_next(const lc__room_table_t *t, size_t *it)
{
	uint64_t id;
	void *v;
	return lc__idmap_next(&t->map, it, &id, &v) ? v : NULL;
}

int lc__room_open(lc__room_table_t *t, uint64_t id, uint64_t now_ns, lc__room_t **out)
{
	lc__room_t *r;
	if (lc__room_find(t, id))
		return -EEXIST;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	int rc = lc__idmap_put(&t->map, id, r);
	if (rc) {
		free(r);
		return rc;
	}
	r->id = id;
	r->status = LC_ROOM_BOOTSTRAPPING;
	r->opened_ns = now_ns;
	t->count++;
	t->metrics.opened++;
	LC__DEBUG("room %llu: opened (Bootstrapping)", (unsigned long long)id);
	*out = r;
	return 0;
}

void lc__room_remove(lc__room_table_t *t, lc__room_t *r)
{
	if (lc__idmap_get(&t->map, r->id) == r) {
		lc__idmap_del(&t->map, r->id);
		t->count--;
	}
	room_free(r);
}

static void *dup_array(const void *src, size_t n, size_t elem, int *err)
{
	void *p;
	if (!n || !src)
		return NULL;
	p = malloc(n * elem);
	if (!p)
		*err = -ENOMEM;
	else
		memcpy(p, src, n * elem);
	return p;
}

int lc__room_add_dst(lc__room_t *r, const lc_dst_params_t *p, void *session)
{
	lc__room_dst_t *d;
	int err = 0;
	if (lc__room_final(r))
		return LC_ERR_STATE;
	/* A repeat first: its session is a destination already, whatever else
	 * the repeat says (P must not tell that session its room failed). */
	for (uint32_t i = 0; i < r->ndst; i++)
		if (r->dst[i].session_name && p->session &&
		    !strcmp(r->dst[i].session_name, p->session))
			return -EEXIST;
	if (!p->required_dst_count || (r->required && p->required_dst_count != r->required))
		return -EINVAL;
	if (r->required && r->ndst >= r->required)
		return LC_ERR_STATE;
	if (!r->dst) {
		r->dst = calloc(p->required_dst_count, sizeof(*r->dst));
		if (!r->dst)
			return -ENOMEM;
		r->required = p->required_dst_count;
	}
	d = &r->dst[r->ndst];
	memset(d, 0, sizeof(*d));
	d->dummy = p->is_dummy != 0;
	d->session = session;
	d->prefix_len = p->prefix_len;
	d->aux_index = p->aux_index;
	if (p->session && !(d->session_name = strdup(p->session)))
		err = -ENOMEM;
	d->pages = dup_array(p->pages, p->page_count, sizeof(int64_t), &err);
	d->page_count = d->pages ? p->page_count : 0;
	d->state_slots = dup_array(p->state_slots, p->state_slot_count, sizeof(int64_t), &err);
	d->state_slot_count = d->state_slots ? p->state_slot_count : 0;
	if (p->dst_mask) {
		d->dst_mask = dup_array(p->dst_mask, p->page_count, 1, &err);
		d->dst_local = dup_array(p->dst_local, p->dst_local_count, sizeof(int64_t), &err);
		d->dst_local_count = d->dst_local ? p->dst_local_count : 0;
	}
	if (err) {
		free(d->session_name);
		free(d->pages);
		free(d->state_slots);
		free(d->dst_mask);
		free(d->dst_local);
		memset(d, 0, sizeof(*d));
		return err;
	}
	r->ndst++;
	return 0;
}

int lc__room_state_apply(lc__room_metrics_t *m, const lc__room_view_t *v, int status,
			 int fail_reason, const char *reason, uint64_t now_ns)
{
	int old = *v->status;
	unsigned long long id = (unsigned long long)v->id;
	if (old == LC_ROOM_SUCCESS || old == LC_ROOM_FAILED) {
		if (status == old)
			return 0;
		LC__DEBUG("%s %llu: %s -> %s refused (final)", v->side, id,
			  lc_room_status_name(old), lc_room_status_name(status));
		return LC_ERR_STATE;
	}
	if (status == old || (status != LC_ROOM_FAILED && status < old))
		return 0; /* monotonic: an older update arriving late is absorbed */
	if (!lc__room_transition_legal(old, status))
		return LC_ERR_STATE;
	*v->status = status;
	if (status == LC_ROOM_BOOTSTRAPPED)
		*v->bootstrapped_ns = now_ns;
	if (status == LC_ROOM_SUCCESS || status == LC_ROOM_FAILED) {
		*v->final_ns = now_ns;
		lc__hist_add(&m->latency, now_ns - v->opened_ns);
	}
	if (status == LC_ROOM_FAILED) {
		if (fail_reason <= LC_FAIL_NONE || fail_reason >= LC_FAIL_REASON_COUNT)
			fail_reason = LC_FAIL_TRANSFER;
		*v->fail_reason = fail_reason;
		lc__reason(v->reason, v->reason_cap, "%s",
			   reason ? reason : lc_fail_reason_name(fail_reason));
		m->failed++;
		m->failed_by_reason[fail_reason]++;
		LC__WARN("%s %llu: %s -> Failed (%s): %s", v->side, id, lc_room_status_name(old),
			 lc_fail_reason_name(fail_reason), v->reason);
	} else {
		if (status == LC_ROOM_SUCCESS)
			m->succeeded++;
		LC__DEBUG("%s %llu: %s -> %s", v->side, id, lc_room_status_name(old),
			  lc_room_status_name(status));
	}
	lc__notify_signal(v->notify);
	return 1;
}

int lc__room_set_state(lc__room_table_t *t, lc__room_t *r, int status, int fail_reason,
		       const char *reason, uint64_t now_ns)
{
	lc__room_view_t v = {.id = r->id,
			     .side = "room",
			     .status = &r->status,
			     .fail_reason = &r->fail_reason,
			     .reason = r->reason,
			     .reason_cap = sizeof(r->reason),
			     .opened_ns = r->opened_ns,
			     .bootstrapped_ns = &r->bootstrapped_ns,
			     .final_ns = &r->final_ns,
			     .notify = t->notify};
	int rc = lc__room_state_apply(&t->metrics, &v, status, fail_reason, reason, now_ns);
	if (rc == 1 && lc__room_final(r))
		r->notify_pending = true;
	return rc;
}
