/*
 * Versioned parameter structs. Every public params struct starts with
 * `size_t size` (sizeof the struct the caller was compiled against, or 0
 * for "this library's size"), so the struct can grow without breaking old
 * callers. One helper copies them: dst is zero-filled (every field's default
 * is 0), then as many bytes as both sides know are copied. NULL params mean
 * all defaults.
 */
#ifndef LC_CORE_PARAMS_H
#define LC_CORE_PARAMS_H

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

#endif
