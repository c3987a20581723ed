/* libFuzzer target: the control-plane message decoder. Any input must be
 * rejected cleanly or decode into a message that encodes back to the same
 * bytes. */
#include <stdlib.h>
#include <string.h>

#include "control/codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	lc__msg_t m;
	char why[200];
	if (lc__msg_decode(data, size, &m, why, sizeof why))
		return 0;
	uint8_t *buf = NULL;
	size_t len = 0;
	if (lc__msg_encode(&m, &buf, &len) != 0 || len != size || memcmp(buf, data, size))
		abort(); /* a decoded message must round-trip exactly */
	free(buf);
	lc__msg_free(&m);
	return 0;
}
