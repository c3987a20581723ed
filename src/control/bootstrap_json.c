/* JSON field checks, replies and a growing string for the bootstrap
 * server and client. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/bootstrap_internal.h"

#ifdef LC__BS_BUILT

const char *const lc__bs_code_label[CODE_COUNT] = {"2xx", "400", "401", "404",
						   "405", "409", "413", "other"};

void lc__sb_printf(lc__sbuf_t *s, const char *fmt, ...)
{
	if (s->oom)
		return;
	for (;;) {
		va_list ap;
		size_t room = s->cap - s->len;
		va_start(ap, fmt);
		int n = vsnprintf(s->p ? s->p + s->len : NULL, s->p ? room : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			s->oom = true;
			return;
		}
		if (s->p && (size_t)n < room) {
			s->len += (size_t)n;
			return;
		}
		size_t cap = s->cap ? s->cap * 2 : 4096;
		while (cap < s->len + (size_t)n + 1)
			cap *= 2;
		char *np = realloc(s->p, cap);
		if (!np) {
			s->oom = true;
			return;
		}
		s->p = np;
		s->cap = cap;
	}
}

int lc__bs_code_index(int http)
{
	switch (http) {
	case 400:
		return CODE_400;
	case 401:
		return CODE_401;
	case 404:
		return CODE_404;
	case 405:
		return CODE_405;
	case 409:
		return CODE_409;
	case 413:
		return CODE_413;
	default:
		return http >= 200 && http < 300 ? CODE_2XX : CODE_OTHER;
	}
}

int lc__bs_reply_text(char **resp, size_t *len, int code, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	*resp = strdup(buf);
	*len = *resp ? strlen(*resp) : 0;
	return code;
}

int lc__bs_reply_json(char **resp, size_t *len, json_object *o)
{
	const char *s =
		json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
	*resp = strdup(s ? s : "{}");
	*len = *resp ? strlen(*resp) : 0;
	json_object_put(o);
	return 200;
}

/* Strict integer field: present, an int, in [lo, hi]. */
int lc__bs_json_int(json_object *o, const char *key, int64_t lo, int64_t hi, int64_t *out,
		    char *why, size_t cap)
{
	json_object *v;
	if (!json_object_object_get_ex(o, key, &v)) {
		snprintf(why, cap, "missing field \"%s\"", key);
		return -1;
	}
	if (!json_object_is_type(v, json_type_int)) {
		snprintf(why, cap, "field \"%s\" is not an integer", key);
		return -1;
	}
	errno = 0;
	int64_t x = json_object_get_int64(v);
	if (errno || x < lo || x > hi) {
		snprintf(why, cap, "field \"%s\" out of range [%lld, %lld]", key, (long long)lo,
			 (long long)hi);
		return -1;
	}
	*out = x;
	return 0;
}

/* Length of the UTF-8 sequence at p (n bytes left), or 0 when it is not
 * one well-formed scalar value (RFC 3629: no overlong forms, surrogates or
 * values past U+10FFFF); *cp gets the value. */
static size_t utf8_seq(const unsigned char *p, size_t n, uint32_t *cp)
{
	size_t len = p[0] < 0x80                    ? 1
		     : p[0] >= 0xc2 && p[0] <= 0xdf ? 2
		     : (p[0] & 0xf0) == 0xe0        ? 3
		     : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4
						    : 0;
	if (!len || len > n)
		return 0;
	uint32_t v = len == 1 ? p[0] : p[0] & (0x7f >> len);
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		v = (v << 6) | (p[i] & 0x3f);
	}
	static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
	if (v < min[len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return len;
}

const char *lc__bs_text_bad(const char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t k = utf8_seq((const unsigned char *)s + i, n - i, &cp);
		if (!k)
			return "is not valid UTF-8";
		if (cp == 0)
			return "holds a NUL";
		if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f))
			return "holds a control character";
		i += k;
	}
	return NULL;
}

const char *lc__bs_json_str(json_object *o, const char *key, bool required, size_t max, char *why,
			    size_t cap)
{
	json_object *v;
	if (!json_object_object_get_ex(o, key, &v)) {
		if (required)
			snprintf(why, cap, "missing field \"%s\"", key);
		return required ? NULL : "";
	}
	if (!json_object_is_type(v, json_type_string)) {
		snprintf(why, cap, "field \"%s\" is not a string", key);
		return NULL;
	}
	const char *s = json_object_get_string(v);
	/* json-c keeps an escaped \u0000 inside: the real length says so. */
	size_t n = (size_t)json_object_get_string_len(v);
	const char *bad = lc__bs_text_bad(s, n);
	if (bad) {
		snprintf(why, cap, "field \"%s\" %s", key, bad);
		return NULL;
	}
	if (n >= max || (required && !n)) {
		snprintf(why, cap, "field \"%s\" empty or longer than %zu", key, max - 1);
		return NULL;
	}
	return s;
}

/* A DNS name per RFC 1123: labels of 1-63 letters, digits and '-', not
 * starting or ending with '-', 253 characters at most (one trailing dot
 * allowed). */
static bool host_name_ok(const char *s)
{
	size_t n = strlen(s), label = 0;
	if (n && s[n - 1] == '.')
		n--;
	if (!n || n > 253)
		return false;
	for (size_t i = 0; i <= n; i++) {
		char c = i < n ? s[i] : '.';
		if (c == '.') {
			if (!label || s[i - 1] == '-')
				return false;
			label = 0;
		} else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			   (c >= '0' && c <= '9') || (c == '-' && label)) {
			if (++label > 63)
				return false;
		} else {
			return false;
		}
	}
	return true;
}

bool lc__bs_host_ok(const char *s)
{
	unsigned char a[sizeof(struct in6_addr)];
	if (!s || !*s)
		return false;
	if (inet_pton(AF_INET, s, a) == 1 || inet_pton(AF_INET6, s, a) == 1)
		return true;
	/* All digits and dots but not an IPv4 literal (256.1.1.1, 1.2.3): no
	 * resolver should be asked to make sense of it. */
	if (strspn(s, "0123456789.") == strlen(s))
		return false;
	return host_name_ok(s);
}

int lc__bs_fingerprint_parse(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	if (!s || strlen(s) != LC__BS_FP_DIGITS)
		return -1;
	for (int i = 0; i < LC__BS_FP_DIGITS; i++) {
		char c = s[i];
		unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
			     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
			     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
						    : 16u;
		if (d > 15)
			return -1;
		v = (v << 4) | d;
	}
	*out = v;
	return 0;
}

bool lc__bs_curve_key_ok(const char *s)
{
	static const char z85[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				  ".-:+=^!/*?&<>()[]{}@%$#";
	size_t n = strlen(s);
	return n == 0 || (n == 40 && strspn(s, z85) == n);
}

json_object *lc__bs_parse_obj(const char *s, size_t len)
{
	json_tokener *tok = json_tokener_new_ex(16);
	if (!tok)
		return NULL;
	json_object *o = json_tokener_parse_ex(tok, s, (int)len);
	if (json_tokener_get_error(tok) != json_tokener_success ||
	    !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		o = NULL;
	}
	json_tokener_free(tok);
	return o;
}

int lc__bs_parse_parallel(const char *s, size_t len, lc__parallel_info_t *out)
{
	json_object *j = lc__bs_parse_obj(s, len);
	int64_t w, d, reg = 0, layers = 0;
	char tmp[128];
	const char *fp;
	json_object *lens;
	int rc = LC_ERR_BOOTSTRAP;
	if (!j || lc__bs_json_int(j, "prefill_tp_size", 1, LC__BS_MAX_WORLD, &w, tmp, sizeof tmp) ||
	    lc__bs_json_int(j, "prefill_dp_size", 1, LC__BS_MAX_WORLD, &d, tmp, sizeof tmp) ||
	    w % d)
		goto out;
	lc__bs_json_int(j, "registered_ranks", 0, LC__BS_MAX_WORLD, &reg, tmp, sizeof tmp);
	lc__bs_json_int(j, "layers", 0, 1 << 20, &layers, tmp, sizeof tmp);
	out->world_size = (int)w;
	out->dp_size = (int)d;
	out->registered = (int)reg;
	out->layers = (uint32_t)layers;
	out->fingerprint = 0;
	out->nlens = 0;
	if (!(fp = lc__bs_json_str(j, "layout_fingerprint", false, 32, tmp, sizeof tmp)) ||
	    (*fp && lc__bs_fingerprint_parse(fp, &out->fingerprint)))
		goto out;
	if (json_object_object_get_ex(j, "kv_item_lens", &lens) &&
	    json_object_is_type(lens, json_type_array)) {
		size_t n = LC__MIN(json_object_array_length(lens), (size_t)LC__BS_MAX_LENS);
		for (size_t i = 0; i < n; i++)
			out->kv_item_lens[i] =
				(uint64_t)json_object_get_int64(json_object_array_get_idx(lens, i));
		out->nlens = (uint32_t)n;
	}
	rc = 0;
out:
	json_object_put(j);
	return rc;
}

int lc__bs_parse_rank(const char *s, size_t len, lc__rank_info_t *out)
{
	json_object *j = lc__bs_parse_obj(s, len);
	int64_t port;
	const char *ip, *key;
	char tmp[128];
	int rc = LC_ERR_BOOTSTRAP;
	if (j && (ip = lc__bs_json_str(j, "rank_ip", true, LC__BS_HOST_MAX, tmp, sizeof tmp)) &&
	    !lc__bs_json_int(j, "rank_port", 1, 65535, &port, tmp, sizeof tmp) &&
	    (key = lc__bs_json_str(j, "curve_public_key", false, LC__BS_KEY_MAX, tmp,
				   sizeof tmp)) &&
	    lc__bs_host_ok(ip) && lc__bs_curve_key_ok(key)) {
		snprintf(out->rank_ip, sizeof out->rank_ip, "%s", ip);
		out->rank_port = (int)port;
		snprintf(out->curve_key, sizeof out->curve_key, "%s", key);
		rc = 0;
	}
	json_object_put(j);
	return rc;
}

/* The PUT /route body of a P rank (bootstrap_internal.h). */
char *lc__bs_route_body(const lc__prefill_info_t *info, const char *owner, bool takeover)
{
	json_object *j = json_object_new_object();
	json_object *lens = json_object_new_array();
	if (!j || !lens) {
		json_object_put(j);
		json_object_put(lens);
		return NULL;
	}
	for (uint32_t i = 0; i < info->nlens; i++)
		json_object_array_add(lens, json_object_new_int64((int64_t)info->kv_item_lens[i]));
	char fp[32];
	snprintf(fp, sizeof fp, "%016llx", (unsigned long long)info->fingerprint);
	json_object_object_add(j, "role", json_object_new_string("Prefill"));
	json_object_object_add(j, "world_size", json_object_new_int(info->world_size));
	json_object_object_add(j, "dp_size", json_object_new_int(info->dp_size));
	json_object_object_add(j, "rank_ip", json_object_new_string(info->rank_ip));
	json_object_object_add(j, "rank_port", json_object_new_int(info->rank_port));
	json_object_object_add(j, "engine_rank", json_object_new_int(info->engine_rank));
	json_object_object_add(j, "enable_mla_l1_5_cache", json_object_new_boolean(0));
	json_object_object_add(j, "kv_item_lens", lens);
	json_object_object_add(j, "layout_fingerprint", json_object_new_string(fp));
	json_object_object_add(j, "layers", json_object_new_int((int)info->layers));
	if (info->curve_key[0])
		json_object_object_add(j, "curve_public_key",
				       json_object_new_string(info->curve_key));
	if (info->engine_id[0])
		json_object_object_add(j, "engine_id", json_object_new_string(info->engine_id));
	if (owner && *owner)
		json_object_object_add(j, "owner_token", json_object_new_string(owner));
	if (takeover)
		json_object_object_add(j, "takeover", json_object_new_boolean(1));
	const char *s = json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN);
	char *body = s ? strdup(s) : NULL;
	json_object_put(j);
	return body;
}

#else
typedef int lc__bs_json_unused_t; /* a translation unit may not be empty */

#endif
