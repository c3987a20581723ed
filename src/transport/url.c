/* URL parsing shared by the transports. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/transport.h"

/* Reasons are recorded (lc_last_error), not logged: a peer's URL reaches
 * here too, and its callers log in their own (rate-limited) way. */
int lc__url_host_port(const char *url, const char *scheme, char *host, size_t host_cap, int *port)
{
	size_t sl = strlen(scheme);
	if (!url) {
		lc__error_set(-EINVAL, "no %s:// URL given (NULL)", scheme);
		return -EINVAL;
	}
	if (strncmp(url, scheme, sl) || strncmp(url + sl, "://", 3)) {
		lc__error_set(-EINVAL, "%.200s: not a %s:// URL", url, scheme);
		return -EINVAL;
	}
	const char *h = url + sl + 3, *end = h + strcspn(h, "?/"), *colon;
	if (*h == '[') { /* [v6]:port */
		const char *rb = memchr(h, ']', (size_t)(end - h));
		if (!rb || rb[1] != ':') {
			lc__error_set(-EINVAL, "%.200s: %s", url,
				      rb ? "missing port (expected [v6]:port)"
					 : "no ']' after '['");
			return -EINVAL;
		}
		if ((size_t)(rb - h - 1) + 1 > host_cap) {
			lc__error_set(-ENOSPC, "%.200s: host longer than %zu bytes", url,
				      host_cap - 1);
			return -ENOSPC;
		}
		memcpy(host, h + 1, (size_t)(rb - h - 1));
		host[rb - h - 1] = '\0';
		colon = rb + 1;
	} else {
		colon = NULL;
		for (const char *q = h; q < end; q++)
			if (*q == ':')
				colon = q;
		if (!colon) {
			lc__error_set(-EINVAL, "%.200s: missing port (expected %s://host:port)",
				      url, scheme);
			return -EINVAL;
		}
		if ((size_t)(colon - h) + 1 > host_cap) {
			lc__error_set(-ENOSPC, "%.200s: host longer than %zu bytes", url,
				      host_cap - 1);
			return -ENOSPC;
		}
		memcpy(host, h, (size_t)(colon - h));
		host[colon - h] = '\0';
	}
	char *e;
	long p = strtol(colon + 1, &e, 10);
	if (e != end || p < 0 || p > 65535 || e == colon + 1) {
		lc__error_set(-EINVAL, "%.200s: port '%.*s' is not a number in 0..65535", url,
			      (int)(end - colon - 1), colon + 1);
		return -EINVAL;
	}
	*port = (int)p;
	return 0;
}

int lc__url_query_u64(const char *url, const char *key, uint64_t *out)
{
	const char *q = strchr(url, '?');
	size_t kl = strlen(key);
	while (q) {
		q++;
		if (!strncmp(q, key, kl) && q[kl] == '=') {
			char *e;
			unsigned long long v = strtoull(q + kl + 1, &e, 0);
			if (*e && *e != '&') {
				lc__error_set(-EINVAL, "%.200s: %s=%.*s is not a number", url, key,
					      (int)strcspn(q + kl + 1, "&"), q + kl + 1);
				return -EINVAL;
			}
			*out = v;
			return 1;
		}
		q = strchr(q, '&');
	}
	return 0;
}
