/*
 * k3_problem.h — K3-layout input buffers for the boundary tests (host
 * memory): the [T, 3P] convolution output holding q, k, v, the [T, W]
 * projection holding beta, and g, filled with valid bf16 values in the
 * ranges of kda_problem.h, with the five views over them; and their copies
 * in a memory backend's memory (ts_mem.h).
 */
#ifndef TS_K3_PROBLEM_H
#define TS_K3_PROBLEM_H

#include "kda_problem.h"

#include <stdlib.h>
#include <string.h>

typedef struct k3_bufs {
    ts_k3 k;
    void *qkv, *proj, *g; /* 256-aligned host buffers */
    sp_tensor views[5];   /* q, k, v, g, beta */
} k3_bufs;

/* At least 256 bytes past `bytes`, zeroed: views moved a few elements read
 * there. */
static inline void *k3_alloc(size_t bytes) {
    const size_t all = (bytes + 511) / 256 * 256;
    unsigned char *p = aligned_alloc(256, all);
    if (!p) abort(); /* a test, not the library */
    memset(p + bytes, 0, all - bytes);
    return p;
}

static inline void k3_fill(k3_bufs *b, ts_rng *r) {
    const ts_k3 *k = &b->k;
    kp_fill_bf16(b->qkv, k->qkv_bytes / 2, r, KP_QKV_LO, KP_QKV_HI);
    kp_fill_bf16(b->proj, k->proj_bytes / 2, r, KP_BETA_LO, KP_BETA_HI);
    kp_fill_bf16(b->g, k->g_bytes / 2, r, KP_G_LO, KP_G_HI);
}

/* Host buffers and CPU views for T tokens, H heads, the given beta width. */
static inline void k3_make(k3_bufs *b, int64_t T, int64_t H, int beta_kind, ts_rng *r) {
    ts_k3_init(&b->k, T, H, beta_kind);
    b->qkv = k3_alloc(b->k.qkv_bytes);
    b->proj = k3_alloc(b->k.proj_bytes);
    b->g = k3_alloc(b->k.g_bytes);
    k3_fill(b, r);
    ts_k3_views(&b->k, b->qkv, b->proj, b->g, sp_cpu(), b->views);
}

/* The same buffers in a memory backend's memory, with the 256 bytes past
 * each (views may be moved a few elements), and views on its device. */
static inline void k3_upload(const ts_mem *m, const k3_bufs *h, k3_bufs *b) {
    b->k = h->k;
    b->qkv = m->alloc(h->k.qkv_bytes + 256);
    b->proj = m->alloc(h->k.proj_bytes + 256);
    b->g = m->alloc(h->k.g_bytes + 256);
    m->upload(b->qkv, h->qkv, h->k.qkv_bytes + 256);
    m->upload(b->proj, h->proj, h->k.proj_bytes + 256);
    m->upload(b->g, h->g, h->k.g_bytes + 256);
    ts_k3_views(&b->k, b->qkv, b->proj, b->g, m->device, b->views);
}

static inline void k3_release(const ts_mem *m, k3_bufs *b) {
    m->release(b->qkv);
    m->release(b->proj);
    m->release(b->g);
}

static inline void k3_free(k3_bufs *b) {
    free(b->qkv);
    free(b->proj);
    free(b->g);
}

/* Dense copies of the five views into the problem's q..beta buffers, made
 * element by element (ts_ref_copy), independently of sp_pack. */
static inline void k3_dense_copies(const k3_bufs *b, kda_problem *p) {
    for (int i = 0; i < 5; i++) {
        sp_tensor d;
        sp_tensor_dense(&d, p->host[KB_Q + i], SP_BF16, b->views[i].ndim, b->views[i].shape,
                        sp_cpu());
        ts_ref_copy(&b->views[i], &d);
    }
}

#endif /* TS_K3_PROBLEM_H */
