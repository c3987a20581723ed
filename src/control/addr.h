/*
 * What a listener binds and what it advertises (docs/deployment.md): one
 * rule for the bootstrap server, P's and D's control endpoints and every
 * data-plane listener URL a D hands to P.
 *
 *   bind       the address given, else the wildcard;
 *   advertise  the public address configured (knob advertise_host), else the
 *              address given when it is not a wildcard, else the local
 *              address of the route towards the peer (a connected UDP
 *              socket's getsockname: nothing is sent). Never a wildcard;
 *              a loopback address only to a peer on loopback.
 *
 * Hosts are numeric addresses or names, IPv6 literals without brackets
 * ("::1"); lc__addr_join brackets them where a port follows.
 */
#ifndef LC_CONTROL_ADDR_H
#define LC_CONTROL_ADDR_H

#include <stdbool.h>
#include <stddef.h>

#define LC__ADDR_HOST_MAX 256

/* "", "*", "0.0.0.0", "::", "[::]": any address of this host. */
bool lc__addr_is_wildcard(const char *host);
/* 127.0.0.0/8, ::1, ::ffff:127.x, "localhost". */
bool lc__addr_is_loopback(const char *host);
/* "host:port" or "[v6]:port" (an optional "scheme://" in front, anything
 * after the port ignored) split; host without brackets. 0 or -EINVAL. */
int lc__addr_split(const char *hostport, char *host, size_t cap, int *port);
/* A bootstrap server's address as a caller gives it: "host:port",
 * "[v6]:port" or "http://" followed by one of those (a trailing "/" is
 * allowed). 0 with the "host:port" part in out; -EINVAL with the reason
 * recorded (lc_last_error: "localhost: missing port: a bootstrap address
 * is host:port ...") for anything else: another scheme ("tcp://"), no
 * port, a port that is not 1..65535, a path. Nothing is logged. */
int lc__addr_bootstrap(const char *addr, char *out, size_t cap);
/* host and port as "host:port" or "[v6]:port". */
void lc__addr_join(const char *host, int port, char *out, size_t cap);
/* The local address of the route towards peer (numeric or a name; a
 * wildcard or "" means this host: the host's own address as below).
 * 0, or -errno when there is no route. */
int lc__addr_route_local(const char *peer, char *out, size_t cap);
/* An address of this host for a peer not known yet (lc_bootstrap_addr after
 * a wildcard bind): the route of the default route, else the first
 * non-loopback address that is up, else 127.0.0.1. */
void lc__addr_host_primary(char *out, size_t cap);
/* The public address configured (LAYERCAKE_ADVERTISE_HOST), or NULL. */
const char *lc__addr_public(void);
/* What to advertise to `peer` for a listener bound to `bound` (the rule
 * above). 0, or -errno with why filled. */
int lc__addr_advertise(const char *bound, const char *peer, char *out, size_t cap, char *why,
		       size_t why_cap);
/* A listener URL "scheme://host:port..." as advertised to peer: a wildcard
 * host replaced by lc__addr_advertise's answer; any other URL (shm://name,
 * a bound address) unchanged. 0 or -errno (why filled). */
int lc__addr_url_for(const char *url, const char *peer, char *out, size_t cap, char *why,
		     size_t why_cap);

/* Whether something accepts TCP connections at host:port within
 * timeout_ms (a connect, closed at once; nothing is sent). Blocks for the
 * name lookup and at most timeout_ms. False for a name that does not
 * resolve. Any thread. */
bool lc__addr_tcp_alive(const char *host, int port, int timeout_ms);

/* Whether a loopback address told to peer would not reach this host:
 * peer is neither loopback nor one of this host's own addresses. */
bool lc__addr_loopback_wrong(const char *told, const char *peer);

#endif
