/*
 * Rooms (API): open, destinations (fan-in), metadata, cancel, status and
 * release. A room is Bootstrapped once all its destinations are present
 * (the chunks it held meanwhile then go to the intake); a
 * finished room stays in the table until its final status is read or it is
 * released, then its id starts fresh.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"
#include "core/params.h"
#include "engine/engine_int.h"

int lc_engine_room_open(lc_engine_t *e, uint64_t room)
{
	lc__room_t *r;
	int rc;
	if (!e)
		return LC__FAIL(-EINVAL, "lc_engine_room_open: engine is NULL");
	pthread_mutex_lock(&e->lock);
	rc = lc__room_open(&e->rooms, room, lc__now_ns(), &r);
	e->room_scan_at = 0;
	pthread_mutex_unlock(&e->lock);
	return rc;
}

/* Whether the destination's parameters hold together and name a registered
 * session (*core; a dummy may name one, or none). */
static int check_dst(lc_engine_t *e, const lc_dst_params_t *d, lc__session_t **core)
{
	if ((d->page_count && !d->pages) || (d->dst_mask && !d->dst_local) ||
	    (!d->is_dummy && !d->session) || !d->required_dst_count)
		return lc__engine_bad_peer_input(e, -EINVAL, "destination parameters");
	if (d->session)
		*core = lc__session_find(&e->sessions, d->session);
	if (!d->is_dummy && !*core)
		return lc__engine_bad_peer_input(e, -ENOENT,
						 "destination on an unregistered session");
	return 0;
}

/* Whether the session may be the destination of one more unfinished room
 * (p_session_rooms_max): one D session, honest or not, cannot take every
 * room of the engine from the others. Counted, logged rate-limited. */
static int quota_check(lc_engine_t *e, const lc__session_t *core, uint64_t room, int64_t max)
{
	if (!core || (int64_t)core->rooms_live < max)
		return 0;
	uint64_t n = LC__COUNT(e->ctx, rooms_refused_session_quota) + 1;
	LC__WARN_PEER("engine %s: room %llu refused: session %s is a destination of %u unfinished "
		      "rooms (p_session_rooms_max %lld); %llu refused so far",
		      e->name, (unsigned long long)room, core->name, core->rooms_live,
		      (long long)max, (unsigned long long)n);
	return -ENOSPC;
}

/* Whether one more room fits under p_rooms_max (engine lock held). A
 * refusal happens before any allocation; it is counted, and logged
 * rate-limited (LC__LOG_PEER) so that a flood cannot flood the log too. */
static int room_cap_check(lc_engine_t *e, uint64_t room, int64_t max)
{
	if ((int64_t)e->rooms.count < max)
		return 0;
	uint64_t n = LC__COUNT(e->ctx, rooms_refused_cap) + 1;
	LC__WARN_PEER("engine %s: room %llu refused: %zu rooms open (p_rooms_max %lld); "
		      "%llu refused so far",
		      e->name, (unsigned long long)room, e->rooms.count, (long long)max,
		      (unsigned long long)n);
	return -ENOSPC;
}

/* Whether the destination's descriptors (pages, state slots, local
 * indices: what P holds for it until the room ends) fit under its
 * session's p_session_descs_max and the engine's p_descs_max: a peer's
 * transfer infos cannot make P hold more. -ENOBUFS before any allocation,
 * counted (infos_refused_descs), logged once per 1,024. */
static int descs_check(lc_engine_t *e, const lc__session_t *core, uint64_t room, uint64_t n,
		       int64_t sess_max, int64_t max)
{
	bool sess = core && core->descs_live + n > (uint64_t)sess_max;
	if (!sess && e->descs_live + n <= (uint64_t)max)
		return 0;
	uint64_t k = LC__COUNT(e->ctx, infos_refused_descs) + 1;
	if (k % 1024 == 1)
		LC__WARN("engine %s: room %llu refused: %llu more transfer-info descriptors "
			 "would exceed %s (%lld); %llu refused so far",
			 e->name, (unsigned long long)room, (unsigned long long)n,
			 sess ? "p_session_descs_max" : "p_descs_max",
			 (long long)(sess ? sess_max : max), (unsigned long long)k);
	return -ENOBUFS;
}

int lc_engine_room_dst_add(lc_engine_t *e, uint64_t room, const lc_dst_params_t *p)
{
	lc__room_t *r;
	lc__session_t *core = NULL;
	int rc = 0;
	uint64_t now = lc__now_ns();
	lc_dst_params_t d;
	LC__PARAMS_TAKE("lc_engine_dst_add", e, "engine", &d, p, "params", lc_dst_params_t,
			is_dummy);
	int64_t max = lc__ctx_cfg(e->ctx, LC__CFG_p_rooms_max); /* not under the lock */
	int64_t quota = lc__ctx_cfg(e->ctx, LC__CFG_p_session_rooms_max);
	int64_t sess_descs = lc__ctx_cfg(e->ctx, LC__CFG_p_session_descs_max);
	int64_t max_descs = lc__ctx_cfg(e->ctx, LC__CFG_p_descs_max);
	uint64_t descs =
		(uint64_t)d.page_count + d.state_slot_count + (d.dst_mask ? d.dst_local_count : 0);
	pthread_mutex_lock(&e->lock);
	if ((rc = check_dst(e, &d, &core)) || (rc = quota_check(e, core, room, quota)) ||
	    (rc = descs_check(e, core, room, descs, sess_descs, max_descs)))
		goto out;
	r = lc__room_find(&e->rooms, room);
	if (!r &&
	    ((rc = room_cap_check(e, room, max)) || (rc = lc__room_open(&e->rooms, room, now, &r))))
		goto out;
	if ((rc = lc__room_add_dst(r, &d, core && !d.is_dummy ? core->owner : NULL))) {
		if (rc != LC_ERR_STATE || !lc__room_final(r))
			lc__engine_bad_peer_input(e, rc, "room destination");
		goto out;
	}
	if (core) { /* lc__room_add_dst appended it */
		r->dst[r->ndst - 1].quota = true;
		r->dst[r->ndst - 1].descs = descs;
		core->rooms_live++;
		core->descs_live += descs;
		e->descs_live += descs;
	}
	e->room_scan_at = 0;
	if (core && lc__session_blocked(core, now, e->ttl_ns)) {
		lc__engine_fail_room(e, r, LC_FAIL_SESSION_BLOCKED, "session %s is blocked: %s",
				     core->name, core->reason);
		goto out;
	}
	if (lc__room_fanin_done(r)) {
		lc__room_set_state(&e->rooms, r, LC_ROOM_BOOTSTRAPPED, 0, NULL, now);
		/* What P added meanwhile goes out now: recorded layers at once. */
		lc__engine_held_release(e, r, true);
	}
out:
	pthread_mutex_unlock(&e->lock);
	return rc;
}

/* The reasons of the usual refusals, recorded and not logged (P's control
 * thread asks about rooms a peer names). */
static int no_room(uint64_t room)
{
	lc__error_set(-ENOENT,
		      "room %llu: no such room at this engine (never opened, or its "
		      "final status was already read)",
		      (unsigned long long)room);
	return -ENOENT;
}

static int room_final(const lc__room_t *r)
{
	lc__error_set(LC_ERR_STATE, "room %llu: already %s", (unsigned long long)r->id,
		      lc_room_status_name(r->status));
	return LC_ERR_STATE;
}

int lc_engine_room_metadata_set(lc_engine_t *e, uint64_t room, const void *data, size_t len)
{
	int rc = 0;
	if (!e || (len && !data))
		return LC__FAIL(-EINVAL, "room metadata: %s is NULL", e ? "data" : "engine");
	if (len > LC_METADATA_MAX)
		return LC__FAIL(-EMSGSIZE, "room %llu: %zu bytes of metadata, at most %d",
				(unsigned long long)room, len, LC_METADATA_MAX);
	pthread_mutex_lock(&e->lock);
	lc__room_t *r = lc__room_find(&e->rooms, room);
	if (!r)
		rc = no_room(room);
	else if (r->has_metadata) {
		rc = -EEXIST;
		lc__error_set(rc, "room %llu: its metadata is already set",
			      (unsigned long long)room);
	} else {
		if (len) {
			r->metadata = malloc(len);
			if (!r->metadata) {
				rc = -ENOMEM;
				goto out;
			}
			memcpy(r->metadata, data, len);
		}
		r->metadata_len = len;
		r->has_metadata = true;
		lc__engine_try_finish(e, r);
		if (!lc__engine_on_thread(e))
			lc__engine_wake(e);
	}
out:
	pthread_mutex_unlock(&e->lock);
	return rc;
}

int lc_engine_room_cancel(lc_engine_t *e, uint64_t room, const char *reason)
{
	int rc = 0;
	if (!e)
		return LC__FAIL(-EINVAL, "lc_engine_room_cancel: engine is NULL");
	pthread_mutex_lock(&e->lock);
	lc__room_t *r = lc__room_find(&e->rooms, room);
	if (!r)
		rc = no_room(room);
	else if (lc__room_final(r))
		rc = room_final(r);
	else
		lc__engine_fail_room(e, r, LC_FAIL_CANCELLED, "cancelled: %s",
				     reason ? reason : "no reason");
	pthread_mutex_unlock(&e->lock);
	return rc;
}

static bool room_has_session(const lc__room_t *r, const char *session)
{
	for (uint32_t i = 0; i < r->ndst; i++)
		if (r->dst[i].session_name && !strcmp(r->dst[i].session_name, session))
			return true;
	return false;
}

int lc__engine_room_cancel_from(lc_engine_t *e, uint64_t room, const char *session,
				const char *reason)
{
	int rc = 0;
	if (!e || !session)
		return -EINVAL;
	pthread_mutex_lock(&e->lock);
	lc__room_t *r = lc__room_find(&e->rooms, room);
	if (!r)
		rc = -ENOENT;
	else if (!room_has_session(r, session))
		rc = -EPERM;
	else if (lc__room_final(r))
		rc = LC_ERR_STATE;
	else
		lc__engine_fail_room(e, r, LC_FAIL_CANCELLED, "cancelled: %s",
				     reason ? reason : "no reason");
	pthread_mutex_unlock(&e->lock);
	return rc;
}

/* Layers landed at every real destination. */
static uint32_t landed_min(const lc__room_t *r)
{
	uint32_t m = UINT32_MAX;
	for (uint32_t i = 0; i < r->ndst; i++)
		if (!r->dst[i].dummy)
			m = LC__MIN(m, r->dst[i].landed);
	return m == UINT32_MAX ? 0 : m;
}

int lc_engine_room_status(lc_engine_t *e, uint64_t room, lc_room_info_t *out)
{
	int rc = 0;
	if (!e || !out || out->size < offsetof(lc_room_info_t, dst_count))
		return LC__FAIL(
			-EINVAL, "room info: %s",
			!e     ? "engine is NULL"
			: !out ? "out is NULL"
			       : "out->size is too small (set it to sizeof(lc_room_info_t))");
	lc_room_info_t info = {0};
	info.size = LC__MIN(out->size, sizeof(info));
	pthread_mutex_lock(&e->lock);
	lc__room_t *r = lc__room_find(&e->rooms, room);
	if (!r) {
		rc = no_room(room);
	} else {
		info.status = r->status;
		info.fail_reason = r->fail_reason;
		lc__reason(info.reason, sizeof(info.reason), "%s", r->reason);
		info.dst_count = r->ndst;
		info.required_dst_count = r->required;
		info.layers_landed = landed_min(r);
		/* Reported: a final room leaves the table (its notes are queued). */
		if (lc__room_final(r) && !r->tasks)
			lc__room_remove(&e->rooms, r);
		memcpy(out, &info, info.size);
	}
	pthread_mutex_unlock(&e->lock);
	return rc;
}

int lc_engine_room_close(lc_engine_t *e, uint64_t room)
{
	int rc = 0;
	if (!e)
		return LC__FAIL(-EINVAL, "lc_engine_room_close: engine is NULL");
	pthread_mutex_lock(&e->lock);
	lc__room_t *r = lc__room_find(&e->rooms, room);
	if (!r)
		rc = no_room(room);
	else {
		if (!lc__room_final(r))
			lc__engine_fail_room(e, r, LC_FAIL_CANCELLED,
					     "released before it finished");
		lc__room_remove(&e->rooms, r);
	}
	pthread_mutex_unlock(&e->lock);
	return rc;
}
