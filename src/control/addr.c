/* What a listener binds and advertises: the rule is in control/addr.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control/addr.h"
#include "core/common.h"
#include "core/config.h"

bool lc__addr_is_wildcard(const char *host)
{
	return !host || !*host || !strcmp(host, "*") || !strcmp(host, "0.0.0.0") ||
	       !strcmp(host, "::") || !strcmp(host, "[::]");
}

static bool sa_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}

bool lc__addr_is_loopback(const char *host)
{
	if (!host)
		return false;
	if (!strcmp(host, "localhost"))
		return true;
	struct in_addr a4;
	struct sockaddr_in6 s6 = {.sin6_family = AF_INET6};
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &s6.sin6_addr) == 1)
		return sa_loopback((struct sockaddr *)&s6);
	return false;
}

int lc__addr_split(const char *hostport, char *host, size_t cap, int *port)
{
	const char *h = strstr(hostport, "://");
	h = h ? h + 3 : hostport;
	const char *end = h + strcspn(h, "/?"), *colon = NULL;
	size_t hl;
	if (*h == '[') {
		const char *rb = memchr(h, ']', (size_t)(end - h));
		if (!rb || rb[1] != ':')
			return -EINVAL;
		hl = (size_t)(rb - h - 1);
		h++;
		colon = rb + 1;
	} else {
		for (const char *q = h; q < end; q++)
			if (*q == ':')
				colon = q;
		if (!colon)
			return -EINVAL;
		hl = (size_t)(colon - h);
	}
	if (hl + 1 > cap)
		return -EINVAL;
	char *e;
	long p = strtol(colon + 1, &e, 10);
	if (e != end || e == colon + 1 || p < 0 || p > 65535)
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = (int)p;
	return 0;
}

#define BOOTSTRAP_FORM "a bootstrap address is host:port, [v6]:port or http://host:port"

int lc__addr_bootstrap(const char *addr, char *out, size_t cap)
{
	char host[LC__ADDR_HOST_MAX];
	int port;
	if (!addr || !*addr) {
		lc__error_set(-EINVAL, "no bootstrap address given: " BOOTSTRAP_FORM);
		return -EINVAL;
	}
	const char *a = !strncmp(addr, "http://", 7) ? addr + 7 : addr;
	const char *scheme = strstr(a, "://");
	if (scheme) {
		lc__error_set(
			-EINVAL,
			"%.200s: %.*s:// is not the bootstrap server's scheme: " BOOTSTRAP_FORM,
			addr, (int)(scheme - a), a);
		return -EINVAL;
	}
	size_t n = strlen(a);
	if (n && a[n - 1] == '/')
		n--;
	if (n == 0 || n >= cap || n >= sizeof host) {
		lc__error_set(-EINVAL, "%.200s: %s: " BOOTSTRAP_FORM, addr,
			      n == 0 ? "no host" : "too long");
		return -EINVAL;
	}
	if (memchr(a, '/', n) || memchr(a, '?', n)) {
		lc__error_set(-EINVAL, "%.200s: a bootstrap address has no path: " BOOTSTRAP_FORM,
			      addr);
		return -EINVAL;
	}
	char hp[LC__ADDR_HOST_MAX + 16];
	snprintf(hp, sizeof hp, "%.*s", (int)n, a);
	const char *rb = hp[0] == '[' ? strchr(hp, ']') : NULL;
	const char *colon = rb ? (rb[1] == ':' ? rb + 1 : NULL) : strrchr(hp, ':');
	const char *bad = NULL;
	host[0] = '\0';
	port = -1;
	if (!colon || !colon[1])
		bad = "missing port";
	else if (lc__addr_split(hp, host, sizeof host, &port) || port <= 0)
		bad = port == 0 ? "port 0 (the server's own port is needed)"
				: "the port is not a number in 1..65535";
	else if (!host[0])
		bad = "no host";
	if (bad) {
		lc__error_set(-EINVAL, "%.200s: %s: " BOOTSTRAP_FORM, addr, bad);
		return -EINVAL;
	}
	memcpy(out, hp, n + 1);
	return 0;
}

void lc__addr_join(const char *host, int port, char *out, size_t cap)
{
	bool v6 = strchr(host, ':') != NULL;
	snprintf(out, cap, "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

static int numeric(const struct sockaddr *sa, char *out, size_t cap)
{
	char tmp[INET6_ADDRSTRLEN];
	const void *a = sa->sa_family == AF_INET
				? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
				: (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
	if (!inet_ntop(sa->sa_family, a, tmp, sizeof tmp))
		return -errno;
	if (strlen(tmp) >= cap)
		return -ENOSPC;
	strcpy(out, tmp);
	return 0;
}

/* A UDP socket connected towards peer: the kernel picks the route and the
 * source address; nothing goes on the wire. */
int lc__addr_route_local(const char *peer, char *out, size_t cap)
{
	if (lc__addr_is_wildcard(peer)) {
		lc__addr_host_primary(out, cap);
		return 0;
	}
	struct addrinfo hints = {.ai_socktype = SOCK_DGRAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	int g = getaddrinfo(peer, "9", &hints, &res);
	if (g)
		return g == EAI_SYSTEM ? -errno : -EHOSTUNREACH;
	int rc = -ENETUNREACH;
	for (struct addrinfo *ai = res; ai && rc; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		if (!connect(fd, ai->ai_addr, ai->ai_addrlen) &&
		    !getsockname(fd, (struct sockaddr *)&ss, &sl))
			rc = numeric((struct sockaddr *)&ss, out, cap);
		else
			rc = -errno;
		close(fd);
	}
	freeaddrinfo(res);
	return rc;
}

void lc__addr_host_primary(char *out, size_t cap)
{
	/* The default route's source (192.0.2.1 is TEST-NET-1: only the
	 * route is looked up). */
	if (!lc__addr_route_local("192.0.2.1", out, cap))
		return;
	struct ifaddrs *ifs = NULL, *pick = NULL;
	if (!getifaddrs(&ifs)) {
		for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
			if (!i->ifa_addr || !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
				continue;
			int f = i->ifa_addr->sa_family;
			if (f == AF_INET6 &&
			    IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr))
				continue;
			if (f == AF_INET && (!pick || pick->ifa_addr->sa_family != AF_INET))
				pick = i;
			else if (f == AF_INET6 && !pick)
				pick = i;
		}
		if (pick && !numeric(pick->ifa_addr, out, cap)) {
			freeifaddrs(ifs);
			return;
		}
		freeifaddrs(ifs);
	}
	snprintf(out, cap, "127.0.0.1");
}

const char *lc__addr_public(void)
{
	return lc__config_env_str(LC__CFGS_advertise_host);
}

int lc__addr_advertise(const char *bound, const char *peer, char *out, size_t cap, char *why,
		       size_t why_cap)
{
	const char *pub = lc__addr_public();
	if (pub && *pub) {
		snprintf(out, cap, "%s", pub);
		return 0;
	}
	if (!lc__addr_is_wildcard(bound)) {
		snprintf(out, cap, "%s", bound);
		return 0;
	}
	int rc = lc__addr_route_local(peer, out, cap);
	if (rc)
		snprintf(why, why_cap, "no route from this host towards %s (%s)", peer ? peer : "?",
			 strerror(-rc));
	return rc;
}

int lc__addr_url_for(const char *url, const char *peer, char *out, size_t cap, char *why,
		     size_t why_cap)
{
	char host[LC__ADDR_HOST_MAX], adv[LC__ADDR_HOST_MAX], hp[LC__ADDR_HOST_MAX + 16];
	int port;
	const char *sep = strstr(url, "://");
	if (!sep || lc__addr_split(url, host, sizeof host, &port) || !lc__addr_is_wildcard(host)) {
		snprintf(out, cap, "%s", url);
		return strlen(url) < cap ? 0 : -ENOSPC;
	}
	int rc = lc__addr_advertise(host, peer, adv, sizeof adv, why, why_cap);
	if (rc)
		return rc;
	lc__addr_join(adv, port, hp, sizeof hp);
	const char *h = sep + 3;
	const char *rest = h + strcspn(h, "/?");
	int n = snprintf(out, cap, "%.*s%s%s", (int)(h - url), url, hp, rest);
	return n < 0 || (size_t)n >= cap ? -ENOSPC : 0;
}

bool lc__addr_loopback_wrong(const char *told, const char *peer)
{
	char host[LC__ADDR_HOST_MAX], mine[LC__ADDR_HOST_MAX];
	int port;
	if (lc__addr_split(told, host, sizeof host, &port) || !lc__addr_is_loopback(host))
		return false;
	if (lc__addr_is_loopback(peer))
		return false;
	/* An address of this host routes through lo with itself as source. */
	return lc__addr_route_local(peer, mine, sizeof mine) || strcmp(mine, peer);
}

bool lc__addr_tcp_alive(const char *host, int port, int timeout_ms)
{
	char port_s[16];
	int err = 0;
	socklen_t n = sizeof err;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	snprintf(port_s, sizeof port_s, "%d", port);
	if (getaddrinfo(host, port_s, &hints, &ai) || !ai)
		return false;
	bool alive = false;
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd >= 0) {
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		if (!connect(fd, ai->ai_addr, ai->ai_addrlen))
			alive = true;
		else if (errno == EINPROGRESS && poll(&p, 1, timeout_ms) == 1 &&
			 !getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &n) && !err)
			alive = true;
		close(fd);
	}
	freeaddrinfo(ai);
	return alive;
}
