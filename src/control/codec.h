/*
 * The control-plane message codec (docs/protocol.md): every message between
 * P and D ranks, versioned, little-endian, with strict length checks.
 *
 * Frame: a 12-byte header, then the body.
 *     u32 magic "LCCP" (0x5043434c)   u16 version (LC__MSG_VERSION)
 *     u16 type (enum lc__msg_type)    u32 total length (header + body)
 * Every body (version 2) ends with the 16-byte session secret: the one the
 * D session registered with (pd/prefill_register.c, docs/security.md).
 * Strings are u16 length + bytes (no NUL inside, shorter than
 * LC__MSG_STR_MAX); arrays are a u32 count + fixed-size elements. A decoder
 * rejects a wrong magic, version or type, a length that disagrees with the
 * buffer, any field out of range and trailing bytes: LC_ERR_PROTO and a
 * one-line reason. The caller counts, logs and drops the message.
 *
 * Threading: pure functions; a decoded message is owned by the caller and
 * freed with lc__msg_free.
 */
#ifndef LC_CONTROL_CODEC_H
#define LC_CONTROL_CODEC_H

#include "core/common.h"

#define LC__MSG_MAGIC 0x5043434cu /* "LCCP" little-endian */
#define LC__MSG_VERSION 2
#define LC__MSG_SECRET_LEN 16 /* the session secret closing every body */
#define LC__MSG_HEADER 12
#define LC__MSG_MAX (16u << 20)       /* largest message, bytes */
#define LC__MSG_STR_MAX 256           /* strings hold at most 255 bytes */
#define LC__MSG_MAX_SLOTS 64          /* state slots of one transfer info */
#define LC__MSG_MAX_BUFFERS 4096      /* buffers of a registration */
#define LC__MSG_MAX_REGIONS 1024      /* region descriptors of a registration */
#define LC__MSG_MAX_FANIN 4096        /* required_dst_info_num */
#define LC__MSG_MAX_LAYERS (1u << 20) /* layers landed */
/* Pages of one transfer info: as many as fit in a message after every
 * other field of a TRANSFER_INFO at its largest (header, room, two full
 * strings, the fixed fields, both counts, LC__MSG_MAX_SLOTS slots and the
 * longest pairing value), so
 * that a transfer info the API accepts can always be encoded. */
#define LC__MSG_INFO_FIXED_MAX                                                                     \
	(LC__MSG_HEADER + 8 + 2 * (2 + LC__MSG_STR_MAX - 1) + 4 + 4 + 8 + 8 + 4 + 4 +              \
	 8 * LC__MSG_MAX_SLOTS + 1 + LC_PAIR_MAX + LC__MSG_SECRET_LEN)
#define LC__MSG_MAX_PAGES ((LC__MSG_MAX - LC__MSG_INFO_FIXED_MAX) / 8)
_Static_assert(LC__MSG_INFO_FIXED_MAX + 8ull * LC__MSG_MAX_PAGES <= LC__MSG_MAX,
	       "a maximal transfer info must fit in one message");

enum lc__msg_type {
	LC__MSG_REGISTER = 1,       /* D -> P: session registration */
	LC__MSG_REGISTER_REPLY = 2, /* P -> D: accepted or refused (geometry) */
	LC__MSG_TRANSFER_INFO = 3,  /* D -> P: one room's destination pages */
	LC__MSG_CANCEL = 4,         /* D -> P: cancel a room */
	LC__MSG_STATUS = 5,         /* P -> D: Success (+ metadata), Failed; or info taken */
	LC__MSG_LAYERS = 6,         /* P -> D: leading layers landed (coalesced) */
	LC__MSG_TYPE_MAX = 6,
};

/* Per buffer of D's layout: geometry (for the fingerprint check and the
 * message naming a difference) and where D's page 0 of it lives. */
typedef struct lc__msg_buffer {
	int32_t layer;
	uint32_t kind;
	uint32_t flags;
	uint32_t region; /* index into the descriptors of the registration */
	uint64_t item_len;
	uint64_t offset; /* byte offset of page 0 within that region */
	uint32_t rows;   /* with LC__REG_HAS_ROWS: tokens per token-major page */
} lc__msg_buffer_t;

enum lc__msg_register_flags {
	LC__REG_HAS_TOKEN = 1u << 0,
	/* D's CURVE public key (z85, 40 characters) follows the fingerprint:
	 * P connects to D's status endpoint with it as the server key, so that
	 * every rank may have its own keypair. */
	LC__REG_HAS_CURVE_KEY = 1u << 1,
	/* D's TP size (u32) follows: D's page geometry differs from P's
	 * (heterogeneous TP) and P sends each buffer's lc_tp_fragment for
	 * (its rank, d_rank). */
	LC__REG_HAS_TP = 1u << 2,
	/* With LC__REG_HAS_TP: D's pages are token-major; a u32 per buffer
	 * (tokens per page, 0/1 head-major) follows the buffers, for P's
	 * lc_tp_fragment rows (strided writes). */
	LC__REG_HAS_ROWS = 1u << 3,
};
#define LC__REG_FLAGS                                                                              \
	(LC__REG_HAS_TOKEN | LC__REG_HAS_CURVE_KEY | LC__REG_HAS_TP | LC__REG_HAS_ROWS)
#define LC__MSG_MAX_ROWS 65536u /* LC_WRITE_MAX_COUNT */
#define LC__MSG_MAX_TP 4096
#define LC__MSG_CURVE_KEY_LEN 40

typedef struct lc__msg_register {
	char session[LC__MSG_STR_MAX];   /* D's session id, e.g. "d0@10.0.0.2:7001" */
	char status_ep[LC__MSG_STR_MAX]; /* D's ZMQ PULL endpoint "tcp://host:port" */
	char data_url[LC__MSG_STR_MAX];  /* D's data-plane listener URL */
	uint32_t d_rank;
	uint32_t d_tp;  /* with LC__REG_HAS_TP: D's TP size, > d_rank */
	uint32_t flags; /* enum lc__msg_register_flags */
	uint8_t token[LC_TOKEN_LEN];
	uint64_t fingerprint;                      /* lc_layout_fingerprint of D's layout */
	char curve_key[LC__MSG_CURVE_KEY_LEN + 1]; /* with LC__REG_HAS_CURVE_KEY */
	uint32_t nbuffers;
	lc__msg_buffer_t *buffers;
	uint32_t nregions;
	const void **region_descs; /* packed lc_region_pack descriptors */
	size_t *region_desc_lens;
	uint8_t *region_blob; /* decoder: backing store of region_descs */
} lc__msg_register_t;

typedef struct lc__msg_register_reply {
	char session[LC__MSG_STR_MAX];
	uint32_t p_rank;
	int32_t result; /* 0 accepted, else a negative code (LC_ERR_GEOMETRY) */
	char reason[LC__MSG_STR_MAX];
} lc__msg_register_reply_t;

enum lc__msg_info_flags {
	LC__INFO_DUMMY = 1u << 0,
	/* The request's pairing value follows the slots (u8 length,
	 * LC_PAIR_MIN..LC_PAIR_MAX, and the bytes): P's sender of a paired
	 * room takes only a transfer info that carries its own. */
	LC__INFO_HAS_PAIR = 1u << 1,
	/* D wants P to confirm that the room has a sender and took this info
	 * (a STATUS Bootstrapped): until then D does not count the room as
	 * known to P (its bootstrap deadline runs). Not with a dummy. */
	LC__INFO_WANTS_ACK = 1u << 2,
};
#define LC__INFO_FLAGS (LC__INFO_DUMMY | LC__INFO_HAS_PAIR | LC__INFO_WANTS_ACK)

typedef struct lc__msg_transfer_info {
	uint64_t room;
	char session[LC__MSG_STR_MAX];
	char status_ep[LC__MSG_STR_MAX]; /* where to answer even if unregistered */
	uint32_t required_dst;           /* required_dst_info_num, 1..LC__MSG_MAX_FANIN */
	uint32_t flags;                  /* enum lc__msg_info_flags */
	uint64_t prefix_len;             /* D's decode prefix length, tokens */
	int64_t aux_index;
	uint32_t page_count;
	int64_t *pages; /* >= 0; empty for a dummy */
	uint32_t slot_count;
	int64_t *slots;
	uint8_t pair_len; /* with LC__INFO_HAS_PAIR, else 0 */
	uint8_t pair[LC_PAIR_MAX];
} lc__msg_transfer_info_t;

typedef struct lc__msg_cancel {
	uint64_t room;
	char session[LC__MSG_STR_MAX];
	char reason[LC__MSG_STR_MAX];
} lc__msg_cancel_t;

typedef struct lc__msg_status {
	uint64_t room;
	uint32_t p_rank;
	/* LC_ROOM_SUCCESS or LC_ROOM_FAILED: the room ended; LC_ROOM_BOOTSTRAPPED
	 * (no reason, metadata or flags): the room has a sender at this P rank
	 * and it took D's transfer info (asked with LC__INFO_WANTS_ACK). */
	uint8_t status;
	uint32_t fail_reason; /* lc_fail_reason_t; 0 with Success */
	char reason[LC_REASON_MAX];
	uint32_t metadata_len; /* <= LC_METADATA_MAX; 0 with Failed */
	uint8_t *metadata;
	uint32_t flags;    /* LC__STATUS_* */
	uint64_t checksum; /* with LC__STATUS_HAS_CHECKSUM: core/checksum.h */
} lc__msg_status_t;

enum lc__msg_status_flags {
	/* the sum of every byte this P rank wrote for the room (Success only) */
	LC__STATUS_HAS_CHECKSUM = 1u << 0,
};

typedef struct lc__msg_layers {
	uint64_t room;
	uint32_t p_rank;
	uint32_t layers; /* 1..LC__MSG_MAX_LAYERS */
} lc__msg_layers_t;

typedef struct lc__msg {
	int type; /* enum lc__msg_type */
	/* The session secret (every type): D's for its session at one P rank,
	 * sent by D in REGISTER, TRANSFER_INFO and CANCEL, echoed by P in
	 * REGISTER_REPLY, STATUS and LAYERS. The codec carries it; the ranks
	 * check it (constant-time). */
	uint8_t secret[LC__MSG_SECRET_LEN];
	lc__msg_register_t reg;
	lc__msg_register_reply_t reply;
	lc__msg_transfer_info_t info;
	lc__msg_cancel_t cancel;
	lc__msg_status_t status;
	lc__msg_layers_t layers;
} lc__msg_t;

/* Encode msg (msg->type selects the member) into a fresh buffer (caller
 * frees with free()). Errors: -EINVAL (a field out of range: the same
 * checks as the decoder), -EMSGSIZE (over LC__MSG_MAX), -ENOMEM. */
int lc__msg_encode(const lc__msg_t *msg, uint8_t **out, size_t *out_len);
/* Decode and validate. On success *msg owns any arrays (lc__msg_free). On
 * failure returns LC_ERR_PROTO, leaves nothing to free, and writes a
 * one-line reason into why (may be NULL). */
int lc__msg_decode(const void *buf, size_t len, lc__msg_t *msg, char *why, size_t why_cap);
void lc__msg_free(lc__msg_t *msg);
/* The version in a buffer's header, or -1 when the buffer does not start
 * with a header of this protocol (short, or another magic). */
int lc__msg_peek_version(const void *buf, size_t len);
/* An old D's version-1 REGISTER refused in the words that D understands: a
 * version-1 REGISTER_REPLY naming its session, with result and reason. The
 * REGISTER's status endpoint goes to ep[ep_cap]. Returns 0 and a fresh
 * buffer (free()), or LC_ERR_PROTO when buf is no readable version-1
 * REGISTER, -EINVAL, -ENOMEM. */
int lc__msg_refuse_v1_register(const void *buf, size_t len, uint32_t p_rank, int32_t result,
			       const char *reason, char *ep, size_t ep_cap, uint8_t **out,
			       size_t *out_len);
/* "register", "status"...; "unknown". */
const char *lc__msg_type_name(int type);

#endif
