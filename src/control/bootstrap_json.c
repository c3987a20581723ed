/* JSON field checks, replies and a growing string for the bootstrap
 * server and client. */
#include <errno.h>
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
	const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
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
	if (strlen(s) >= max || (required && !*s)) {
		snprintf(why, cap, "field \"%s\" empty or longer than %zu", key, max - 1);
		return NULL;
	}
	return s;
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

#else
typedef int lc__bs_json_unused_t; /* a translation unit may not be empty */
#endif
