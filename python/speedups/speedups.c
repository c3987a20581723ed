/*
 * layercake._speedups: the data path's two per-batch calls, post and the
 * completion queue's poll and wait, as one C call each instead of ctypes'
 * argument conversion, struct packing and a dict built in Python per
 * completion (docs/python.md, "Speedups"). Everything else stays in the
 * ctypes binding, and so does each of these calls whenever a value here
 * does not convert: the module answers None and the caller takes the
 * ctypes way, whose converters (python/layercake/_convert.py) raise the
 * error. Each conversion here takes exactly what the converter of its
 * kind takes (an int or __index__, the C type's range), so that a value
 * is refused in one place and with one message whichever way a call goes.
 *
 * The module links nothing of liblayercake: the binding passes it the
 * addresses of the loaded library's functions (bind), so that it can never
 * call a second copy of the library. CPython's limited API (abi3, 3.9 on),
 * so one build serves every interpreter of the machine.
 */
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x03090000
#include <Python.h>

#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "layercake.h"

typedef int (*post_fn)(lc_conn_t *, const lc_write_t *, size_t, const lc_batch_params_t *,
		       uint64_t *);
typedef int (*poll_fn)(lc_cq_t *, lc_completion_t *, int);
typedef int (*wait_fn)(lc_cq_t *, lc_completion_t *, int, int);

static post_fn batch_post;
static poll_fn cq_poll;
static wait_fn cq_wait;

#define STACK_WRITES 64
#define MAX_COMPLETIONS 64

/* The keys of a completion's dict, made once. */
enum { K_BATCH, K_USER, K_ROOM, K_TAG, K_STATUS, K_BYTES, K_LATENCY, K_REASON, K_COUNT };
static const char *const key_names[K_COUNT] = {"batch_id", "user_data", "room",       "tag",
					       "status",   "bytes",     "latency_ns", "reason"};
static PyObject *keys[K_COUNT];

/* An integer of at most `max`, as struct.pack takes it (__index__ too).
 * False, with no Python error left, where it is not one. */
static int to_u64(PyObject *o, uint64_t max, uint64_t *out)
{
	PyObject *i = PyNumber_Index(o);
	if (!i) {
		PyErr_Clear();
		return 0;
	}
	unsigned long long v = PyLong_AsUnsignedLongLong(i);
	Py_DECREF(i);
	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Clear();
		return 0;
	}
	*out = v;
	return v <= max;
}

static int to_i64(PyObject *o, int64_t *out)
{
	PyObject *i = PyNumber_Index(o);
	if (!i) {
		PyErr_Clear();
		return 0;
	}
	long long v = PyLong_AsLongLong(i);
	Py_DECREF(i);
	if (v == -1 && PyErr_Occurred()) {
		PyErr_Clear();
		return 0;
	}
	*out = v;
	return 1;
}

/* Item k of a tuple or list, a reference of our own (an __index__ called
 * meanwhile may change a list), or NULL with no error left. */
static PyObject *item(PyObject *seq, Py_ssize_t k)
{
	PyObject *o = PyTuple_Check(seq) ? PyTuple_GetItem(seq, k) : PyList_GetItem(seq, k);
	if (!o)
		PyErr_Clear();
	Py_XINCREF(o);
	return o;
}

static int item_u64(PyObject *seq, Py_ssize_t k, uint64_t max, uint64_t *out)
{
	PyObject *o = item(seq, k);
	int ok = o && to_u64(o, max, out);
	Py_XDECREF(o);
	return ok;
}

static Py_ssize_t seq_len(PyObject *seq)
{
	if (PyTuple_Check(seq))
		return PyTuple_Size(seq);
	if (PyList_Check(seq))
		return PyList_Size(seq);
	return -1;
}

/* One write: (local, region, offset, length) or with (count, local_stride,
 * remote_stride) after it, the binding's tuple. */
static int to_write(PyObject *t, lc_write_t *w)
{
	Py_ssize_t len = seq_len(t);
	uint64_t v[7] = {0};
	static const uint64_t max[7] = {UINT64_MAX, UINT32_MAX, UINT64_MAX, UINT64_MAX,
					UINT32_MAX, UINT64_MAX, UINT64_MAX};
	if (len != 4 && len != 7)
		return 0;
	for (Py_ssize_t k = 0; k < len; k++)
		if (!item_u64(t, k, max[k], &v[k]))
			return 0;
	*w = (lc_write_t){.local = (const void *)(uintptr_t)v[0],
			  .remote_region = (uint32_t)v[1],
			  .remote_offset = v[2],
			  .length = v[3],
			  .count = (uint32_t)v[4],
			  .local_stride = v[5],
			  .remote_stride = v[6]};
	return 1;
}

/* post(conn, writes, room, tag, flags, timeout_ms, user_data): the batch id,
 * lc_batch_post's negative code, or None where a value does not convert. */
static PyObject *sp_post(PyObject *self, PyObject *args)
{
	(void)self;
	PyObject *conn_o, *writes, *room_o, *tag_o, *flags_o, *timeout_o, *ud_o;
	if (!PyArg_ParseTuple(args, "OOOOOOO", &conn_o, &writes, &room_o, &tag_o, &flags_o,
			      &timeout_o, &ud_o))
		return NULL;
	uint64_t conn, tag, flags;
	lc_batch_params_t p = {.size = sizeof p};
	Py_ssize_t n = seq_len(writes);
	if (!batch_post || n < 0 || !to_u64(conn_o, UINTPTR_MAX, &conn) ||
	    !to_u64(room_o, UINT64_MAX, &p.room) || !to_u64(tag_o, UINT32_MAX, &tag) ||
	    !to_u64(flags_o, UINT32_MAX, &flags) || !to_i64(timeout_o, &p.timeout_ms) ||
	    !to_u64(ud_o, UINT64_MAX, &p.user_data))
		Py_RETURN_NONE;
	p.tag = (uint32_t)tag;
	p.flags = (uint32_t)flags;
	lc_write_t stack[STACK_WRITES], *w = stack;
	if (n > STACK_WRITES && !(w = PyMem_Malloc((size_t)n * sizeof *w)))
		return PyErr_NoMemory();
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *t = item(writes, i);
		int ok = t && to_write(t, &w[i]);
		Py_XDECREF(t);
		if (!ok) {
			if (w != stack)
				PyMem_Free(w);
			Py_RETURN_NONE;
		}
	}
	uint64_t bid = 0;
	int rc;
	PyThreadState *ts = PyEval_SaveThread();
	rc = batch_post((lc_conn_t *)(uintptr_t)conn, w, (size_t)n, &p, &bid);
	PyEval_RestoreThread(ts);
	if (w != stack)
		PyMem_Free(w);
	return rc < 0 ? PyLong_FromLong(rc) : PyLong_FromUnsignedLongLong(bid);
}

static int set_new(PyObject *d, PyObject *key, PyObject *v)
{
	if (!v)
		return -1;
	int rc = PyDict_SetItem(d, key, v);
	Py_DECREF(v);
	return rc;
}

static PyObject *completion(const lc_completion_t *c)
{
	PyObject *d = PyDict_New();
	size_t rlen = strnlen(c->reason, sizeof c->reason);
	if (!d || set_new(d, keys[K_BATCH], PyLong_FromUnsignedLongLong(c->batch_id)) ||
	    set_new(d, keys[K_USER], PyLong_FromUnsignedLongLong(c->user_data)) ||
	    set_new(d, keys[K_ROOM], PyLong_FromUnsignedLongLong(c->room)) ||
	    set_new(d, keys[K_TAG], PyLong_FromUnsignedLong(c->tag)) ||
	    set_new(d, keys[K_STATUS], PyLong_FromLong(c->status)) ||
	    set_new(d, keys[K_BYTES], PyLong_FromUnsignedLongLong(c->bytes)) ||
	    set_new(d, keys[K_LATENCY], PyLong_FromUnsignedLongLong(c->latency_ns)) ||
	    set_new(d, keys[K_REASON],
		    PyUnicode_DecodeUTF8(c->reason, (Py_ssize_t)rlen, "replace"))) {
		Py_XDECREF(d);
		return NULL;
	}
	return d;
}

/* The list of dicts the binding returns for n completions, or the
 * negative code. */
static PyObject *completions(const lc_completion_t *out, int n)
{
	if (n < 0)
		return PyLong_FromLong(n);
	PyObject *l = PyList_New(n);
	for (int i = 0; l && i < n; i++) {
		PyObject *d = completion(&out[i]);
		if (!d || PyList_SetItem(l, i, d)) {
			Py_DECREF(l);
			return NULL;
		}
	}
	return l;
}

static int to_int(PyObject *o, int *out)
{
	int64_t v;
	if (!to_i64(o, &v) || v < INT_MIN || v > INT_MAX)
		return 0;
	*out = (int)v;
	return 1;
}

/* At most how many completions (_convert.at_least_one with the stack's
 * size as its cap): at least 1, and above MAX_COMPLETIONS that many. */
static int to_max(PyObject *o, int *out)
{
	PyObject *i = PyNumber_Index(o);
	if (!i) {
		PyErr_Clear();
		return 0;
	}
	int overflow = 0;
	long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
	Py_DECREF(i);
	if (v == -1 && PyErr_Occurred()) {
		PyErr_Clear();
		return 0;
	}
	if (overflow < 0 || (!overflow && v < 1))
		return 0;
	*out = overflow || v > MAX_COMPLETIONS ? MAX_COMPLETIONS : (int)v;
	return 1;
}

/* The queue's handle and at most how many. */
static int cq_args(PyObject *cq_o, PyObject *max_o, uint64_t *cq, int *max)
{
	return to_u64(cq_o, UINTPTR_MAX, cq) && to_max(max_o, max);
}

/* poll(cq, max): a list of completion dicts, a negative code, or None. */
static PyObject *sp_poll(PyObject *self, PyObject *args)
{
	(void)self;
	PyObject *cq_o, *max_o;
	int max, n;
	uint64_t cq;
	if (!PyArg_ParseTuple(args, "OO", &cq_o, &max_o))
		return NULL;
	if (!cq_poll || !cq_args(cq_o, max_o, &cq, &max))
		Py_RETURN_NONE;
	lc_completion_t out[MAX_COMPLETIONS];
	PyThreadState *ts = PyEval_SaveThread();
	n = cq_poll((lc_cq_t *)(uintptr_t)cq, out, max);
	PyEval_RestoreThread(ts);
	return completions(out, n);
}

/* wait(cq, max, timeout_ms): as poll, after lc_cq_wait. */
static PyObject *sp_wait(PyObject *self, PyObject *args)
{
	(void)self;
	PyObject *cq_o, *max_o, *timeout_o;
	int max, timeout_ms, n;
	uint64_t cq;
	if (!PyArg_ParseTuple(args, "OOO", &cq_o, &max_o, &timeout_o))
		return NULL;
	if (!cq_wait || !cq_args(cq_o, max_o, &cq, &max) || !to_int(timeout_o, &timeout_ms))
		Py_RETURN_NONE;
	lc_completion_t out[MAX_COMPLETIONS];
	PyThreadState *ts = PyEval_SaveThread();
	n = cq_wait((lc_cq_t *)(uintptr_t)cq, out, max, timeout_ms);
	PyEval_RestoreThread(ts);
	return completions(out, n);
}

/* bind(lc_batch_post, lc_cq_poll, lc_cq_wait): the loaded library's
 * functions, by address. */
static PyObject *sp_bind(PyObject *self, PyObject *args)
{
	(void)self;
	unsigned long long a, b, c;
	if (!PyArg_ParseTuple(args, "KKK", &a, &b, &c))
		return NULL;
	if (!a || !b || !c) {
		PyErr_SetString(PyExc_ValueError, "layercake._speedups.bind: a null function");
		return NULL;
	}
	batch_post = (post_fn)(uintptr_t)a;
	cq_poll = (poll_fn)(uintptr_t)b;
	cq_wait = (wait_fn)(uintptr_t)c;
	Py_RETURN_NONE;
}

/* layout(): what this module was compiled against, for the binding to
 * compare with the library it loaded: (version, sizeof lc_write_t,
 * lc_batch_params_t, lc_completion_t). */
static PyObject *sp_layout(PyObject *self, PyObject *args)
{
	(void)self;
	(void)args;
	return Py_BuildValue("(i,n,n,n)",
			     LC_VERSION_MAJOR * 10000 + LC_VERSION_MINOR * 100 + LC_VERSION_PATCH,
			     (Py_ssize_t)sizeof(lc_write_t), (Py_ssize_t)sizeof(lc_batch_params_t),
			     (Py_ssize_t)sizeof(lc_completion_t));
}

static PyMethodDef methods[] = {
	{"post", sp_post, METH_VARARGS,
	 "post(conn, writes, room, tag, flags, timeout_ms, user_data)"},
	{"poll", sp_poll, METH_VARARGS, "poll(cq, max)"},
	{"wait", sp_wait, METH_VARARGS, "wait(cq, max, timeout_ms)"},
	{"bind", sp_bind, METH_VARARGS, "bind(lc_batch_post, lc_cq_poll, lc_cq_wait)"},
	{"layout", sp_layout, METH_NOARGS, "layout() -> (version, write, params, completion)"},
	{NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT,
				    "layercake._speedups",
				    "layercake's data-path calls in C (docs/python.md)",
				    -1,
				    methods,
				    NULL,
				    NULL,
				    NULL,
				    NULL};

PyMODINIT_FUNC PyInit__speedups(void)
{
	for (int k = 0; k < K_COUNT; k++)
		if (!keys[k] && !(keys[k] = PyUnicode_InternFromString(key_names[k])))
			return NULL;
	return PyModule_Create(&module);
}
