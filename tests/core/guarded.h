/*
 * guarded.h — buffers with poisoned guard bytes for the core tests.
 *
 * A test never checks only the elements it expects to change: it keeps an
 * "expected" image of the whole allocation (guards, padding between strided
 * elements, everything), applies the reference to that image, and compares
 * every byte afterwards. A stray write anywhere in the allocation shows up.
 */
#ifndef SP_TEST_GUARDED_H
#define SP_TEST_GUARDED_H

#include "test_support.h"

#include <stdlib.h>
#include <string.h>

/* Bytes of poison before (GB_LEAD, which keeps the payload's alignment a
 * choice of the caller) and after (GB_GUARD) every payload. */
#define GB_LEAD 256
#define GB_GUARD 64

typedef struct gbuf {
    unsigned char *raw;    /* the allocation, 256-aligned */
    unsigned char *expect; /* what raw must hold after the call under test */
    size_t raw_bytes;
    unsigned char *p; /* the payload: raw + GB_LEAD + shift */
    size_t bytes;
} gbuf;

/* A payload of `bytes` at `shift` bytes past a 256-aligned address (so
 * shift picks the alignment the library sees), all of it random poison;
 * expect mirrors raw. */
static inline gbuf gb_alloc(size_t bytes, size_t shift, ts_rng *r) {
    gbuf b;
    size_t need = GB_LEAD + shift + bytes + GB_GUARD;
    b.raw_bytes = (need + 255) / 256 * 256;
    b.raw = (unsigned char *)aligned_alloc(256, b.raw_bytes);
    b.expect = (unsigned char *)malloc(b.raw_bytes);
    if (!b.raw || !b.expect) abort(); /* a test, not the library */
    b.p = b.raw + GB_LEAD + shift;
    b.bytes = bytes;
    ts_fill_random(b.raw, b.raw_bytes, r);
    memcpy(b.expect, b.raw, b.raw_bytes);
    return b;
}

static inline void gb_free(gbuf *b) {
    free(b->raw);
    free(b->expect);
    b->raw = b->expect = NULL;
}

/* The same view moved from the payload onto the expected image. */
static inline sp_tensor gb_on_expect(const gbuf *b, sp_tensor t) {
    t.data = b->expect + ((unsigned char *)t.data - b->raw);
    return t;
}

/* Index of the first byte where raw and expect differ, or -1. */
static inline long gb_first_diff(const gbuf *b) {
    for (size_t i = 0; i < b->raw_bytes; i++)
        if (b->raw[i] != b->expect[i]) return (long)i;
    return -1;
}

/* Refresh the image after a call that was allowed to write. */
static inline void gb_sync(gbuf *b) { memcpy(b->expect, b->raw, b->raw_bytes); }

#endif /* SP_TEST_GUARDED_H */
