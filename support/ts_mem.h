/*
 * ts_mem.h — where a test's buffers live: host memory or CUDA device memory,
 * behind one small interface, so that a test body is written once and runs
 * on both (the host run in the core tier, the device run in the gpu tier).
 *
 * On top of it, the arena is how every copy test checks for stray writes:
 * all buffers of a case are carved out of one allocation with poisoned gaps
 * between them; the whole used part is filled with random bytes, uploaded,
 * and a host image of it is updated with the reference copy. After the call
 * under test the used part comes back and must equal the image byte for
 * byte, so a wrong element, a write into a gap and a write into a source
 * all show.
 *
 * A failing allocation or transfer is the test's problem, not the library's:
 * it ends the test with exit status 1 and a message.
 */
#ifndef TS_MEM_H
#define TS_MEM_H

#include "test_support.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_mem {
    const char *name; /* "host" or "cuda" */
    sp_device device; /* what views of this memory say: sp_cpu() or sp_cuda(0) */
    /* A stream of the backend's own (non-blocking), or NULL on the host:
     * tests run some calls on it rather than on the default stream. */
    struct CUstream_st *stream;
    /* `bytes` (> 0), 256-aligned. */
    void *(*alloc)(size_t bytes);
    void (*release)(void *p);
    /* host -> this memory; the bytes have landed when it returns. */
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    /* this memory -> host, after all work queued on the device. */
    void (*download)(void *host_dst, const void *src, size_t bytes);
} ts_mem;

const ts_mem *ts_mem_host(void);
/* Device memory on CUDA device 0, which it makes current. NULL when the
 * build has no CUDA backend or no device is usable; *why (may be NULL) then
 * says which. */
const ts_mem *ts_mem_cuda(const char **why);

/* The backend called `name` ("host", "cuda"); exits 77 ("Not Run" for
 * ctest) with the reason when it cannot be used here, 1 for an unknown name. */
static inline const ts_mem *ts_mem_or_skip(const char *name) {
    const char *why = "unknown memory backend";
    const ts_mem *m = NULL;
    if (!strcmp(name, "host")) m = ts_mem_host();
    if (!strcmp(name, "cuda")) {
        m = ts_mem_cuda(&why);
        if (!m) {
            fprintf(stderr, "SKIP: %s\n", why);
            exit(77);
        }
    }
    if (!m) {
        fprintf(stderr, "%s: %s\n", name, why);
        exit(1);
    }
    return m;
}

/* The name ctest knows a test body by: `base` on host memory, `base`_gpu on
 * the device (sp_add_backend_test builds both). */
static inline const char *ts_mem_test_name(const ts_mem *m, const char *base) {
    static char name[96];
    snprintf(name, sizeof name, "%s%s", base, m->device.type == SP_DEVICE_CUDA ? "_gpu" : "");
    return name;
}

/* ---- the arena --------------------------------------------------------------- */
#define TS_ARENA_GAP 256 /* poisoned bytes before and after every buffer */

typedef struct ts_arena {
    const ts_mem *mem;
    unsigned char *base;   /* the allocation, in mem's memory, 256-aligned */
    unsigned char *expect; /* host image of what base must hold */
    unsigned char *got;    /* base, as last downloaded */
    size_t cap, used;
} ts_arena;

void ts_arena_init(ts_arena *a, const ts_mem *mem, size_t cap);
void ts_arena_free(ts_arena *a);
/* Start a new case: forget every buffer. */
void ts_arena_reset(ts_arena *a);
/* Room for `bytes` at `shift` bytes past a 256-aligned address (so shift
 * picks the alignment the library sees), after a gap; returns its address
 * in mem's memory. A full arena is the test's bug: exit 1. */
unsigned char *ts_arena_take(ts_arena *a, size_t bytes, size_t shift);
/* Address on the host image of an address in the arena (an address
 * outside it, as an empty view may have, maps to one nothing may read). */
void *ts_arena_image(const ts_arena *a, const void *p);
/* The same view, moved onto the host image (device: the CPU). */
sp_tensor ts_arena_on_image(const ts_arena *a, sp_tensor t);
/* Fill the used part with random bytes, on both sides. */
void ts_arena_poison(ts_arena *a, ts_rng *r);
/* Copy the image's bytes at [p, p + bytes) to the arena (after changing
 * sources on the image). */
void ts_arena_upload(ts_arena *a, const void *p, size_t bytes);
/* Download the used part; index of the first byte that differs from the
 * image, or -1. Waits for the device first. */
long ts_arena_first_diff(ts_arena *a);
/* The image as the arena now is (after a call that was allowed to write). */
void ts_arena_sync(ts_arena *a);

#ifdef __cplusplus
}
#endif

#endif /* TS_MEM_H */
