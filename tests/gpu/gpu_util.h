/*
 * gpu_util.h — what the GPU tests share: a CUDA check that fails the test,
 * the skip when no device is usable, and an arena of device memory with a
 * host image of what it must hold.
 *
 * The arena is how every GPU test checks for stray writes: all buffers of a
 * case are carved out of one device allocation with poisoned gaps between
 * them; the whole used part is filled with random bytes, uploaded, and the
 * host image is updated with the reference copy. After the call under test
 * the used part comes back and must equal the image byte for byte, so a
 * wrong element, a write into a gap and a write into a source all show.
 */
#ifndef SP_GPU_UTIL_H
#define SP_GPU_UTIL_H

#include "check.h"
#include "test_support.h"

#include "cuda_ok.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Exit 77 (ctest: "Not Run") unless a CUDA device is usable. */
static inline void gpu_require(void) {
    if (!sp_cuda_available()) SP_SKIP("no usable CUDA device (or a build without CUDA)");
    CUDA_OK(cudaSetDevice(0));
}

#define ARENA_GAP 256 /* poisoned bytes before every buffer */

typedef struct arena {
    unsigned char *dev;    /* device allocation, 256-aligned */
    unsigned char *expect; /* host image of what dev must hold */
    unsigned char *got;    /* dev, downloaded */
    size_t cap, used;
} arena;

static inline void arena_init(arena *a, size_t cap) {
    memset(a, 0, sizeof *a);
    CUDA_OK(cudaMalloc((void **)&a->dev, cap));
    a->expect = (unsigned char *)malloc(cap);
    a->got = (unsigned char *)malloc(cap);
    if (!a->expect || !a->got) {
        fprintf(stderr, "arena: out of host memory for %zu bytes\n", cap);
        exit(1);
    }
    a->cap = cap;
}

static inline void arena_free(arena *a) {
    CUDA_OK(cudaFree(a->dev));
    free(a->expect);
    free(a->got);
    memset(a, 0, sizeof *a);
}

/* Start a new case: forget every buffer. */
static inline void arena_reset(arena *a) { a->used = 0; }

/* Room for `bytes` at `shift` bytes past a 256-aligned address, after a
 * gap; returns the device address. A full arena is the test's bug: exit 1. */
static inline unsigned char *arena_take(arena *a, size_t bytes, size_t shift) {
    size_t off = (a->used + 255) / 256 * 256 + ARENA_GAP + shift;
    if (off + bytes + ARENA_GAP > a->cap) {
        fprintf(stderr, "arena: %zu bytes do not fit (%zu of %zu used)\n", bytes, a->used, a->cap);
        exit(1);
    }
    a->used = off + bytes + ARENA_GAP;
    return a->dev + off;
}

/* Host image address of a device address in the arena. */
static inline void *arena_host(const arena *a, const void *dev) {
    return a->expect + ((const unsigned char *)dev - a->dev);
}

/* The same view, moved onto the host image. */
static inline sp_tensor arena_on_host(const arena *a, sp_tensor t) {
    t.data = arena_host(a, t.data);
    t.device = sp_cpu();
    return t;
}

/* Fill the used part with random bytes, on both sides. */
static inline void arena_poison(arena *a, ts_rng *r) {
    ts_fill_random(a->expect, a->used, r);
    CUDA_OK(cudaMemcpy(a->dev, a->expect, a->used, cudaMemcpyHostToDevice));
    /* From pageable memory cudaMemcpy may return before the DMA lands, and
     * the copies under test run on non-blocking streams: wait for it. */
    CUDA_OK(cudaDeviceSynchronize());
}

/* Copy the host image's [dev, dev + bytes) to the device (after changing
 * sources on the host side). */
static inline void arena_upload(arena *a, const void *dev, size_t bytes) {
    CUDA_OK(cudaMemcpy((void *)dev, arena_host(a, dev), bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaDeviceSynchronize()); /* as in arena_poison */
}

/* Download the used part; index of the first byte that differs from the
 * image, or -1. Synchronizes the device first. */
static inline long arena_first_diff(arena *a) {
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(a->got, a->dev, a->used, cudaMemcpyDeviceToHost));
    if (memcmp(a->got, a->expect, a->used) == 0) return -1;
    for (size_t i = 0; i < a->used; i++)
        if (a->got[i] != a->expect[i]) return (long)i;
    return -1;
}

#endif /* SP_GPU_UTIL_H */
