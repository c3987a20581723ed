/* Tensor-parallel pairing of P and D ranks. */
#include <stdio.h>
#include <string.h>

#include "core/topology.h"

bool lc__tp_split(const lc__topology_t *t)
{
	for (uint32_t i = 0; i < t->nbuf; i++)
		if (t->p_lens[i] != t->d_lens[i])
			return true;
	return false;
}

int lc__tp_fragments(const lc__topology_t *t, int p_rank, int d_rank, lc_fragment_t *out, char *why,
		     size_t cap)
{
	int ptp = lc__tp_p_size(t), n = 0;
	for (uint32_t i = 0; i < t->nbuf; i++) {
		lc_tp_side_t ps = {ptp, p_rank, t->p_lens[i], 1, t->p_rows ? t->p_rows[i] : 0, 0};
		lc_tp_side_t ds = {t->d_tp, d_rank, t->d_lens[i], 1, t->d_rows ? t->d_rows[i] : 0,
				   0};
		lc_fragment_t f = {0};
		int rc = lc_tp_fragment(&ps, &ds, &f);
		if (rc < 0) {
			snprintf(why, cap,
				 "buffer %u item_len differs and does not split across "
				 "TP (spec 6.7): P TP %d x %llu bytes (%u rows), D TP %d x %llu "
				 "bytes (%u rows)",
				 i, ptp, (unsigned long long)ps.item_len, ps.rows, t->d_tp,
				 (unsigned long long)ds.item_len, ds.rows);
			return LC_ERR_GEOMETRY;
		}
		if (!rc)
			continue;
		if (out) {
			out[n] = f;
			out[n].buffer = i;
		}
		n++;
	}
	return n;
}

static int add_target(lc__tp_plan_t *out, lc__tp_target_t tg, char *why, size_t cap)
{
	if (out->ntargets == LC__TP_MAX_TARGETS) {
		snprintf(why, cap, "more than %d P ranks for one D rank", LC__TP_MAX_TARGETS);
		return LC_ERR_GEOMETRY;
	}
	out->targets[out->ntargets++] = tg;
	if (!tg.dummy) {
		out->required_responses++;
		out->required_dst = LC__MAX(out->required_dst, tg.required_dst);
	}
	return 0;
}

/* Heterogeneous TP: the P ranks with a fragment for this D rank are real
 * targets, each with its own fan-out; a P rank with none for any D rank
 * (a replica) is a dummy of D rank p * dtp / ptp, so its room ends too. */
static int plan_split(const lc__topology_t *t, int base, lc__tp_plan_t *out, char *why, size_t cap)
{
	int ptp = lc__tp_p_size(t), dtp = t->d_tp;
	for (int p = 0; p < ptp; p++) {
		uint32_t fan_out = 0;
		int mine = 0;
		for (int dr = 0; dr < dtp; dr++) {
			int rc = lc__tp_fragments(t, p, dr, NULL, why, cap);
			if (rc < 0)
				return rc;
			fan_out += rc > 0;
			if (dr == t->d_rank)
				mine = rc;
		}
		bool dummy = !fan_out && p * dtp / ptp == t->d_rank;
		if (!mine && !dummy)
			continue;
		/* A dummy's P rank hears from this D rank alone. */
		lc__tp_target_t tg = {
			.rank = base + p, .required_dst = dummy ? 1 : fan_out, .dummy = dummy};
		if (add_target(out, tg, why, cap))
			return LC_ERR_GEOMETRY;
	}
	if (!out->required_responses) {
		snprintf(why, cap, "no P rank of TP %d holds anything of D rank %d", ptp,
			 t->d_rank);
		return LC_ERR_GEOMETRY;
	}
	return 0;
}

int lc__tp_plan_targets(const lc__topology_t *t, uint64_t room, lc__tp_plan_t *out, char *why,
			size_t cap)
{
	int ptp = lc__tp_p_size(t), dtp = t->d_tp;
	int base = (int)(room % (uint64_t)t->p_dp) * ptp;
	memset(out, 0, sizeof(*out));
	if (lc__tp_split(t))
		return plan_split(t, base, out, why, cap);
	if (ptp == dtp)
		return add_target(out,
				  (lc__tp_target_t){.rank = base + t->d_rank, .required_dst = 1},
				  why, cap);
	if (dtp > ptp) {
		if (dtp % ptp) {
			snprintf(why, cap, "D tp %d is not a multiple of P tp %d", dtp, ptp);
			return LC_ERR_GEOMETRY;
		}
		lc__tp_target_t tg = {.rank = base + t->d_rank * ptp / dtp,
				      .required_dst = (uint32_t)(dtp / ptp)};
		return add_target(out, tg, why, cap);
	}
	if (ptp % dtp || ptp / dtp > LC__TP_MAX_TARGETS) {
		snprintf(why, cap, "P tp %d is not a multiple of D tp %d (or too many)", ptp, dtp);
		return LC_ERR_GEOMETRY;
	}
	for (int i = 0, k = ptp / dtp; i < k; i++) {
		lc__tp_target_t tg = {
			.rank = base + t->d_rank * k + i, .required_dst = 1, .dummy = i > 0};
		add_target(out, tg, why, cap);
	}
	return 0;
}
