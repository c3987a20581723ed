/*
 * The shared secret (control/shared_secret.h) and what it is derived with
 * (core/kdf.h): SHA-256, HMAC-SHA256 and HKDF-SHA256 against the vectors of
 * FIPS 180-4, RFC 4231 and RFC 5869; the derivation (floor, determinism,
 * separation); where the secret is read from (parameter, variable, file;
 * a file named and missing or empty is an error); and a bootstrap server
 * that takes the derived bearer beside an explicit secret.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "control/bootstrap.h"
#include "control/shared_secret.h"
#include "core/kdf.h"
#include "testutil.h"

#define SECRET "0123456789abcdef0123456789abcdef"

static void hex(const uint8_t *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

static void sha(const char *msg, const char *want)
{
	uint8_t d[32];
	char h[65];
	lc__sha256_t s;
	lc__sha256_init(&s);
	/* In uneven pieces: the buffering must not matter. */
	size_t n = strlen(msg), i = 0, step = 1;
	while (i < n) {
		size_t k = n - i < step ? n - i : step;
		lc__sha256_update(&s, msg + i, k);
		i += k;
		step = step * 3 + 1;
	}
	lc__sha256_final(&s, d);
	hex(d, 32, h);
	assert_string_equal(h, want);
}

static void sha256_vectors(void **state)
{
	(void)state;
	sha("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	sha("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
	    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	/* 1,000,000 'a's: many full blocks through the fast path. */
	char *m = malloc(1000001);
	memset(m, 'a', 1000000);
	m[1000000] = '\0';
	sha(m, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	free(m);
}

static void hmac_vectors(void **state)
{
	(void)state;
	uint8_t key[131], d[32];
	char h[65];
	memset(key, 0x0b, 20);
	lc__hmac_sha256(key, 20, "Hi There", 8, d);
	hex(d, 32, h);
	assert_string_equal(h, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
	lc__hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, d);
	hex(d, 32, h);
	assert_string_equal(h, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
	memset(key, 0xaa, sizeof key); /* a key longer than a block is hashed first */
	const char *msg = "Test Using Larger Than Block-Size Key - Hash Key First";
	lc__hmac_sha256(key, sizeof key, msg, strlen(msg), d);
	hex(d, 32, h);
	assert_string_equal(h, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

static void hkdf_vectors(void **state)
{
	(void)state;
	uint8_t ikm[22], salt[13], info[10], okm[42];
	char h[85];
	memset(ikm, 0x0b, sizeof ikm);
	for (int i = 0; i < 13; i++)
		salt[i] = (uint8_t)i;
	for (int i = 0; i < 10; i++)
		info[i] = (uint8_t)(0xf0 + i);
	assert_int_equal(lc__hkdf_sha256(salt, sizeof salt, ikm, sizeof ikm, info, sizeof info, okm,
					 sizeof okm),
			 0);
	hex(okm, sizeof okm, h);
	assert_string_equal(h, "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
			       "34007208d5b887185865");
	assert_int_equal(lc__hkdf_sha256(NULL, 0, ikm, sizeof ikm, NULL, 0, okm, sizeof okm), 0);
	hex(okm, sizeof okm, h);
	assert_string_equal(h, "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d"
			       "9d201395faa4b61a96c8");
	assert_int_equal(lc__hkdf_sha256(NULL, 0, ikm, 1, NULL, 0, okm, 255 * 32 + 1), -EINVAL);
}

static void derivation(void **state)
{
	(void)state;
	lc__shared_t a, b, c;
	assert_int_equal(lc__shared_derive(SECRET, 31, &a), -EINVAL); /* under the floor */
	assert_false(a.set);
	assert_int_equal(lc__shared_derive("0123456789abcdef\n123456789abcdef", 32, &a), -EINVAL);
	assert_int_equal(lc__shared_derive(SECRET, strlen(SECRET), &a), 0);
	assert_int_equal(lc__shared_derive(SECRET, strlen(SECRET), &b), 0);
	assert_true(a.set);
	assert_int_equal(strlen(a.bearer), LC__SHARED_BEARER_LEN);
	assert_int_equal(strspn(a.bearer, "0123456789abcdef"), LC__SHARED_BEARER_LEN);
	/* The same secret, the same keys everywhere; none of them the secret. */
	assert_memory_equal(&a, &b, sizeof a);
	assert_null(strstr(a.bearer, SECRET));
	if (a.curve_public[0]) { /* built with ZeroMQ */
		assert_int_equal(strlen(a.curve_public), LC__SHARED_KEY_LEN);
		assert_int_equal(strlen(a.curve_secret), LC__SHARED_KEY_LEN);
		assert_string_not_equal(a.curve_public, a.curve_secret);
	}
	/* One character off: every key differs. */
	assert_int_equal(lc__shared_derive("0123456789abcdef0123456789abcdeF", 32, &c), 0);
	assert_string_not_equal(a.bearer, c.bearer);
	if (a.curve_public[0])
		assert_string_not_equal(a.curve_public, c.curve_public);
	lc__shared_wipe(&a);
	assert_false(a.set);
	assert_string_equal(a.bearer, "");
}

static void where_it_is_read(void **state)
{
	(void)state;
	lc__shared_t a, b;
	char path[] = "/tmp/lc-shared-XXXXXX";
	unsetenv("LAYERCAKE_SHARED_SECRET");
	unsetenv("LAYERCAKE_SHARED_SECRET_FILE");
	assert_int_equal(lc__shared_load(NULL, "test", &a), 0);
	assert_false(a.set);
	assert_int_equal(lc__shared_load("short", "test", &a), -EINVAL);
	assert_int_equal(lc__shared_load(SECRET, "test", &a), 1);
	setenv("LAYERCAKE_SHARED_SECRET", SECRET, 1);
	assert_int_equal(lc__shared_load(NULL, "test", &b), 1);
	assert_memory_equal(&a, &b, sizeof a);
	unsetenv("LAYERCAKE_SHARED_SECRET");
	/* A file: its first line. */
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, SECRET "\nnot this\n", strlen(SECRET) + 10),
			 (ssize_t)strlen(SECRET) + 10);
	close(fd);
	setenv("LAYERCAKE_SHARED_SECRET_FILE", path, 1);
	assert_int_equal(lc__shared_load(NULL, "test", &b), 1);
	assert_memory_equal(&a, &b, sizeof a);
	/* The parameter goes first. */
	assert_int_equal(lc__shared_load("fedcba9876543210fedcba9876543210", "test", &b), 1);
	assert_string_not_equal(a.bearer, b.bearer);
	/* A file named and empty, or missing: an error, never "no secret". */
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "\n", 1), 1);
	close(fd);
	assert_int_equal(lc__shared_load(NULL, "test", &b), -ENODATA);
	unlink(path);
	assert_int_equal(lc__shared_load(NULL, "test", &b), -ENOENT);
	lc_bootstrap_t *bs;
	lc_bootstrap_params_t p = {.size = sizeof p, .host = "127.0.0.1", .port = 0};
	assert_int_equal(lc_bootstrap_start(&p, &bs), -ENOENT);
	unsetenv("LAYERCAKE_SHARED_SECRET_FILE");
}

/* PUT /route at addr with bearer auth: the HTTP status. */
static int put(const char *addr, int port, const char *auth)
{
	char url[128], body[512], *resp = NULL;
	size_t len;
	snprintf(url, sizeof url, "http://%s/route", addr);
	snprintf(body, sizeof body,
		 "{\"role\":\"Prefill\",\"world_size\":2,\"dp_size\":1,\"rank_ip\":\"127.0.0.1\","
		 "\"rank_port\":%d,\"engine_rank\":%d,\"kv_item_lens\":[4096],"
		 "\"layout_fingerprint\":\"00000000deadbeef\",\"layers\":1}",
		 port, port % 2);
	int code = lc__http_request("PUT", url, body, strlen(body), auth, 3000, &resp, &len);
	free(resp);
	return code;
}

static void bootstrap_bearer(void **state)
{
	(void)state;
	lc__shared_t a;
	lc_bootstrap_t *b;
	char addr[64];
	assert_int_equal(lc__shared_derive(SECRET, strlen(SECRET), &a), 0);
	/* The shared secret alone: its bearer passes, the secret itself and
	 * nothing do not. */
	lc_bootstrap_params_t p = {
		.size = sizeof p, .host = "127.0.0.1", .port = 0, .shared_secret = SECRET};
	if (lc_bootstrap_start(&p, &b) == LC_ENOTSUP)
		skip();
	lc_bootstrap_addr(b, addr, sizeof addr);
	assert_int_equal(put(addr, 7000, NULL), 401);
	assert_int_equal(put(addr, 7000, SECRET), 401);
	assert_int_equal(put(addr, 7000, "explicit"), 401);
	assert_int_equal(put(addr, 7000, a.bearer), 200);
	lc_bootstrap_stop(b);
	/* Beside an explicit secret: either passes. */
	p.secret = "explicit";
	assert_int_equal(lc_bootstrap_start(&p, &b), 0);
	lc_bootstrap_addr(b, addr, sizeof addr);
	assert_int_equal(put(addr, 7000, NULL), 401);
	assert_int_equal(put(addr, 7000, "explicit"), 200);
	assert_int_equal(put(addr, 7001, a.bearer), 200);
	lc_bootstrap_stop(b);
	/* Another deployment's bearer does not pass. */
	assert_int_equal(lc__shared_derive("fedcba9876543210fedcba9876543210", 32, &a), 0);
	p.secret = NULL;
	assert_int_equal(lc_bootstrap_start(&p, &b), 0);
	lc_bootstrap_addr(b, addr, sizeof addr);
	assert_int_equal(put(addr, 7000, a.bearer), 401);
	lc_bootstrap_stop(b);
}

static int warnings_naming_it;

static void count_warnings(lc_log_level_t level, const char *line, void *arg)
{
	(void)arg;
	if (level == LC_LOG_WARN && strstr(line, "LAYERCAKE_SHARED_SECRET"))
		warnings_naming_it++;
}

/* A listener beyond loopback without authentication is said once per
 * process and role (what P, D and the bootstrap server call at start,
 * when they have no CURVE or no secret); loopback never. */
static void warned_once_at_start(void **state)
{
	(void)state;
	lc_log_set_handler(count_warnings, NULL);
	lc_log_set_level(LC_LOG_WARN);
	lc__shared_warn_open("bootstrap", "127.0.0.1", "PUT /route");
	lc__shared_warn_open("decode", "::1", "the control socket");
	assert_int_equal(warnings_naming_it, 0);
	lc__shared_warn_open("bootstrap", "0.0.0.0", "PUT /route");
	lc__shared_warn_open("bootstrap", "10.0.0.7", "PUT /route");
	assert_int_equal(warnings_naming_it, 1);
	lc__shared_warn_open("prefill", NULL, "the control socket");
	lc__shared_warn_open("prefill", "", "the control socket");
	assert_int_equal(warnings_naming_it, 2);
	lc_log_set_handler(NULL, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sha256_vectors),       cmocka_unit_test(hmac_vectors),
		cmocka_unit_test(hkdf_vectors),         cmocka_unit_test(derivation),
		cmocka_unit_test(where_it_is_read),     cmocka_unit_test(bootstrap_bearer),
		cmocka_unit_test(warned_once_at_start),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
