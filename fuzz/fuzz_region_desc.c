/* libFuzzer target: packed region descriptors (core/region.c), which come
 * from the network. Any input must be refused cleanly, or unpack into
 * frames that tile the key area exactly, with every key lookup inside the
 * input; a ucx key found there decodes only if its rkey fills its frame. */
#include <stdlib.h>
#include <string.h>

#include "core/region.h"
#include "transport/ucx/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	lc_region_desc_t d;
	if (lc_region_unpack(data, size, &d))
		return 0;
	const uint8_t *keys = data + LC__DESC_HEADER, *k;
	size_t len = size - LC__DESC_HEADER, at = 0, kl;
	while (at < len) { /* checked: whole frames, to the last byte */
		if (len - at < LC__KEY_FRAME)
			abort();
		at += LC__KEY_FRAME + lc__get_u16(keys + at + 2);
	}
	if (at != len)
		abort();
	for (uint32_t tag = 0; tag <= 0xffff; tag++) {
		if (!lc__region_key_find(keys, len, (uint16_t)tag, &k, &kl))
			continue;
		if (tag == 0 || k < keys + LC__KEY_FRAME || k + kl > data + size)
			abort();
		uw_key_t uk;
		if (tag == LC__KEY_TAG_UCX && !uw_key_decode(k, kl, &uk) &&
		    (uk.rkey + uk.rkey_len != k + kl))
			abort();
	}
	return 0;
}
