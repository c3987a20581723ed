/*
 * libFuzzer target: D's reading of the bootstrap server's JSON replies
 * (lc__bs_parse_parallel, lc__bs_parse_rank: what lc__bootstrap_get_parallel
 * and lc__bootstrap_get_rank do with a 200's body), i.e. what a broken or
 * hostile bootstrap server can make a decode rank read. (The server's own
 * JSON parsing, PUT /route bodies, is fuzz_bootstrap; the HTTP statuses,
 * non-HTTP answers and oversize bodies are tests/unit/test_bs_client.c's,
 * with real libcurl against a raw socket.)
 *
 * Input: byte 0 picks the reply (even: parallel layout, odd: rank); the
 * rest is the body.
 *
 * Invariants beyond the sanitizers: a successful parse yields values
 * inside the documented bounds, and strings are NUL-terminated.
 */
#include <stdlib.h>
#include <string.h>

#include "control/bootstrap_internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	lc_log_set_level(LC_LOG_OFF);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > (1u << 20))
		return 0;
	const char *body = (const char *)data + 1;
	size_t len = size - 1;
	if (data[0] % 2 == 0) {
		static lc__parallel_info_t pi;
		if (lc__bs_parse_parallel(body, len, &pi) == 0) {
			if (pi.world_size < 1 || pi.world_size > LC__BS_MAX_WORLD ||
			    pi.dp_size < 1 || pi.world_size % pi.dp_size ||
			    pi.nlens > LC__BS_MAX_LENS)
				abort();
		}
	} else {
		lc__rank_info_t ri;
		if (lc__bs_parse_rank(body, len, &ri) == 0) {
			if (ri.rank_port < 1 || ri.rank_port > 65535 ||
			    !memchr(ri.rank_ip, 0, sizeof ri.rank_ip) || !ri.rank_ip[0] ||
			    !memchr(ri.curve_key, 0, sizeof ri.curve_key))
				abort();
		}
	}
	return 0;
}
