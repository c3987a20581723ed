/* Log-linear histogram: bucket i holds values in (2^((i-1)/4), 2^(i/4)] us. */
#include <math.h>

#include "core/histogram.h"

/* Upper bounds in nanoseconds: (uint64_t)(2^(i/4) * 1000). */
static const uint64_t bounds_ns[LC_HIST_BUCKETS] = {
	1000ull,       1189ull,       1414ull,       1681ull,       2000ull,        2378ull,
	2828ull,       3363ull,       4000ull,       4756ull,       5656ull,        6727ull,
	8000ull,       9513ull,       11313ull,      13454ull,      16000ull,       19027ull,
	22627ull,      26908ull,      32000ull,      38054ull,      45254ull,       53817ull,
	64000ull,      76109ull,      90509ull,      107634ull,     128000ull,      152218ull,
	181019ull,     215269ull,     256000ull,     304437ull,     362038ull,      430538ull,
	512000ull,     608874ull,     724077ull,     861077ull,     1024000ull,     1217748ull,
	1448154ull,    1722155ull,    2048000ull,    2435496ull,    2896309ull,     3444311ull,
	4096000ull,    4870992ull,    5792618ull,    6888623ull,    8192000ull,     9741984ull,
	11585237ull,   13777246ull,   16384000ull,   19483969ull,   23170475ull,    27554493ull,
	32768000ull,   38967938ull,   46340950ull,   55108987ull,   65536000ull,    77935877ull,
	92681900ull,   110217974ull,  131072000ull,  155871754ull,  185363800ull,   220435949ull,
	262144000ull,  311743509ull,  370727600ull,  440871899ull,  524288000ull,   623487019ull,
	741455200ull,  881743799ull,  1048576000ull, 1246974039ull, 1482910400ull,  1763487599ull,
	2097152000ull, 2493948079ull, 2965820800ull, 3526975198ull, 4194304000ull,  4987896159ull,
	5931641601ull, 7053950396ull, 8388608000ull, 9975792318ull, 11863283203ull, 14107900792ull,
};

static uint64_t bound_ns(int i)
{
	return bounds_ns[i];
}

int lc__hist_bucket(uint64_t ns)
{
	/* Start from the power of two of the value in microseconds and step
	 * within its four quarter buckets. */
	uint64_t us = ns / 1000;
	int i = us ? 4 * (63 - __builtin_clzll(us)) : 0;
	if (i > 4)
		i -= 4;
	else
		i = 0;
	if (i > LC_HIST_BUCKETS - 1) /* 2^25 us (33.5 s) and above: the last bucket */
		i = LC_HIST_BUCKETS - 1;
	while (i < LC_HIST_BUCKETS - 1 && ns > bound_ns(i))
		i++;
	return i;
}

void lc__hist_add(lc_histogram_t *h, uint64_t ns)
{
	h->count++;
	h->sum_ns += ns;
	h->buckets[lc__hist_bucket(ns)]++;
}

double lc_histogram_bucket_le_us(int index)
{
	if (index < 0 || index >= LC_HIST_BUCKETS - 1)
		return HUGE_VAL;
	return pow(2.0, index / 4.0);
}

double lc_histogram_quantile_us(const lc_histogram_t *h, double q)
{
	if (!h || !h->count || q <= 0)
		return 0;
	if (q > 1)
		q = 1;
	double rank = q * (double)h->count, seen = 0;
	for (int i = 0; i < LC_HIST_BUCKETS; i++) {
		double n = (double)h->buckets[i];
		if (seen + n >= rank && n > 0) {
			double lo = i ? lc_histogram_bucket_le_us(i - 1) : 0;
			double hi = lc_histogram_bucket_le_us(i);
			if (hi == HUGE_VAL)
				return lo;
			return lo + (hi - lo) * ((rank - seen) / n);
		}
		seen += n;
	}
	return lc_histogram_bucket_le_us(LC_HIST_BUCKETS - 2);
}
