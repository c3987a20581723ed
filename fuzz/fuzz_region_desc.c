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
		uint16_t tag = lc__get_u16(keys + at), flen = lc__get_u16(keys + at + 2);
		/* Tags are unique: the lookup finds this very frame. */
		if (tag == 0 || lc__region_key_find(keys, len, tag, &k, &kl) != 1 ||
		    k != keys + at + LC__KEY_FRAME || kl != flen)
			abort();
		uw_key_t uk;
		if (tag == LC__KEY_TAG_UCX && !uw_key_decode(k, kl, &uk) &&
		    uk.rkey + uk.rkey_len != k + kl)
			abort();
		at += LC__KEY_FRAME + flen;
	}
	if (at != len || lc__region_key_find(keys, len, 0, &k, &kl) != 0 || k || kl)
		abort();
	return 0;
}
