/*
 * Versioned parameter structs, one idiom for every public call that takes
 * one. Every public params struct starts with `size_t size` (sizeof the
 * struct the caller was compiled against), so the struct can grow without
 * breaking old callers.
 *
 * - LC__PARAMS_COPY copies the caller's struct into a local one: dst is
 *   zero-filled (every field's default is 0), then as many bytes as both
 *   sides know are copied; NULL params mean all defaults. Size 0 is taken
 *   as this library's size there. The call then reads only its copy.
 * - A call with required fields checks first that the caller's struct
 *   reaches them: LC__PARAMS_SHORT(src, type, member) is true when
 *   src->size does not cover `member` (size 0, a forgotten size, covers
 *   nothing), and LC__PARAMS_SHORT_TEXT(what, type) is the one message for
 *   it, given with -EINVAL through lc_last_error. NULL params there fail as
 *   the required fields left unset would (-EINVAL, layercake/base.h).
 * - LC__PARAMS_TAKE is the whole guard of a call that takes a handle and
 *   such a struct: it fails the call with -EINVAL and "call: <cause>", the
 *   cause naming the first of the handle NULL ("<hname> is NULL"), the
 *   params NULL ("<sname> is NULL") and the params too short to reach
 *   `member`; otherwise it copies them into dst (LC__PARAMS_COPY).
 */
#ifndef LC_CORE_PARAMS_H
#define LC_CORE_PARAMS_H

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "core/common.h"

#define LC__PARAMS_COPY(dst, src)                                                                  \
	do {                                                                                       \
		memset((dst), 0, sizeof *(dst));                                                   \
		if (src)                                                                           \
			memcpy((dst), (src),                                                       \
			       LC__MIN((src)->size ? (size_t)(src)->size : sizeof *(dst),          \
				       sizeof *(dst)));                                            \
	} while (0)

#define LC__PARAMS_SHORT(src, type, member)                                                        \
	((size_t)(src)->size < offsetof(type, member) + sizeof(((type *)0)->member))
#define LC__PARAMS_SHORT_TEXT(what, type) what "->size is too small (set it to sizeof(" #type "))"

#define LC__PARAMS_TAKE(call, h, hname, dst, src, sname, type, member)                             \
	do {                                                                                       \
		if (!(h) || !(src) || LC__PARAMS_SHORT(src, type, member))                         \
			return LC__FAIL(-EINVAL, call ": %s",                                      \
					!(h)     ? hname " is NULL"                                \
					: !(src) ? sname " is NULL"                                \
						 : LC__PARAMS_SHORT_TEXT(sname, type));            \
		LC__PARAMS_COPY(dst, src);                                                         \
	} while (0)

#endif
