/*
 * Versioned parameter structs: every lc_*_params_t starts with a size_t
 * `size` (0 = sizeof the caller's struct, which is this build's). A create
 * function copies what the caller gave into a zeroed local with
 * LC__PARAMS_COPY, so a NULL params, a shorter (older) struct and fields
 * the caller left zero all read as defaults, and a longer (newer) struct is
 * cut to what this build knows.
 */
#ifndef LC_CORE_PARAMS_H
#define LC_CORE_PARAMS_H

#include <stddef.h>
#include <string.h>

#include "core/common.h"

static inline void lc__params_copy(void *dst, size_t dst_size, const void *src)
{
	memset(dst, 0, dst_size);
	if (src) {
		size_t given = *(const size_t *)src;
		memcpy(dst, src, LC__MIN(given ? given : dst_size, dst_size));
	}
}

/* dst: pointer to the local struct; src: the caller's pointer, may be NULL. */
#define LC__PARAMS_COPY(dst, src) lc__params_copy((dst), sizeof(*(dst)), (src))

#endif
