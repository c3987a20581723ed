/* The error codes as a table that bindings read (lc_err_count, lc_err_code).
 * Apart from error.c because it reports misuse through lc__fail (log.c),
 * which itself names codes through error.c. */
#include <errno.h>

#include "core/common.h"

static const int err_codes[] = {
#define LC__ERR_VALUE(name, value, text) value,
	LC_ERROR_CODES(LC__ERR_VALUE)
#undef LC__ERR_VALUE
};

int lc_err_count(void)
{
	return (int)LC__ARRAY_SIZE(err_codes);
}

int lc_err_code(int index, int *out)
{
	if (!out)
		return LC__FAIL(-EINVAL, "lc_err_code: out is NULL");
	if (index < 0 || index >= lc_err_count())
		return LC__FAIL(-ERANGE, "lc_err_code: index %d is not in 0..%d", index,
				lc_err_count() - 1);
	*out = err_codes[index];
	return 0;
}
