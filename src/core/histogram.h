/*
 * Latency histograms with four buckets per power of two of microseconds
 * (lc_histogram_t in the public header). Not synchronised: the owner of the
 * histogram serialises updates and snapshots (the engine under its lock).
 */
#ifndef LC_CORE_HISTOGRAM_H
#define LC_CORE_HISTOGRAM_H

#include "core/common.h"

/* Bucket index for a value in nanoseconds. */
int lc__hist_bucket(uint64_t ns);
void lc__hist_add(lc_histogram_t *h, uint64_t ns);

#endif
