/*
 * One switch for an authenticated deployment (docs/security.md, "One
 * switch"): a single secret that every P, D and bootstrap server of the
 * deployment holds (lc_*_params_t.shared_secret, else $LAYERCAKE_SHARED_SECRET,
 * else the first line of $LAYERCAKE_SHARED_SECRET_FILE). Everything is
 * derived from it with HKDF-SHA256 (core/kdf.h), each key under its own
 * label, so that no derived value tells anything of another or of the
 * secret:
 *
 *   bearer   the bootstrap secret of PUT /route ("Authorization: Bearer",
 *            64 hex digits), which every P sends and the server checks;
 *   curve    one CURVE keypair (z85) that every P and D control socket uses
 *            and accepts (channel.h): a peer that cannot complete the CURVE
 *            handshake with it holds no secret, and gets nothing.
 *
 * The public key is published (GET /route): the secret must be long and
 * random enough that guessing it offline is hopeless, hence a floor of
 * LC__SHARED_MIN characters (32 hex digits: 128 bits).
 *
 * Threading: pure functions of their arguments and the environment.
 */
#ifndef LC_CONTROL_SHARED_SECRET_H
#define LC_CONTROL_SHARED_SECRET_H

#include <stdbool.h>
#include <stddef.h>

#define LC__SHARED_MIN 32
#define LC__SHARED_MAX 1024
#define LC__SHARED_BEARER_LEN 64 /* hex of 32 bytes */
#define LC__SHARED_KEY_LEN 40    /* z85 of a 32-byte CURVE key */

typedef struct lc__shared {
	bool set;
	char bearer[LC__SHARED_BEARER_LEN + 1];
	/* "" when the library was built without ZeroMQ (no control sockets). */
	char curve_public[LC__SHARED_KEY_LEN + 1];
	char curve_secret[LC__SHARED_KEY_LEN + 1];
} lc__shared_t;

/* The deployment's secret, from `param` when non-NULL and non-empty, else
 * the environment (above), derived into *out. Returns 1 (out->set), 0 when
 * no secret is configured (out cleared), or < 0 with the reason logged and
 * recorded (lc_last_error), never a silent "no secret": -EINVAL (shorter
 * than LC__SHARED_MIN, longer than LC__SHARED_MAX, or holding a NUL or
 * control character), -ENODATA (a secret file whose first line is empty),
 * the -errno of a secret file that cannot be read, LC_ENOTSUP (a libzmq
 * without CURVE: a control plane that cannot be authenticated is refused,
 * not run open). `who` names the caller in those lines. */
int lc__shared_load(const char *param, const char *who, lc__shared_t *out);
/* Derive from the secret itself (len bytes): the same as lc__shared_load
 * for a secret given. 0 or < 0 as above, nothing logged. */
int lc__shared_derive(const char *secret, size_t len, lc__shared_t *out);
/* Wipe the derived keys. */
void lc__shared_wipe(lc__shared_t *s);

/* Once per process and role ("prefill", "decode", "bootstrap"): warn that
 * a listener bound to `host` (NULL or a wildcard: every address) takes
 * peers without any authentication, naming the setting, unless host is a
 * loopback address. */
void lc__shared_warn_open(const char *role, const char *host, const char *what);

#endif
