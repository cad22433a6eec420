/*
 * ts_mem.c — the host memory backend and the arena, for every backend.
 * The CUDA backend is ts_mem_cuda.c, built in CUDA builds only.
 */
#include "ts_mem.h"

#include <stdint.h>
#include <string.h>

static void *host_alloc(size_t bytes) {
    return aligned_alloc(256, (bytes + 255) / 256 * 256);
}

static void host_release(void *p) { free(p); }

static void host_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

static const ts_mem host_mem = {"host", {SP_DEVICE_CPU, 0}, NULL, host_alloc, host_release,
                                host_copy, host_copy};

const ts_mem *ts_mem_host(void) { return &host_mem; }

#ifndef TS_MEM_CUDA
const ts_mem *ts_mem_cuda(const char **why) {
    if (why) *why = "a build without the CUDA backend";
    return NULL;
}
#endif

static void *or_exit(void *p, size_t bytes, const char *what) {
    if (!p) {
        fprintf(stderr, "arena: no %s memory for %zu bytes\n", what, bytes);
        exit(1);
    }
    return p;
}

void ts_arena_init(ts_arena *a, const ts_mem *mem, size_t cap) {
    memset(a, 0, sizeof *a);
    a->mem = mem;
    a->base = (unsigned char *)or_exit(mem->alloc(cap), cap, mem->name);
    a->expect = (unsigned char *)or_exit(malloc(cap), cap, "host");
    a->got = (unsigned char *)or_exit(malloc(cap), cap, "host");
    a->cap = cap;
}

void ts_arena_free(ts_arena *a) {
    a->mem->release(a->base);
    free(a->expect);
    free(a->got);
    memset(a, 0, sizeof *a);
}

void ts_arena_reset(ts_arena *a) { a->used = 0; }

unsigned char *ts_arena_take(ts_arena *a, size_t bytes, size_t shift) {
    size_t off = (a->used + 255) / 256 * 256 + TS_ARENA_GAP + shift;
    if (off + bytes + TS_ARENA_GAP > a->cap) {
        fprintf(stderr, "arena: %zu bytes do not fit (%zu of %zu used)\n", bytes, a->used, a->cap);
        exit(1);
    }
    a->used = off + bytes + TS_ARENA_GAP;
    return a->base + off;
}

void *ts_arena_image(const ts_arena *a, const void *p) {
    const uintptr_t at = (uintptr_t)p, base = (uintptr_t)a->base;
    if (at >= base && at - base <= a->cap) return a->expect + (at - base);
    /* Outside the arena: only an empty view's data (NULL, anywhere), which
     * nothing reads. Moved in integers, since pointer arithmetic may not
     * leave its object. */
    return (void *)((uintptr_t)a->expect + (at - base));
}

sp_tensor ts_arena_on_image(const ts_arena *a, sp_tensor t) {
    t.data = ts_arena_image(a, t.data);
    t.device = sp_cpu();
    return t;
}

void ts_arena_poison(ts_arena *a, ts_rng *r) {
    ts_fill_random(a->expect, a->used, r);
    a->mem->upload(a->base, a->expect, a->used);
}

void ts_arena_upload(ts_arena *a, const void *p, size_t bytes) {
    a->mem->upload((void *)(uintptr_t)p, ts_arena_image(a, p), bytes);
}

long ts_arena_first_diff(ts_arena *a) {
    a->mem->download(a->got, a->base, a->used);
    if (memcmp(a->got, a->expect, a->used) == 0) return -1;
    for (size_t i = 0; i < a->used; i++)
        if (a->got[i] != a->expect[i]) return (long)i;
    return -1;
}

void ts_arena_sync(ts_arena *a) { a->mem->download(a->expect, a->base, a->used); }
