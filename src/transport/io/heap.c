/* The deadline heap (heap.h): an array of node pointers, children of i at
 * 2i+1 and 2i+2; every move writes the node's new position back. */
#include <errno.h>
#include <stdlib.h>

#include "transport/io/heap.h"

static void place(lc__heap_t *h, size_t i, lc__heap_node_t *x)
{
	h->v[i] = x;
	x->pos = i + 1;
}

static void sift_up(lc__heap_t *h, size_t i)
{
	lc__heap_node_t *x = h->v[i];
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (h->v[parent]->key <= x->key)
			break;
		place(h, i, h->v[parent]);
		i = parent;
	}
	place(h, i, x);
}

static void sift_down(lc__heap_t *h, size_t i)
{
	lc__heap_node_t *x = h->v[i];
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && h->v[c + 1]->key < h->v[c]->key)
			c++;
		if (x->key <= h->v[c]->key)
			break;
		place(h, i, h->v[c]);
		i = c;
	}
	place(h, i, x);
}

int lc__heap_reserve(lc__heap_t *h, size_t n)
{
	if (n <= h->cap)
		return 0;
	size_t cap = h->cap ? h->cap : 16;
	while (cap < n)
		cap *= 2;
	lc__heap_node_t **v = realloc(h->v, cap * sizeof *v);
	if (!v)
		return -ENOMEM;
	h->v = v;
	h->cap = cap;
	return 0;
}

int lc__heap_insert(lc__heap_t *h, lc__heap_node_t *x, uint64_t key)
{
	int rc = lc__heap_reserve(h, h->n + 1);
	if (rc)
		return rc;
	x->key = key;
	place(h, h->n++, x);
	sift_up(h, h->n - 1);
	return 0;
}

void lc__heap_remove(lc__heap_t *h, lc__heap_node_t *x)
{
	if (!x->pos)
		return;
	size_t i = x->pos - 1;
	x->pos = 0;
	lc__heap_node_t *last = h->v[--h->n];
	if (i == h->n)
		return; /* x was the last one */
	place(h, i, last);
	/* The last node may belong above or below x's place. */
	if (i > 0 && h->v[(i - 1) / 2]->key > last->key)
		sift_up(h, i);
	else
		sift_down(h, i);
}

void lc__heap_update(lc__heap_t *h, lc__heap_node_t *x, uint64_t key)
{
	uint64_t old = x->key;
	x->key = key;
	if (key < old)
		sift_up(h, x->pos - 1);
	else if (key > old)
		sift_down(h, x->pos - 1);
}

lc__heap_node_t *lc__heap_pop(lc__heap_t *h)
{
	lc__heap_node_t *x = lc__heap_top(h);
	if (x)
		lc__heap_remove(h, x);
	return x;
}

void lc__heap_free(lc__heap_t *h)
{
	free(h->v);
	h->v = NULL;
	h->n = h->cap = 0;
}
