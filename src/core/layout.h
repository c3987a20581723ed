/*
 * Layouts (spec 2.6): the table of P's buffers and which buffers make up
 * each global layer. Immutable after creation, so any thread may read one.
 */
#ifndef LC_CORE_LAYOUT_H
#define LC_CORE_LAYOUT_H

#include "core/common.h"

struct lc_layout {
	uint32_t nbuf;
	uint32_t layers;       /* max global layer id + 1 */
	lc_buffer_t *bufs;     /* nbuf */
	uint32_t *layer_start; /* layers + 1: CSR offsets into layer_buf */
	uint32_t *layer_buf;   /* nbuf: buffer indices grouped by layer, in order */
	uint32_t *rows;        /* nbuf: bufs[i].rows (token-major pages), for topology.h */
	uint64_t fingerprint;
};

/* Deep copy (the engine keeps its own). */
int lc__layout_clone(const lc_layout_t *src, lc_layout_t **out);

#endif
