/* Receiver-side checks shared by every transport, the sender's source
 * lookup, and URL parsing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/transport.h"

int lc__recv_check(lc_ctx_t *ctx, uint64_t room, uint32_t region, uint64_t offset,
		   uint64_t length, uint8_t **dst, lc__grant_room_t **g)
{
	lc__region_info_t r;
	if (lc__regions_get(&ctx->regions, region, &r)) {
		LC__COUNT(ctx, writes_rejected_region);
		LC_WARN("rejected write for room %llu: unknown region %u",
			(unsigned long long)room, region);
		return LC_ERR_REGION;
	}
	if (offset > r.len || length > r.len - offset) {
		LC__COUNT(ctx, writes_rejected_range);
		LC_WARN("rejected write for room %llu: [%llu, +%llu) outside region %u of %zu bytes",
			(unsigned long long)room, (unsigned long long)offset,
			(unsigned long long)length, region, r.len);
		return LC_ERR_RANGE;
	}
	if (lc__grant_lookup(ctx->grants, room, region, offset, length, g)) {
		LC__COUNT(ctx, writes_rejected_grant);
		LC_WARN("rejected write for room %llu: region %u [%llu, +%llu) not granted",
			(unsigned long long)room, region, (unsigned long long)offset,
			(unsigned long long)length);
		return LC_ERR_GRANT;
	}
	*dst = r.addr + offset;
	return 0;
}

void lc__recv_count(lc_ctx_t *ctx, uint64_t writes, uint64_t bytes)
{
	LC__COUNT_ADD(ctx, writes_applied, writes);
	LC__COUNT_ADD(ctx, bytes_applied, bytes);
}

int lc__recv_copy(lc_ctx_t *ctx, uint64_t room, uint32_t region, uint64_t offset,
		  const void *src, uint64_t length)
{
	enum { SLICE = 4u << 20 }; /* keeps each bracket short for revoke */
	lc__grant_room_t *g;
	uint8_t *dst;
	int rc = lc__recv_check(ctx, room, region, offset, length, &dst, &g);
	if (rc)
		return rc;
	for (uint64_t done = 0; done < length;) {
		uint64_t n = LC__MIN(length - done, (uint64_t)SLICE);
		if (!lc__grant_enter(g)) {
			LC__COUNT(ctx, writes_rejected_grant);
			rc = LC_ERR_GRANT;
			break;
		}
		memcpy(dst + done, (const uint8_t *)src + done, n);
		lc__grant_exit(g);
		done += n;
	}
	lc__grant_put(g);
	if (!rc)
		lc__recv_count(ctx, 1, length);
	return rc;
}

int lc__local_find(lc_ctx_t *ctx, const void *addr, size_t len, lc__region_info_t *out)
{
	return lc__regions_find(&ctx->regions, addr, len, out);
}

int lc__url_host_port(const char *url, const char *scheme, char *host, size_t host_cap, int *port)
{
	size_t sl = strlen(scheme);
	if (strncmp(url, scheme, sl) || strncmp(url + sl, "://", 3))
		return -EINVAL;
	const char *h = url + sl + 3, *end = h + strcspn(h, "?/"), *colon;
	if (*h == '[') { /* [v6]:port */
		const char *rb = memchr(h, ']', (size_t)(end - h));
		if (!rb || rb[1] != ':')
			return -EINVAL;
		if ((size_t)(rb - h - 1) + 1 > host_cap)
			return -ENOSPC;
		memcpy(host, h + 1, (size_t)(rb - h - 1));
		host[rb - h - 1] = '\0';
		colon = rb + 1;
	} else {
		colon = NULL;
		for (const char *q = h; q < end; q++)
			if (*q == ':')
				colon = q;
		if (!colon)
			return -EINVAL;
		if ((size_t)(colon - h) + 1 > host_cap)
			return -ENOSPC;
		memcpy(host, h, (size_t)(colon - h));
		host[colon - h] = '\0';
	}
	char *e;
	long p = strtol(colon + 1, &e, 10);
	if (e != end || p < 0 || p > 65535 || e == colon + 1)
		return -EINVAL;
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
			if (*e && *e != '&')
				return -EINVAL;
			*out = v;
			return 1;
		}
		q = strchr(q, '&');
	}
	return 0;
}
