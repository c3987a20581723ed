/* The deployment's shared secret and what is derived from it (shared_secret.h). */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "control/addr.h"
#include "control/shared_secret.h"
#include "core/common.h"
#include "core/config.h"
#include "core/kdf.h"

#ifdef LC_HAVE_ZMQ
#include <zmq.h>
#endif

/* HKDF's salt and labels: a new version of the derivation gets new ones. */
#define SALT "layercake shared secret v1"
#define LABEL_BEARER "bootstrap bearer"
#define LABEL_CURVE "curve25519 secret key"

static int derive_curve(const char *secret, size_t len, lc__shared_t *out)
{
#ifdef LC_HAVE_ZMQ
	uint8_t sk[32];
	if (!zmq_has("curve"))
		return LC_ENOTSUP;
	lc__hkdf_sha256(SALT, strlen(SALT), secret, len, LABEL_CURVE, strlen(LABEL_CURVE), sk,
			sizeof sk);
	/* Any 32 bytes are a Curve25519 secret key (clamped where used). */
	int rc = zmq_z85_encode(out->curve_secret, sk, sizeof sk) &&
				 !zmq_curve_public(out->curve_public, out->curve_secret)
			 ? 0
			 : LC_ENOTSUP;
	memset(sk, 0, sizeof sk);
	return rc;
#else
	(void)secret;
	(void)len;
	(void)out;
	return 0;
#endif
}

int lc__shared_derive(const char *secret, size_t len, lc__shared_t *out)
{
	memset(out, 0, sizeof *out);
	if (len < LC__SHARED_MIN || len > LC__SHARED_MAX)
		return -EINVAL;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)secret[i] < 0x20 || secret[i] == 0x7f)
			return -EINVAL;
	uint8_t b[32];
	lc__hkdf_sha256(SALT, strlen(SALT), secret, len, LABEL_BEARER, strlen(LABEL_BEARER), b,
			sizeof b);
	for (size_t i = 0; i < sizeof b; i++)
		snprintf(out->bearer + 2 * i, 3, "%02x", b[i]);
	memset(b, 0, sizeof b);
	int rc = derive_curve(secret, len, out);
	if (rc) {
		lc__shared_wipe(out);
		return rc;
	}
	out->set = true;
	return 0;
}

void lc__shared_wipe(lc__shared_t *s)
{
	volatile char *p = (volatile char *)s;
	for (size_t i = 0; i < sizeof *s; i++)
		p[i] = 0;
}

/* The first line of path into line[cap]: 1, or < 0. */
static int read_first_line(const char *path, char *line, size_t cap)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -errno;
	int rc = -ENODATA;
	if (fgets(line, (int)cap, f)) {
		line[strcspn(line, "\r\n")] = '\0';
		rc = *line ? 1 : -ENODATA;
	}
	fclose(f);
	return rc;
}

int lc__shared_load(const char *param, const char *who, lc__shared_t *out)
{
	char line[LC__SHARED_MAX + 2];
	const char *secret = param && *param ? param : lc__config_env_str(LC__CFGS_shared_secret);
	const char *from = param && *param ? "shared_secret" : "LAYERCAKE_SHARED_SECRET";
	const char *file = lc__config_env_str(LC__CFGS_shared_secret_file);
	memset(out, 0, sizeof *out);
	if (!secret && file) {
		int rc = read_first_line(file, line, sizeof line);
		if (rc < 0) {
			memset(line, 0, sizeof line);
			return LC__FAIL_AT(
				LC_LOG_ERROR, rc,
				"%s: LAYERCAKE_SHARED_SECRET_FILE %s gives no secret: %s", who,
				file, rc == -ENODATA ? "its first line is empty" : strerror(-rc));
		}
		secret = line;
		from = "LAYERCAKE_SHARED_SECRET_FILE";
	}
	if (!secret)
		return 0;
	int rc = lc__shared_derive(secret, strlen(secret), out);
	memset(line, 0, sizeof line);
	if (rc == -EINVAL)
		return LC__FAIL_AT(LC_LOG_ERROR, rc,
				   "%s: the shared secret (%s) must be %d to %d printable "
				   "characters (e.g. `openssl rand -hex 32`)",
				   who, from, LC__SHARED_MIN, LC__SHARED_MAX);
	if (rc)
		return LC__FAIL_AT(LC_LOG_ERROR, rc,
				   "%s: a shared secret is set (%s) but this libzmq has no CURVE: "
				   "refusing to run the control plane unauthenticated",
				   who, from);
	return 1;
}

void lc__shared_warn_open(const char *role, const char *host, const char *what)
{
	static atomic_uint warned; /* one bit per role */
	unsigned bit = !strcmp(role, "prefill") ? 1u : !strcmp(role, "decode") ? 2u : 4u;
	if (host && *host && !lc__addr_is_wildcard(host) && lc__addr_is_loopback(host))
		return;
	if (atomic_fetch_or(&warned, bit) & bit)
		return;
	LC__WARN("%s: %s listens on %s without authentication: anyone who reaches it may "
		 "act as a peer of this deployment. Set LAYERCAKE_SHARED_SECRET (or "
		 "LAYERCAKE_SHARED_SECRET_FILE, or the shared_secret parameter) on every P, D "
		 "and bootstrap server (docs/security.md, \"One switch\")",
		 role, what, host && *host ? host : "every address");
}
