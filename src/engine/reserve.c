/*
 * Every step record is accounted for (docs/engine.md, "Reservations"). A
 * non-idle batch reserves layer_count cache steps and one aux step when it
 * ends; the cursors of core/steps.h are the bound. A CPU or stream record
 * beyond the bound is refused where it is made (thread.c, gpu_steps.c): the
 * producer counts it lock-free, and the engine reports it here, at most
 * once a second. A word an outside producer writes past the bound cannot be
 * refused, only seen: every room waiting for steps then fails (its layers
 * were, or would be, posted on records that were not theirs), and the
 * cursor moves to the word, so that later batches are not shifted.
 */
#include <inttypes.h>

#include "engine/engine_int.h"

/* Shortest time between two reports of refused records. */
#define LC__REFUSED_LOG_NS 1000000000ull

static const char *const word_name[2] = {"cache", "aux"};

/* Log the records refused since the last report; returns when the next may
 * be made (0: nothing waits). */
static uint64_t report_refused(lc_engine_t *e, uint64_t now)
{
	uint64_t next = 0;
	for (int w = 0; w < 2; w++) {
		uint64_t n = atomic_load(&e->refused[w]);
		if (n == e->refused_logged[w])
			continue;
		if (e->refused_log_ns && now - e->refused_log_ns < LC__REFUSED_LOG_NS) {
			next = e->refused_log_ns + LC__REFUSED_LOG_NS;
			continue;
		}
		LC__WARN("engine %s: %" PRIu64 " %s step record(s) refused: step %" PRIu64
			 " was reserved by no ended batch (reserved: steps below %" PRIu64
			 "); lc_engine_batch_end must precede a forward's first record, and an"
			 " idle batch reserves nothing. A refused record changes no step",
			 e->name, n - e->refused_logged[w], word_name[w],
			 (uint64_t)atomic_load(&e->refused_step[w]), lc__steps_bound(&e->steps, w));
		e->refused_logged[w] = n;
		e->refused_log_ns = now;
	}
	return next;
}

/* Whether room r holds a chunk that awaits steps (Bootstrapping). */
static bool holds_gated(const lc__room_t *r)
{
	for (const lc__task_t *t = r->held; t; t = t->next)
		if (t->gated)
			return true;
	return false;
}

/* Fail the room of every task that awaits steps, taken, held or not. */
static void fail_waiting_rooms(lc_engine_t *e, const char *text)
{
	size_t it = 0;
	for (lc__room_t *r; (r = lc__room_next(&e->rooms, &it));)
		if (holds_gated(r))
			lc__engine_fail_room(e, r, LC_FAIL_BAD_INPUT, "%s", text);
	for (lc__task_t *t = e->tasks; t; t = t->next)
		if (!t->dead && t->gated)
			lc__engine_fail_room(e, t->room, LC_FAIL_BAD_INPUT, "%s", text);
	for (lc__task_t *t = e->inbox; t; t = t->next) {
		lc__room_t *r = t->gated ? lc__room_find(&e->rooms, t->room_id) : NULL;
		if (r)
			lc__engine_fail_room(e, r, LC_FAIL_BAD_INPUT, "%s", text);
	}
}

uint64_t lc__engine_check_steps(lc_engine_t *e, uint64_t now, uint64_t cache, uint64_t aux)
{
	for (int w = 0; w < 2; w++) {
		uint64_t v = w == LC_STEP_CACHE ? cache : aux;
		uint64_t bound = lc__steps_bound(&e->steps, w);
		if (!lc__steps_overrun(&e->steps, w, v))
			continue;
		char text[LC_REASON_MAX];
		lc__reason(text, sizeof(text),
			   "%s step counter at %" PRIu64
			   " is beyond its reservation (steps below %" PRIu64
			   "): a record no batch reserved; layers cannot be matched to records",
			   word_name[w], v, bound);
		LC__WARN(
			"engine %s: %s; rooms awaiting steps fail, later batches start at %" PRIu64,
			e->name, text, v);
		e->m.counter_overruns++;
		fail_waiting_rooms(e, text);
		lc__steps_rebase(&e->steps, w, v);
	}
	return report_refused(e, now);
}
