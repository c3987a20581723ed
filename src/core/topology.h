/*
 * Tensor-parallel topology (spec 5.5, 6.7): which P ranks serve which D
 * rank, and what each sends of every buffer. Pure: both sides ask the same
 * questions here, P when a D registers (the fragments it sends), D when it
 * plans a room's targets (the P ranks it talks to).
 */
#ifndef LC_CORE_TOPOLOGY_H
#define LC_CORE_TOPOLOGY_H

#include "core/common.h"

#define LC__TP_MAX_TARGETS 64

/* Both sides of one P/D pairing. Page sizes are in bytes (the unit of
 * lc_tp_fragment here is a byte, as the bootstrap's kv_unit_lens say). */
typedef struct lc__topology {
	int p_world, p_dp;      /* P's world size and data-parallel groups */
	int d_tp, d_rank;       /* D's ranks per dp group, and this D rank */
	const uint64_t *p_lens; /* P's bytes per page of each buffer */
	const uint64_t *d_lens; /* D's */
	/* Tokens per token-major page of each buffer (lc_buffer_t.rows), or
	 * NULL: all head-major. Per buffer, P's and D's must agree. */
	const uint32_t *p_rows;
	const uint32_t *d_rows;
	uint32_t nbuf;
} lc__topology_t;

/* P's TP size (ranks per dp group). */
static inline int lc__tp_p_size(const lc__topology_t *t)
{
	return t->p_world / t->p_dp;
}

/* Whether the page sizes differ (heterogeneous TP): then P sends each
 * buffer's lc_tp_fragment, not whole pages. */
bool lc__tp_split(const lc__topology_t *t);

/* What P rank p_rank (within its TP group) sends of each buffer to D rank
 * d_rank. Fills out (nbuf entries, each with its buffer; NULL: count only)
 * and returns how many buffers have a fragment (0: p_rank sends d_rank
 * nothing, a replica), or LC_ERR_GEOMETRY with why when a buffer does not
 * split across the two TP sizes. */
int lc__tp_fragments(const lc__topology_t *t, int p_rank, int d_rank, lc_fragment_t *out, char *why,
		     size_t cap);

/* One P rank a D rank talks to about a room. */
typedef struct lc__tp_target {
	int rank;              /* global P rank */
	uint32_t required_dst; /* D ranks this P rank serves for the room, >= 1 */
	bool dummy;            /* gets a transfer info without pages, sends nothing */
} lc__tp_target_t;

typedef struct lc__tp_plan {
	int ntargets;
	lc__tp_target_t targets[LC__TP_MAX_TARGETS];
	uint32_t required_dst;  /* the largest fan-out of a real target */
	int required_responses; /* real targets: Success from each finishes the room */
} lc__tp_plan_t;

/* The targets of D rank t->d_rank for a room of dp group room % p_dp:
 * equal TP, one rank; D_tp > P_tp, one rank serving D_tp / P_tp D ranks;
 * P_tp > D_tp, P_tp / D_tp ranks, the first real and the rest dummies;
 * heterogeneous TP (lc__tp_split), the P ranks with a fragment for this D
 * rank, each with its own fan-out, plus as dummies the P ranks that serve
 * no D rank and fall to this one (p * D_tp / P_tp). Returns 0, or
 * LC_ERR_GEOMETRY with why. */
int lc__tp_plan_targets(const lc__topology_t *t, uint64_t room, lc__tp_plan_t *out, char *why,
			size_t cap);

#endif
