/* The address rule (control/addr.h): wildcards, loopback, host:port with
 * IPv6 literals, what a wildcard listener URL becomes for a peer, and the
 * loopback-to-another-host refusal. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "control/addr.h"
#include "testutil.h"

static void test_wildcard_and_loopback(void **state)
{
	(void)state;
	assert_true(lc__addr_is_wildcard(NULL));
	assert_true(lc__addr_is_wildcard(""));
	assert_true(lc__addr_is_wildcard("*"));
	assert_true(lc__addr_is_wildcard("0.0.0.0"));
	assert_true(lc__addr_is_wildcard("::"));
	assert_false(lc__addr_is_wildcard("10.0.0.1"));
	assert_true(lc__addr_is_loopback("127.0.0.1"));
	assert_true(lc__addr_is_loopback("127.3.2.1"));
	assert_true(lc__addr_is_loopback("::1"));
	assert_true(lc__addr_is_loopback("::ffff:127.0.0.1"));
	assert_true(lc__addr_is_loopback("localhost"));
	assert_false(lc__addr_is_loopback("10.0.0.1"));
	assert_false(lc__addr_is_loopback("fe80::1"));
	assert_false(lc__addr_is_loopback("0.0.0.0"));
}

static void test_split_and_join(void **state)
{
	(void)state;
	char host[LC__ADDR_HOST_MAX], out[300];
	int port;
	assert_int_equal(lc__addr_split("10.1.2.3:8998", host, sizeof host, &port), 0);
	assert_string_equal(host, "10.1.2.3");
	assert_int_equal(port, 8998);
	assert_int_equal(lc__addr_split("tcp://[fd00::1]:5000", host, sizeof host, &port), 0);
	assert_string_equal(host, "fd00::1");
	assert_int_equal(port, 5000);
	assert_int_equal(lc__addr_split("ucx://[::]:0?lanes=2", host, sizeof host, &port), 0);
	assert_string_equal(host, "::");
	assert_int_equal(port, 0);
	assert_int_equal(lc__addr_split("no-port", host, sizeof host, &port), -EINVAL);
	assert_int_equal(lc__addr_split("h:99999", host, sizeof host, &port), -EINVAL);
	assert_int_equal(lc__addr_split("[fd00::1:5", host, sizeof host, &port), -EINVAL);
	lc__addr_join("fd00::1", 7, out, sizeof out);
	assert_string_equal(out, "[fd00::1]:7");
	lc__addr_join("10.0.0.1", 7, out, sizeof out);
	assert_string_equal(out, "10.0.0.1:7");
}

static void test_route_local(void **state)
{
	(void)state;
	char out[LC__ADDR_HOST_MAX];
	assert_int_equal(lc__addr_route_local("127.0.0.1", out, sizeof out), 0);
	assert_string_equal(out, "127.0.0.1");
	/* A wildcard: this host's primary address, never a wildcard. */
	assert_int_equal(lc__addr_route_local("0.0.0.0", out, sizeof out), 0);
	assert_false(lc__addr_is_wildcard(out));
	assert_true(lc__addr_route_local("name.invalid", out, sizeof out) < 0);
}

static void test_url_for_a_peer(void **state)
{
	(void)state;
	char out[300], why[300];
	unsetenv("LAYERCAKE_ADVERTISE_HOST");
	/* A wildcard becomes the route's address; anything else is kept. */
	assert_int_equal(lc__addr_url_for("tcp://0.0.0.0:4000", "127.0.0.1", out, sizeof out, why,
					  sizeof why),
			 0);
	assert_string_equal(out, "tcp://127.0.0.1:4000");
	assert_int_equal(lc__addr_url_for("ucx://[::]:4001?x=1", "127.0.0.1", out, sizeof out, why,
					  sizeof why),
			 0);
	assert_string_equal(out, "ucx://127.0.0.1:4001?x=1");
	assert_int_equal(
		lc__addr_url_for("tcp://10.9.9.9:1", "127.0.0.1", out, sizeof out, why, sizeof why),
		0);
	assert_string_equal(out, "tcp://10.9.9.9:1");
	assert_int_equal(
		lc__addr_url_for("shm://lc-1-2", "10.0.0.1", out, sizeof out, why, sizeof why), 0);
	assert_string_equal(out, "shm://lc-1-2");
	/* The public address wins over the route. */
	setenv("LAYERCAKE_ADVERTISE_HOST", "fd00::7", 1);
	assert_int_equal(lc__addr_url_for("tcp://0.0.0.0:4000", "127.0.0.1", out, sizeof out, why,
					  sizeof why),
			 0);
	assert_string_equal(out, "tcp://[fd00::7]:4000");
	unsetenv("LAYERCAKE_ADVERTISE_HOST");
}

static void test_loopback_to_another_host(void **state)
{
	(void)state;
	assert_false(lc__addr_loopback_wrong("tcp://127.0.0.1:5", "127.0.0.1"));
	assert_false(lc__addr_loopback_wrong("tcp://10.0.0.1:5", "192.0.2.77"));
	/* 192.0.2.77 (TEST-NET-1) is no address of this host. */
	assert_true(lc__addr_loopback_wrong("tcp://127.0.0.1:5", "192.0.2.77"));
	assert_true(lc__addr_loopback_wrong("tcp://[::1]:5", "192.0.2.77"));
}

/* The edges a caller's URL can hit: each refused, or answered exactly. */
static void test_edges(void **state)
{
	(void)state;
	char host[LC__ADDR_HOST_MAX], out[300], why[300], tiny[8];
	int port;
	assert_true(lc__addr_is_wildcard("[::]"));
	assert_false(lc__addr_is_loopback(NULL));
	assert_false(lc__addr_is_loopback("::ffff:10.0.0.1"));
	assert_true(lc__addr_is_loopback("::ffff:127.9.9.9"));
	assert_false(lc__addr_is_loopback("not-an-address"));
	/* a bracket not followed by ':', an empty or signed or trailing port */
	assert_int_equal(lc__addr_split("[::1]5", host, sizeof host, &port), -EINVAL);
	assert_int_equal(lc__addr_split("h:", host, sizeof host, &port), -EINVAL);
	assert_int_equal(lc__addr_split("h:-1", host, sizeof host, &port), -EINVAL);
	assert_int_equal(lc__addr_split("h:5x", host, sizeof host, &port), -EINVAL);
	assert_int_equal(lc__addr_split("h:5/path", host, sizeof host, &port), 0);
	assert_int_equal(port, 5);
	/* a host longer than the caller's buffer */
	assert_int_equal(lc__addr_split("long-host-name:5", tiny, sizeof tiny, &port), -EINVAL);
	/* IPv6 routes, and an answer that does not fit */
	if (lc__addr_route_local("::1", out, sizeof out) == 0)
		assert_string_equal(out, "::1");
	assert_int_equal(lc__addr_route_local("127.0.0.1", tiny, 4), -ENOSPC);
	/* A URL kept as it is, or rewritten, into too small a buffer. */
	unsetenv("LAYERCAKE_ADVERTISE_HOST");
	assert_int_equal(lc__addr_url_for("shm://a-long-name", "127.0.0.1", tiny, sizeof tiny, why,
					  sizeof why),
			 -ENOSPC);
	assert_int_equal(lc__addr_url_for("tcp://0.0.0.0:4000", "127.0.0.1", tiny, sizeof tiny, why,
					  sizeof why),
			 -ENOSPC);
	/* No route towards the peer: the reason names it. */
	why[0] = '\0';
	assert_true(lc__addr_url_for("tcp://0.0.0.0:4000", "name.invalid", out, sizeof out, why,
				     sizeof why) < 0);
	assert_non_null(strstr(why, "no route from this host towards name.invalid"));
	/* A bound address is advertised as it is. */
	assert_int_equal(
		lc__addr_advertise("10.1.1.1", "127.0.0.1", out, sizeof out, why, sizeof why), 0);
	assert_string_equal(out, "10.1.1.1");
	/* A told URL that does not parse is not a loopback one. */
	assert_false(lc__addr_loopback_wrong("no-port", "192.0.2.77"));
	assert_false(lc__addr_loopback_wrong("tcp://127.0.0.1:5", "::1"));
}

/* A bootstrap address: each way of getting it wrong says what is wrong. */
static void test_bootstrap_forms(void **state)
{
	(void)state;
	char out[300], tiny[8], longer[400];
	static const struct {
		const char *addr, *words;
	} bad[] = {
		{NULL, "no bootstrap address given"},
		{"", "no bootstrap address given"},
		{"http://", "no host"},
		{"/", "no host"},
		{"h:1?x=1", "a bootstrap address has no path"},
		{"h:1/route/", "a bootstrap address has no path"},
		{"[::1]", "missing port"},
		{"[::1]x:5", "missing port"},
		{"h:", "missing port"},
		{"h:99999", "the port is not a number in 1..65535"},
		{"h:-5", "the port is not a number in 1..65535"},
		{"ucx://h:5", "ucx:// is not the bootstrap server's scheme"},
		{"http://tcp://h:5", "tcp:// is not the bootstrap server's scheme"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		lc_last_error_clear();
		int rc = lc__addr_bootstrap(bad[i].addr, out, sizeof out);
		if (rc != -EINVAL || lc_last_error_code() != -EINVAL ||
		    !strstr(lc_last_error(), bad[i].words) ||
		    !strstr(lc_last_error(), "host:port, [v6]:port or http://host:port"))
			fail_msg("%s: %d \"%s\", want \"%s\"", bad[i].addr ? bad[i].addr : "NULL",
				 rc, lc_last_error(), bad[i].words);
	}
	/* Longer than the caller's buffer, or than any host. */
	assert_int_equal(lc__addr_bootstrap("10.0.0.1:8998", tiny, sizeof tiny), -EINVAL);
	assert_non_null(strstr(lc_last_error(), "too long"));
	memset(longer, 'h', sizeof longer);
	snprintf(longer + sizeof longer - 8, 8, ":8998");
	assert_int_equal(lc__addr_bootstrap(longer, out, sizeof out), -EINVAL);
	assert_non_null(strstr(lc_last_error(), "too long"));
	/* What is accepted comes back without scheme or trailing slash. */
	assert_int_equal(lc__addr_bootstrap("http://[fd00::1]:7/", out, sizeof out), 0);
	assert_string_equal(out, "[fd00::1]:7");
	assert_int_equal(lc__addr_bootstrap("bs.example:65535", out, sizeof out), 0);
	assert_string_equal(out, "bs.example:65535");
}

/* IPv4-mapped loopback peers, and URLs kept as they are. */
static void test_mapped_and_kept(void **state)
{
	(void)state;
	char out[300], why[300];
	assert_false(lc__addr_loopback_wrong("tcp://127.0.0.1:5", "::ffff:127.0.0.1"));
	assert_true(lc__addr_is_loopback("::ffff:127.0.0.1"));
	assert_false(lc__addr_is_loopback("::ffff:128.0.0.1"));
	assert_false(lc__addr_is_loopback("::2"));
	unsetenv("LAYERCAKE_ADVERTISE_HOST");
	/* A scheme with no port: not a listener URL to rewrite, kept. */
	assert_int_equal(
		lc__addr_url_for("tcp://nohost", "127.0.0.1", out, sizeof out, why, sizeof why), 0);
	assert_string_equal(out, "tcp://nohost");
	/* A wildcard towards an IPv6 loopback peer: the route's address. */
	if (lc__addr_route_local("::1", out, sizeof out) == 0) {
		assert_int_equal(
			lc__addr_url_for("tcp://[::]:9", "::1", out, sizeof out, why, sizeof why),
			0);
		assert_string_equal(out, "tcp://[::1]:9");
	}
	/* The public address wins over a bound one too. */
	setenv("LAYERCAKE_ADVERTISE_HOST", "d.example", 1);
	assert_int_equal(
		lc__addr_advertise("10.1.1.1", "127.0.0.1", out, sizeof out, why, sizeof why), 0);
	assert_string_equal(out, "d.example");
	unsetenv("LAYERCAKE_ADVERTISE_HOST");
}

int main(void)
{
	lc_log_set_level(LC_LOG_OFF);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wildcard_and_loopback),
		cmocka_unit_test(test_split_and_join),
		cmocka_unit_test(test_route_local),
		cmocka_unit_test(test_url_for_a_peer),
		cmocka_unit_test(test_loopback_to_another_host),
		cmocka_unit_test(test_edges),
		cmocka_unit_test(test_bootstrap_forms),
		cmocka_unit_test(test_mapped_and_kept),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
