/* Error table, version. */
#include <errno.h>
#include <string.h>

#include "core/common.h"

/* From the header's numbers, which CMakeLists.txt checks against project(VERSION). */
#define LC__STR_(x) #x
#define LC__STR(x) LC__STR_(x)

const char *lc_version(void)
{
	return LC__STR(LC_VERSION_MAJOR) "." LC__STR(LC_VERSION_MINOR) "." LC__STR(
		LC_VERSION_PATCH);
}

int lc_version_number(void)
{
	return LC_VERSION_MAJOR * 10000 + LC_VERSION_MINOR * 100 + LC_VERSION_PATCH;
}

const char *lc_strerror(int code)
{
	switch (code) {
#define LC__ERR_TEXT(name, value, text)                                                            \
	case value:                                                                                \
		return text;
		LC_ERROR_CODES(LC__ERR_TEXT)
#undef LC__ERR_TEXT
	default:
		break;
	}
	if (code < 0 && code > -4096)
		return strerror(-code); /* glibc: static text for known values */
	return "unknown error";
}

const char *lc_err_name(int code)
{
	switch (code) {
#define LC__ERR_NAME(name, value, text)                                                            \
	case value:                                                                                \
		return #name;
		LC_ERROR_CODES(LC__ERR_NAME)
#undef LC__ERR_NAME
	default:
		return "LC_UNKNOWN";
	}
}

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
