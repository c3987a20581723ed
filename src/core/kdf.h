/*
 * SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104) and HKDF-SHA256 (RFC 5869):
 * what the shared secret's keys are derived with (control/shared_secret.h,
 * docs/security.md, "One switch"). Written here so that the library links
 * no crypto library of its own; checked against the RFCs' vectors
 * (unit.test_kdf).
 *
 * Threading: pure functions.
 */
#ifndef LC_CORE_KDF_H
#define LC_CORE_KDF_H

#include <stddef.h>
#include <stdint.h>

#define LC__SHA256_LEN 32

typedef struct lc__sha256 {
	uint32_t h[8];
	uint64_t bytes; /* hashed so far */
	uint8_t buf[64];
	size_t nbuf;
} lc__sha256_t;

void lc__sha256_init(lc__sha256_t *s);
void lc__sha256_update(lc__sha256_t *s, const void *data, size_t len);
/* The digest; s is wiped. */
void lc__sha256_final(lc__sha256_t *s, uint8_t out[LC__SHA256_LEN]);

void lc__hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
		     uint8_t out[LC__SHA256_LEN]);

/* HKDF-SHA256: extract with salt (NULL: 32 zero bytes), expand with info
 * to out_len <= 255 * 32 bytes. 0, or -EINVAL for a longer out_len. */
int lc__hkdf_sha256(const void *salt, size_t salt_len, const void *ikm, size_t ikm_len,
		    const void *info, size_t info_len, uint8_t *out, size_t out_len);

#endif
