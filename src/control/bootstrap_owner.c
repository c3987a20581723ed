/*
 * P's side of an owned route (docs/control-plane.md, "Owned routes"): the
 * PUT /route that claims a rank and the ones that refresh it, carrying the
 * owner token the first one got. The TokenSpeed fields are those of
 * lc__bootstrap_register (bootstrap_client.c); owner_token and takeover are
 * ours, and the reply's JSON gives the token and the route's life.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control/bootstrap_internal.h"

#ifdef LC__BS_BUILT

/* The 200 reply: owner_token (32 hex) and ttl_ms; 0 or -1. A server that
 * predates owned routes answers "OK": no token, no life (*ttl_ms 0). */
static int claim_reply(const char *resp, size_t len, char *owner, uint64_t *ttl_ms)
{
	*ttl_ms = 0;
	if (!resp || !len || resp[0] != '{')
		return 0;
	json_object *j = lc__bs_parse_obj(resp, len);
	char tmp[128];
	const char *tok;
	int64_t ttl = 0;
	int rc = -1;
	if (j &&
	    (tok = lc__bs_json_str(j, "owner_token", true, LC__BS_OWNER_LEN + 1, tmp,
				   sizeof tmp)) &&
	    strlen(tok) == LC__BS_OWNER_LEN &&
	    !lc__bs_json_int(j, "ttl_ms", 1, INT64_MAX, &ttl, tmp, sizeof tmp)) {
		memcpy(owner, tok, LC__BS_OWNER_LEN + 1);
		*ttl_ms = (uint64_t)ttl;
		rc = 0;
	}
	json_object_put(j);
	return rc;
}

int lc__bootstrap_claim(const char *addr, const lc__prefill_info_t *info, bool takeover,
			const lc__http_opts_t *o, char *owner, uint64_t *ttl_ms, char *why,
			size_t why_cap)
{
	char *body = lc__bs_route_body(info, owner, takeover);
	if (!body)
		return -ENOMEM;
	char url[LC__BS_HOST_MAX + 64];
	snprintf(url, sizeof url, "http://%s/route",
		 !strncmp(addr, "http://", 7) ? addr + 7 : addr);
	int timeout = o && o->timeout_ms > 0 ? o->timeout_ms : 2000;
	int retries = o && o->retries >= 0 ? LC__MIN(o->retries, 20) : 2;
	unsigned pause_ms = 50;
	char *resp = NULL;
	size_t len = 0;
	int code = LC_ERR_UNREACHABLE;
	for (int attempt = 0; attempt <= retries; attempt++) {
		if (attempt) {
			usleep(pause_ms * 1000);
			pause_ms = LC__MIN(pause_ms * 2, 1000u);
		}
		free(resp);
		resp = NULL;
		code = lc__http_request("PUT", url, body, strlen(body), o ? o->secret : NULL,
					timeout, &resp, &len);
		if (code > 0 && code < 500)
			break;
	}
	free(body);
	int rc;
	if (code == 200) {
		rc = claim_reply(resp, len, owner, ttl_ms);
		if (rc) {
			snprintf(why, why_cap, "PUT /route: malformed reply");
			rc = LC_ERR_BOOTSTRAP;
		}
	} else if (code < 0) {
		snprintf(why, why_cap, "PUT /route: %s", lc_strerror(code));
		rc = code == LC_ETIMEDOUT ? LC_ERR_UNREACHABLE : code;
	} else {
		snprintf(why, why_cap, "PUT /route: HTTP %d: %.200s", code, resp ? resp : "");
		bool taken = code == 409 && resp && strstr(resp, LC__BS_TAKEN_TEXT);
		rc = code == 401 ? LC_ERR_AUTH : taken ? -EEXIST : LC_ERR_BOOTSTRAP;
	}
	free(resp);
	return rc;
}

#else

int lc__bootstrap_claim(const char *addr, const lc__prefill_info_t *info, bool takeover,
			const lc__http_opts_t *o, char *owner, uint64_t *ttl_ms, char *why,
			size_t why_cap)
{
	return LC_ENOTSUP;
}

#endif
