/*
 * Region table of a context: registered memory, by id and by address.
 *
 * Threading: `lock` (rwlock) protects both indexes; lookups take it shared.
 * Region structs are freed on deregistration, so lookups copy what they need
 * into an lc__region_info_t instead of keeping pointers.
 */
#ifndef LC_CORE_REGION_H
#define LC_CORE_REGION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "layercake.h"

struct lc_region {
	lc_ctx_t *ctx;
	uint32_t id;
	uint8_t *addr;
	size_t len;
	int memfd;             /* -1 unless the memory came from lc_mem_alloc(SHAREABLE) */
	uint64_t memfd_offset; /* offset of addr within the memfd */
	int kind;              /* lc_mem_kind_t */
	int device;            /* its device ordinal */
};

typedef struct lc__region_info {
	uint32_t id;
	uint8_t *addr;
	size_t len;
	int memfd;
	uint64_t memfd_offset;
	int kind;   /* lc_mem_kind_t: device kinds are never touched by the CPU */
	int device; /* device ordinal */
} lc__region_info_t;

/* Whether the CPU may read and write memory of this kind in place. */
#define LC__KIND_IS_HOST(k) ((k) == LC_MEM_KIND_HOST || (k) == LC_MEM_KIND_PINNED)

typedef struct lc__regions {
	pthread_rwlock_t lock;
	struct lc_region **by_id; /* index id-1; NULL once deregistered */
	size_t id_cap;
	uint32_t next_id;           /* ids start at 1 and are never reused */
	struct lc_region **by_addr; /* live regions sorted by addr */
	size_t n;
	/* Bumped by every add and remove (under lock, read without): a caller
	 * that resolved its addresses once knows when to look again. */
	_Atomic uint64_t gen;
} lc__regions_t;

int lc__regions_init(lc__regions_t *t);
void lc__regions_fini(lc__regions_t *t); /* frees every region */
/* Overlapping an existing region is -EEXIST. */
int lc__regions_add(lc__regions_t *t, lc_ctx_t *ctx, void *addr, size_t len, int memfd,
		    uint64_t memfd_offset, struct lc_region **out);
/* Same, of a memory kind and device. */
int lc__regions_add_kind(lc__regions_t *t, lc_ctx_t *ctx, void *addr, size_t len, int memfd,
			 uint64_t memfd_offset, int kind, int device, struct lc_region **out);
int lc__regions_remove(lc__regions_t *t, struct lc_region *r); /* frees r */
/* By id: LC_ERR_REGION if unknown. */
int lc__regions_get(lc__regions_t *t, uint32_t id, lc__region_info_t *out);
/* The region containing [addr, addr+len): LC_ERR_REGION if none. */
int lc__regions_find(lc__regions_t *t, const void *addr, size_t len, lc__region_info_t *out);

/* Packed region descriptors: a 32-byte header, then transport keys, each
 * framed as u16 tag, u16 length, then that many bytes. A reader takes the
 * entry of its own tag and skips the others; a descriptor comes from the
 * network, so every frame is checked against the bytes there are. */
#define LC__DESC_HEADER 32
#define LC__KEY_FRAME 4
/* Key tags, one per transport that packs keys (ops->key_tag); 0 is none,
 * 0xff00 and up belong to test transports (tests/transports/). */
#define LC__KEY_TAG_UCX 1u
#define LC__KEY_TAG_TEST 0xff00u
/* Keys one descriptor may carry: one per transport a build registers. */
#define LC__DESC_KEYS_MAX 8
#define LC__DESC_FLAG_MEMFD 1u
/* Bits 8..15 of the flags: the memory kind; 16..23: the device ordinal. */
#define LC__DESC_KIND_SHIFT 8
#define LC__DESC_DEVICE_SHIFT 16
/* Write the header of r's descriptor, announcing `keys` key bytes. */
void lc__region_desc_header(const struct lc_region *r, uint16_t keys, uint8_t *p);
/* Whether keys[0..len) is a sequence of whole frames with nonzero tags,
 * no tag twice: 0, or LC_ERR_PROTO with the reason in *why. */
int lc__region_keys_check(const uint8_t *keys, size_t len, const char **why);
/* The key of tag in checked keys[0..len): 1 with key and key_len set, or 0
 * (absent: key NULL, key_len 0). */
int lc__region_key_find(const uint8_t *keys, size_t len, uint16_t tag, const uint8_t **key,
			size_t *key_len);

#endif
