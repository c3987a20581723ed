/*
 * A binary min-heap of deadlines, intrusive: the caller embeds a node in
 * what waits (an I/O task, a batch) and the heap keeps pointers to nodes
 * in an array, each node knowing its position, so that a node can be
 * removed or moved wherever it sits. top is O(1); insert, remove, update
 * and pop are O(log n). Not thread-safe: the owner serialises (io.c keeps
 * one heap per loop for its tasks, loop thread only, and one for timers,
 * under the loop's lock).
 */
#ifndef LC_TRANSPORT_IO_HEAP_H
#define LC_TRANSPORT_IO_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lc__heap_node {
	uint64_t key; /* the deadline, lc__now_ns() time */
	size_t pos;   /* 1 + index in the heap's array; 0: in no heap */
} lc__heap_node_t;

typedef struct lc__heap {
	lc__heap_node_t **v;
	size_t n, cap;
} lc__heap_t;

/* Room for n nodes, so that inserts up to n cannot fail. -ENOMEM. */
int lc__heap_reserve(lc__heap_t *h, size_t n);
/* Add x (in no heap) with key; -ENOMEM when the array cannot grow. */
int lc__heap_insert(lc__heap_t *h, lc__heap_node_t *x, uint64_t key);
/* Take x out of h; nothing if x is in no heap. */
void lc__heap_remove(lc__heap_t *h, lc__heap_node_t *x);
/* Give x (in h) a new key and move it to its place. */
void lc__heap_update(lc__heap_t *h, lc__heap_node_t *x, uint64_t key);
/* Remove and return the node with the least key, NULL when empty. */
lc__heap_node_t *lc__heap_pop(lc__heap_t *h);
/* Release the array (the nodes are the caller's). */
void lc__heap_free(lc__heap_t *h);

static inline lc__heap_node_t *lc__heap_top(const lc__heap_t *h)
{
	return h->n ? h->v[0] : NULL;
}

static inline bool lc__heap_linked(const lc__heap_node_t *x)
{
	return x->pos != 0;
}

#endif
