/*
 * UCX loaded at run time (LC_UCX_DLOPEN, the default): liblayercake links no
 * UCX library, so that a host without UCX loads it and runs tcp and shm, and
 * a wheel can use whichever UCX the host has (Debian's libucx0, RAPIDS'
 * libucx-cu12, the one NIXL's wheel bundles). The first ucx:// listener or
 * connection opens LAYERCAKE_UCX_LIB (default libucp.so.0; its own
 * dependencies bring libucs and libuct) and looks up every function below;
 * the rest of the folder calls UCX by its own names, which resolve to the
 * wrappers here. A UCX that is missing or lacks a function makes ucx://
 * LC_ERR_NO_TRANSPORT with a warning that says what to install.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/config.h"
#include "transport/ucx/ucx_int.h"

/* X(return type, name, (parameters), (arguments)): every UCX function the
 * folder calls (ucp_init is an inline that calls ucp_init_version), but
 * ucs_status_string, below. */
#define UCX_FUNCS(X)                                                                               \
	X(ucs_status_t, ucp_config_read, (const char *p, const char *f, ucp_config_t **c),         \
	  (p, f, c))                                                                               \
	X(void, ucp_config_release, (ucp_config_t * c), (c))                                       \
	X(ucs_status_t, ucp_init_version,                                                          \
	  (unsigned ma, unsigned mi, const ucp_params_t *p, const ucp_config_t *c,                 \
	   ucp_context_h *out),                                                                    \
	  (ma, mi, p, c, out))                                                                     \
	X(void, ucp_cleanup, (ucp_context_h c), (c))                                               \
	X(ucs_status_t, ucp_context_query, (ucp_context_h c, ucp_context_attr_t * a), (c, a))      \
	X(ucs_status_t, ucp_worker_create,                                                         \
	  (ucp_context_h c, const ucp_worker_params_t *p, ucp_worker_h *w), (c, p, w))             \
	X(void, ucp_worker_destroy, (ucp_worker_h w), (w))                                         \
	X(unsigned, ucp_worker_progress, (ucp_worker_h w), (w))                                    \
	X(ucs_status_t, ucp_worker_get_efd, (ucp_worker_h w, int *fd), (w, fd))                    \
	X(ucs_status_t, ucp_worker_arm, (ucp_worker_h w), (w))                                     \
	X(ucs_status_t, ucp_worker_set_am_recv_handler,                                            \
	  (ucp_worker_h w, const ucp_am_handler_param_t *p), (w, p))                               \
	X(ucs_status_t, ucp_listener_create,                                                       \
	  (ucp_worker_h w, const ucp_listener_params_t *p, ucp_listener_h *l), (w, p, l))          \
	X(void, ucp_listener_destroy, (ucp_listener_h l), (l))                                     \
	X(ucs_status_t, ucp_listener_query, (ucp_listener_h l, ucp_listener_attr_t * a), (l, a))   \
	X(ucs_status_t, ucp_listener_reject, (ucp_listener_h l, ucp_conn_request_h r), (l, r))     \
	X(ucs_status_t, ucp_ep_create, (ucp_worker_h w, const ucp_ep_params_t *p, ucp_ep_h *ep),   \
	  (w, p, ep))                                                                              \
	X(ucs_status_ptr_t, ucp_ep_close_nbx, (ucp_ep_h ep, const ucp_request_param_t *p),         \
	  (ep, p))                                                                                 \
	X(ucs_status_ptr_t, ucp_ep_flush_nbx, (ucp_ep_h ep, const ucp_request_param_t *p),         \
	  (ep, p))                                                                                 \
	X(ucs_status_t, ucp_ep_query, (ucp_ep_h ep, ucp_ep_attr_t * a), (ep, a))                   \
	X(void, ucp_ep_print_info, (ucp_ep_h ep, FILE * f), (ep, f))                               \
	X(ucs_status_ptr_t, ucp_am_send_nbx,                                                       \
	  (ucp_ep_h ep, unsigned id, const void *h, size_t hl, const void *b, size_t n,            \
	   const ucp_request_param_t *p),                                                          \
	  (ep, id, h, hl, b, n, p))                                                                \
	X(ucs_status_ptr_t, ucp_am_recv_data_nbx,                                                  \
	  (ucp_worker_h w, void *d, void *b, size_t n, const ucp_request_param_t *p),              \
	  (w, d, b, n, p))                                                                         \
	X(void, ucp_request_free, (void *r), (r))                                                  \
	X(ucs_status_t, ucp_mem_map,                                                               \
	  (ucp_context_h c, const ucp_mem_map_params_t *p, ucp_mem_h *m), (c, p, m))               \
	X(ucs_status_t, ucp_mem_unmap, (ucp_context_h c, ucp_mem_h m), (c, m))                     \
	X(ucs_status_t, ucp_rkey_pack, (ucp_context_h c, ucp_mem_h m, void **b, size_t *n),        \
	  (c, m, b, n))                                                                            \
	X(void, ucp_rkey_buffer_release, (void *b), (b))                                           \
	X(ucs_status_t, ucp_ep_rkey_unpack, (ucp_ep_h ep, const void *b, ucp_rkey_h *r),           \
	  (ep, b, r))                                                                              \
	X(void, ucp_rkey_destroy, (ucp_rkey_h r), (r))                                             \
	X(ucs_status_ptr_t, ucp_put_nbx,                                                           \
	  (ucp_ep_h ep, const void *b, size_t n, uint64_t ra, ucp_rkey_h r,                        \
	   const ucp_request_param_t *p),                                                          \
	  (ep, b, n, ra, r, p))

static struct {
#define UCX_PTR(ret, name, params, args) ret(*name) params;
	UCX_FUNCS(UCX_PTR)
#undef UCX_PTR
} fns;
static const char *(*status_string)(ucs_status_t);

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int loaded;
static char why[512];

#define UCX_INSTALL                                                                                \
	"install UCX (Debian/Ubuntu: apt-get install libucx0; RHEL: dnf install ucx; or pip "      \
	"install libucx-cu12) or set LAYERCAKE_UCX_LIB to a libucp.so"

static void load(void)
{
	const char *lib = lc__config_env_str(LC__CFGS_ucx_lib);
	if (!lib || !*lib)
		lib = "libucp.so.0";
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(why, sizeof why, "UCX not found (dlopen %s: %s): " UCX_INSTALL, lib,
			 e ? e : "failed");
		return;
	}
	void *f = dlsym(h, "ucs_status_string");
	if (!f) {
		snprintf(why, sizeof why, "%s has no ucs_status_string: " UCX_INSTALL, lib);
		goto fail;
	}
	memcpy(&status_string, &f, sizeof f);
#define UCX_SYM(ret, name, params, args)                                                           \
	if (!(f = dlsym(h, #name))) {                                                              \
		snprintf(why, sizeof why, "%s has no %s (UCX too old?): " UCX_INSTALL, lib,        \
			 #name);                                                                   \
		goto fail;                                                                         \
	}                                                                                          \
	memcpy(&fns.name, &f, sizeof f);
	UCX_FUNCS(UCX_SYM)
#undef UCX_SYM
	loaded = 1;
	LC__INFO("ucx: %s loaded", lib);
	return;
fail:
	memset(&fns, 0, sizeof fns);
	status_string = NULL;
	dlclose(h);
}

int lc__ucx_dl_load(void)
{
	pthread_once(&load_once, load);
	if (loaded)
		return 0;
	LC__WARN("ucx: %s", why);
	return LC_ERR_NO_TRANSPORT;
}

/* A log line may ask for a status's name at any time. */
const char *ucs_status_string(ucs_status_t s)
{
	return status_string ? status_string(s) : "(UCX not loaded)";
}

/* The folder calls these only after lc__ucx_dl_load() succeeded
 * (engine_start); a caller that did not (the tests' raw UCX peers, which
 * link the library's objects) has UCX loaded by its first call. */
#define UCX_WRAP(ret, name, params, args)                                                          \
	ret name params                                                                            \
	{                                                                                          \
		if (__builtin_expect(!fns.name, 0))                                                \
			pthread_once(&load_once, load);                                            \
		return fns.name args;                                                              \
	}
UCX_FUNCS(UCX_WRAP)
#undef UCX_WRAP
