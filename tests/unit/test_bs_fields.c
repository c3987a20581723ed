/* The bootstrap server's field checks (control/bootstrap_json.c) on the
 * exact bytes a hostile registrant can send: text that is not UTF-8
 * (overlong forms, surrogates, values past U+10FFFF, cut sequences), NUL
 * and control characters; host names against RFC 1123; fingerprints and
 * CURVE keys of the wrong shape; integer and string fields of the wrong
 * type or range. Each refused with its reason, each good value kept. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "control/bootstrap_internal.h"
#include "testutil.h"

#ifdef LC__BS_BUILT

#define BAD(s, reason) assert_string_equal(lc__bs_text_bad((s), sizeof(s) - 1), (reason))

static void test_text(void **state)
{
	(void)state;
	assert_null(lc__bs_text_bad("plain", 5));
	assert_null(lc__bs_text_bad("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14));
	const char *utf8 = "is not valid UTF-8";
	BAD("\xc0\xaf", utf8);         /* overlong '/' (a lead byte never valid) */
	BAD("\xe0\x80\xaf", utf8);     /* overlong in three bytes */
	BAD("\xf0\x80\x80\xaf", utf8); /* overlong in four bytes */
	BAD("\xed\xa0\x80", utf8);     /* a surrogate, U+D800 */
	BAD("\xf4\x90\x80\x80", utf8); /* past U+10FFFF */
	BAD("\xf5\x80\x80\x80", utf8); /* a lead byte past f4 */
	BAD("ok\xe2\x82", utf8);       /* cut short */
	BAD("\xe2\x28\xa1", utf8);     /* a continuation byte that is not one */
	BAD("\x80", utf8);             /* a lone continuation byte */
	BAD("a\0b", "holds a NUL");
	BAD("tab\there", "holds a control character");
	BAD("del\x7f", "holds a control character");
	BAD("c1 \xc2\x85", "holds a control character"); /* U+0085, NEL */
	assert_null(lc__bs_text_bad("\xc2\xa0", 2));     /* U+00A0 is text */
}

static void test_hosts(void **state)
{
	(void)state;
	assert_true(lc__bs_host_ok("10.0.0.1"));
	assert_true(lc__bs_host_ok("fd00::1"));
	assert_true(lc__bs_host_ok("node-1.example.org"));
	assert_true(lc__bs_host_ok("node-1.example.org."));
	assert_false(lc__bs_host_ok(NULL));
	assert_false(lc__bs_host_ok(""));
	assert_false(lc__bs_host_ok("."));
	assert_false(lc__bs_host_ok("256.1.1.1"));
	assert_false(lc__bs_host_ok("1.2.3"));
	assert_false(lc__bs_host_ok("-node"));
	assert_false(lc__bs_host_ok("node-"));
	assert_false(lc__bs_host_ok("a..b"));
	assert_false(lc__bs_host_ok("a.-b"));
	assert_false(lc__bs_host_ok("node_1"));
	assert_false(lc__bs_host_ok("*"));
	assert_false(lc__bs_host_ok("host:80"));
	assert_false(lc__bs_host_ok("host/path"));
	char label[80], name[512];
	memset(label, 'a', 64);
	label[64] = '\0';
	assert_false(lc__bs_host_ok(label)); /* a label of 64 */
	label[63] = '\0';
	assert_true(lc__bs_host_ok(label)); /* 63 is the most */
	/* 258 characters, and 253 (the most) */
	snprintf(name, sizeof name, "%s.%s.%s.%s.ab", label, label, label, label);
	assert_int_equal(strlen(name), 258);
	assert_false(lc__bs_host_ok(name));
	snprintf(name, sizeof name, "%s.%s.%s.%.61s", label, label, label, label);
	assert_int_equal(strlen(name), 253);
	assert_true(lc__bs_host_ok(name));
}

static void test_fingerprint_and_key(void **state)
{
	(void)state;
	uint64_t v = 7;
	assert_int_equal(lc__bs_fingerprint_parse("00000000deadBEEF", &v), 0);
	assert_true(v == 0xdeadbeefull);
	v = 7;
	assert_int_equal(lc__bs_fingerprint_parse(NULL, &v), -1);
	assert_int_equal(lc__bs_fingerprint_parse("deadbeef", &v), -1);
	assert_int_equal(lc__bs_fingerprint_parse("0x000000deadbeef", &v), -1);
	assert_int_equal(lc__bs_fingerprint_parse("+000000deadbeefg", &v), -1);
	assert_int_equal(lc__bs_fingerprint_parse(" 00000000deadbee", &v), -1);
	assert_true(v == 7); /* untouched */
	assert_true(lc__bs_curve_key_ok(""));
	assert_true(lc__bs_curve_key_ok("0123456789abcdefghijABCDEFGHIJ.-:+=^!/*?"));
	assert_false(lc__bs_curve_key_ok("short"));
	assert_false(lc__bs_curve_key_ok("0123456789abcdefghijABCDEFGHIJ.-:+=^!/*\""));
}

static void test_fields(void **state)
{
	(void)state;
	const char body[] = "{\"n\": 5, \"big\": 99999999999, \"s\": \"x\", \"i\": \"5\","
			    " \"e\": \"\", \"nul\": \"a\\u0000b\", \"num\": 5}";
	json_object *o = lc__bs_parse_obj(body, sizeof body - 1);
	assert_non_null(o);
	char why[200];
	int64_t x = 0;
	assert_int_equal(lc__bs_json_int(o, "n", 1, 10, &x, why, sizeof why), 0);
	assert_true(x == 5);
	assert_int_equal(lc__bs_json_int(o, "n", 6, 10, &x, why, sizeof why), -1);
	assert_non_null(strstr(why, "out of range [6, 10]"));
	assert_int_equal(lc__bs_json_int(o, "big", 0, INT32_MAX, &x, why, sizeof why), -1);
	assert_int_equal(lc__bs_json_int(o, "i", 0, 10, &x, why, sizeof why), -1);
	assert_int_equal(lc__bs_json_int(o, "absent", 0, 10, &x, why, sizeof why), -1);
	assert_string_equal(lc__bs_json_str(o, "s", true, 8, why, sizeof why), "x");
	assert_string_equal(lc__bs_json_str(o, "absent", false, 8, why, sizeof why), "");
	assert_null(lc__bs_json_str(o, "absent", true, 8, why, sizeof why));
	assert_non_null(strstr(why, "missing field \"absent\""));
	assert_null(lc__bs_json_str(o, "num", true, 8, why, sizeof why));
	assert_non_null(strstr(why, "is not a string"));
	assert_null(lc__bs_json_str(o, "e", true, 8, why, sizeof why));
	assert_non_null(strstr(why, "empty or longer than 7"));
	assert_null(lc__bs_json_str(o, "s", true, 1, why, sizeof why));
	assert_null(lc__bs_json_str(o, "nul", true, 8, why, sizeof why));
	assert_non_null(strstr(why, "holds a NUL"));
	json_object_put(o);
	/* not an object, not JSON, a trailing half */
	assert_null(lc__bs_parse_obj("[1]", 3));
	assert_null(lc__bs_parse_obj("{\"a\":", 5));
	assert_null(lc__bs_parse_obj("nope", 4));
}

int main(void)
{
	lc_log_set_level(LC_LOG_OFF);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_text),
		cmocka_unit_test(test_hosts),
		cmocka_unit_test(test_fingerprint_and_key),
		cmocka_unit_test(test_fields),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
int main(void)
{
	return 77; /* built without the bootstrap server */
}
#endif
