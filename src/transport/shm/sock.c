/* shm:// names and the unix socket both sides use: URL to abstract name,
 * sends and receives with fd passing (a leaf: calls nothing of the transport). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "transport/shm/shm_int.h"

#define ABSTRACT_PREFIX "layercake-shm-"

int lc__shm_name_from_url(const char *url, char *name, size_t cap, bool listening)
{
	static const char scheme[] = "shm://";
	if (strncmp(url, scheme, sizeof scheme - 1)) {
		lc__error_set(-EINVAL, "%.200s: not a shm:// URL", url);
		return -EINVAL;
	}
	const char *n = url + sizeof scheme - 1;
	size_t len = strcspn(n, "?");
	if (len == 0 || (len == 4 && !strncmp(n, "auto", 4))) {
		if (!listening) {
			lc__error_set(-EINVAL,
				      "%.200s: a connection needs the listener's name "
				      "(shm://auto is for listening)",
				      url);
			return -EINVAL;
		}
		uint64_t r;
		int rc = lc__random_u64(&r);
		if (rc)
			return rc;
		snprintf(name, cap, "lc-%ld-%016llx", (long)getpid(), (unsigned long long)r);
		return 0;
	}
	if (len > LC__SHM_NAME_MAX || len + 1 > cap) {
		lc__error_set(-EINVAL, "%.200s: name longer than %d characters", url,
			      (int)LC__MIN((size_t)LC__SHM_NAME_MAX, cap - 1));
		return -EINVAL;
	}
	for (size_t i = 0; i < len; i++) {
		char ch = n[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.')) {
			lc__error_set(-EINVAL,
				      "%.200s: '%c' in the name (letters, digits, '-', '_' "
				      "and '.' only)",
				      url, ch);
			return -EINVAL;
		}
	}
	memcpy(name, n, len);
	name[len] = '\0';
	return 0;
}

socklen_t lc__shm_addr(const char *name, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof *sa);
	sa->sun_family = AF_UNIX;
	/* sun_path[0] = '\0': the abstract namespace, no file to clean up. */
	int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, ABSTRACT_PREFIX "%s", name);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int lc__shm_send(int sock, const void *buf, size_t len, int pass_fd)
{
	struct iovec iov = {(void *)buf, len};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	if (pass_fd >= 0) {
		memset(&ctl, 0, sizeof ctl);
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof ctl.buf;
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &pass_fd, sizeof pass_fd);
	}
	ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return n == (ssize_t)len ? 0 : -EIO; /* seqpacket: all or nothing */
}

/* The first fd passed with a message, or -1; any other fd is closed. */
static int take_fd(struct msghdr *mh)
{
	int got = -1;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
			if (got < 0)
				got = fd;
			else
				close(fd);
		}
	}
	return got;
}

ssize_t lc__shm_recv(int sock, void *buf, size_t cap, int *fd, bool *truncated)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {buf, cap};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = ctl.buf,
			    .msg_controllen = sizeof ctl.buf};
	ssize_t n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	*fd = -1;
	*truncated = false;
	if (n <= 0)
		return n;
	*fd = take_fd(&mh);
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		*truncated = true;
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
	}
	return n;
}
