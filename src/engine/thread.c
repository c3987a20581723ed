/*
 * The engine thread and how it is woken (rule 6). Each iteration, under the
 * engine lock: intake, completions, the posting pass, the room scan when a
 * room deadline is due, then callbacks with the lock dropped. It then sleeps
 * in ppoll on its eventfd (chunks, CPU step records, metadata, cancel) and
 * on the completion queue's fd until the next deadline; there is no fixed
 * sleep anywhere. A CPU step record that finds the lock free runs the
 * posting pass itself, on the recording thread (inline submission), and
 * wakes the engine thread only when the pass left it work.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "engine/engine_int.h"

/* One iteration's work under the lock; returns the earliest deadline.
 * *waiting says whether some task awaits a step. */
static uint64_t run_pass(lc_engine_t *e, bool *waiting)
{
	uint64_t now = lc__now_ns(), next;
	e->m.loop_iterations++;
	lc__engine_intake(e, now);                   /* rule 1 */
	lc__engine_drain_cq(e, now);                 /* rule 4 */
	next = lc__engine_progress(e, now, waiting); /* rules 2, 3, 5, 7 */
	if (!e->room_scan_at || now >= e->room_scan_at)
		e->room_scan_at = lc__engine_scan_rooms(e, now);
	lc__earliest(&next, e->room_scan_at);
	lc__engine_deliver_notes(e);
	return next;
}

static bool steps_moved(lc_engine_t *e, uint64_t cache, uint64_t aux)
{
	return lc__steps_read(&e->steps, LC_STEP_CACHE) != cache ||
	       lc__steps_read(&e->steps, LC_STEP_AUX) != aux;
}

/* Drop the lock and sleep in ppoll for up to wait_ns; *ev and *cq say which
 * fd woke it. Woken by acknowledgements only, the thread waits up to
 * coalesce_ns more, lock free, for the rest of the burst (moderation, as
 * NICs do): the engine then wakes a few times per layer, not once per room,
 * and a step record meanwhile finds the lock free and posts inline. Only
 * while more acknowledgements are due: when the last batch in flight has
 * been acknowledged there is no burst to wait for (one room alone would
 * pay the whole window). Any other event ends that wait. Returns with the lock held. */
static void sleep_unlocked(lc_engine_t *e, int64_t wait_ns, bool *ev, bool *cq)
{
	struct pollfd fds[2] = {{.fd = e->evfd, .events = POLLIN},
				{.fd = lc_cq_fd(e->cq), .events = POLLIN}};
	struct timespec ts = {.tv_sec = wait_ns / 1000000000, .tv_nsec = wait_ns % 1000000000};
	pthread_mutex_unlock(&e->lock);
	int rc = ppoll(fds, 2, &ts, NULL);
	*ev = rc > 0 && (fds[0].revents & POLLIN);
	*cq = rc > 0 && (fds[1].revents & POLLIN);
	if (rc > 0 && !*ev && e->coalesce_ns && lc__cq_expecting(e->cq)) {
		struct pollfd evfd = {.fd = e->evfd, .events = POLLIN};
		struct timespec cts = {0, (long)e->coalesce_ns};
		ppoll(&evfd, 1, &cts, NULL);
	}
	pthread_mutex_lock(&e->lock);
}

/* Polling an outside producer's word sleeps poll_sleep_us (20 us) at a time;
 * Linux stretches a thread's timed sleeps by its timer slack (50 us by
 * default), which would more than triple that wake latency. Cut to 1 us for
 * the engine thread, once, when it first polls. */
static void tighten_timer_slack(lc_engine_t *e)
{
	if (e->tight_slack)
		return;
	e->tight_slack = true;
	if (prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0))
		LC__DEBUG("engine %s: PR_SET_TIMERSLACK refused", e->name);
}

/* Sleep until an event, the next deadline, or the next read of an outside
 * producer's counter. The steps compared are those the last pass acted on:
 * a step recorded since then (and before want_wake was set) must not be
 * slept through. Returns at once, without sleeping, when there is work. */
static void wait_for_work(lc_engine_t *e, uint64_t next, bool waiting, lc__backoff_t *bo)
{
	uint64_t cache = e->seen_cache, aux = e->seen_aux;
	int64_t wait_ns = next ? (int64_t)(next - lc__now_ns()) : LC__MAX_WAIT_NS;
	if (wait_ns > LC__MAX_WAIT_NS)
		wait_ns = LC__MAX_WAIT_NS;
	if (waiting) {
		atomic_store(&e->want_wake, 1);
		if (lc__engine_polls(e)) {
			tighten_timer_slack(e);
			uint64_t b = lc__backoff_next(bo, lc__now_ns());
			if ((int64_t)b < wait_ns)
				wait_ns = (int64_t)b;
		}
		/* Dekker with lc__steps_record: recheck after announcing. */
		if (steps_moved(e, cache, aux)) {
			atomic_store(&e->want_wake, 0);
			lc__backoff_reset(bo);
			return;
		}
	} else {
		lc__backoff_reset(bo);
	}
	if (wait_ns < 0)
		wait_ns = 0;
	/* The completion queue writes its eventfd only while armed: the
	 * transports' pushes wake nobody while this thread works. Completions
	 * left over from the pass make arming refuse. */
	if (!lc__cq_arm(e->cq)) {
		atomic_store(&e->want_wake, 0);
		return;
	}
	bool ev, cq;
	sleep_unlocked(e, wait_ns, &ev, &cq);
	atomic_store(&e->want_wake, 0);
	lc__cq_disarm(e->cq, cq);
	if (ev) {
		uint64_t v;
		ssize_t r = read(e->evfd, &v, sizeof(v));
		LC__UNUSED(r);
	}
	if (steps_moved(e, cache, aux))
		lc__backoff_reset(bo);
}

void *lc__engine_thread_main(void *arg)
{
	pthread_setname_np(pthread_self(), "lc-engine");
	lc_engine_t *e = arg;
	lc__backoff_t bo;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	lc__backoff_init(&bo, e->spin_ns, e->sleep_ns);

	pthread_mutex_lock(&e->lock);
	while (!e->stopping) {
		bool waiting;
		uint64_t next = run_pass(e, &waiting);
		if (e->inbox || e->stopping)
			continue;
		wait_for_work(e, next, waiting, &bo);
	}
	pthread_mutex_unlock(&e->lock);
	return NULL;
}

/* ---- step records (API) -------------------------------------------------- */

/* Rule 6 with the wake-up taken off the critical path: if the engine lock
 * is free (the engine thread sleeps, or runs callbacks), the recording
 * thread posts the groups this step made ready itself, since waking a
 * sleeping thread costs far more than the posts. trylock never waits: an
 * engine thread holding the lock is awake and compares the steps with those
 * its pass read before it sleeps. Returns whether the engine thread still
 * has to be woken (if it sleeps): when the pass could not run, or left it
 * work (a room scan for new metadata deadlines, callbacks to deliver). The
 * deadlines of the groups just posted lie beyond the one the engine thread
 * sleeps towards. A batch the engine thread has not taken in yet (its
 * wake-up after lc_engine_batch_end is late) is taken in here: its layers
 * are being recorded, and leaving its first layer to that late thread
 * would delay it. */
static bool submit_inline(lc_engine_t *e)
{
	if (!e->inline_submit || lc__engine_on_thread(e) || pthread_mutex_trylock(&e->lock))
		return true;
	bool wake_it = true;
	if (!e->stopping) {
		bool waiting;
		uint64_t now = lc__now_ns();
		if (e->inbox)
			lc__engine_intake(e, now);
		lc__engine_progress(e, now, &waiting);
		e->m.inline_submits++;
		wake_it = e->room_scan_at == 0 || e->nnotes;
	}
	pthread_mutex_unlock(&e->lock);
	return wake_it;
}

static int record(lc_engine_t *e, int which)
{
	if (!e)
		return -EINVAL;
	/* A CUDA stream owns the words now: a CPU +1 would be overwritten by
	 * the stream's next absolute value, and lose or repeat a step. */
	if (atomic_load_explicit(&e->gpu.active, memory_order_relaxed)) {
		LC__WARN("engine %s: CPU step record after a stream record", e->name);
		return LC_ERR_STATE;
	}
	uint64_t step;
	if (!lc__steps_record(&e->steps, which, &step))
		return lc__engine_refuse_record(e, which, step);
	if (submit_inline(e) && atomic_load(&e->want_wake))
		lc__engine_wake(e);
	return 0;
}

int lc_engine_record_cache(lc_engine_t *e)
{
	return record(e, LC_STEP_CACHE);
}

int lc_engine_record_aux(lc_engine_t *e)
{
	return record(e, LC_STEP_AUX);
}

int lc_engine_counter(lc_engine_t *e, int which, uint64_t **out)
{
	if (!e || !out || (which != LC_STEP_CACHE && which != LC_STEP_AUX))
		return LC__FAIL(-EINVAL, "lc_engine_counter: %s",
				!e     ? "engine is NULL"
				: !out ? "out is NULL"
				       : "which is neither LC_STEP_CACHE nor LC_STEP_AUX");
	*out = e->steps.word[which];
	return 0;
}
