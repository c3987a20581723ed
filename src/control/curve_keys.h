/*
 * Which CURVE keys this process trusts as peers: its own public key
 * (curve.public) and every line of authorized_keys in $LAYERCAKE_SECRET_DIR,
 * the same list the ZAP handler (channel.c) admits clients by. D reads it to
 * pin a P rank's server key before it hands the rank anything
 * (docs/security.md, "D authenticates P").
 */
#ifndef LC_CONTROL_CURVE_KEYS_H
#define LC_CONTROL_CURVE_KEYS_H

/* 1 if z85 (40 characters) is in the list, 0 if not (or no secret dir),
 * < 0 when a key file cannot be read. Reads the files at each call (rare:
 * once per P rank resolved). Any thread. */
int lc__curve_key_authorized(const char *z85);

#endif
