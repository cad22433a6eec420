/*
 * mg_util.h — what the multi-GPU tests share: setup calls on a chosen
 * device (the test's own, so they may switch devices), the K3 problem on one
 * device, and the driver's view of which devices have a context.
 */
#ifndef SP_MG_UTIL_H
#define SP_MG_UTIL_H

#include "check.h"
#include "cuda_ok.h"
#include "k3_problem.h"

#include <cuda.h> /* types only: the driver call is looked up through the runtime */
#include <string.h>

/* Run `stmt` with `dev` current, then make `back` current again. Some calls
 * (cudaMemset, cudaFree, cudaDeviceSynchronize) act on the current device. */
#define ON_DEVICE(dev, back, stmt)          \
    do {                                    \
        CUDA_OK(cudaSetDevice(dev));        \
        CUDA_OK(stmt);                      \
        CUDA_OK(cudaSetDevice(back));       \
    } while (0)

static inline void *mg_upload(int dev, int back, const void *src, size_t bytes) {
    void *p = NULL;
    ON_DEVICE(dev, back, cudaMalloc(&p, bytes + 256));
    CUDA_OK(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice));
    ON_DEVICE(dev, back, cudaDeviceSynchronize()); /* pageable uploads may be in flight */
    return p;
}

static inline void *mg_download(const void *src, size_t bytes) {
    void *h = malloc(bytes + 1);
    CUDA_OK(cudaMemcpy(h, src, bytes, cudaMemcpyDeviceToHost));
    return h;
}

/* One KDA problem's buffers on one device; q, k, v, g and beta of `args`
 * are the strided K3 views of qkv, proj and g. */
typedef struct mg_problem {
    int dev;
    void *buf[KB_COUNT];
    void *qkv, *proj, *g;
    sp_kda_args args;
} mg_problem;

static inline void mg_make(mg_problem *d, int dev, int back, const kda_problem *p,
                           const k3_bufs *k3) {
    d->dev = dev;
    for (int i = 0; i < KB_COUNT; i++)
        d->buf[i] = p->bytes[i] ? mg_upload(dev, back, p->host[i], p->bytes[i]) : NULL;
    d->qkv = mg_upload(dev, back, k3->qkv, k3->k.qkv_bytes);
    d->proj = mg_upload(dev, back, k3->proj, k3->k.proj_bytes);
    d->g = mg_upload(dev, back, k3->g, k3->k.g_bytes);
    kp_args(p, d->buf, sp_cuda(dev), &d->args);
    sp_tensor v[5];
    ts_k3_views(&k3->k, d->qkv, d->proj, d->g, sp_cuda(dev), v);
    d->args.q = v[0];
    d->args.k = v[1];
    d->args.v = v[2];
    d->args.g = v[3];
    d->args.beta = v[4];
}

static inline void mg_free(mg_problem *d, int back) {
    for (int i = 0; i < KB_COUNT; i++)
        if (d->buf[i]) ON_DEVICE(d->dev, back, cudaFree(d->buf[i]));
    ON_DEVICE(d->dev, back, cudaFree(d->qkv));
    ON_DEVICE(d->dev, back, cudaFree(d->proj));
    ON_DEVICE(d->dev, back, cudaFree(d->g));
}

/* The pack's five outputs equal the strided host views, element by
 * element. @return the number of outputs that differ. */
static inline int mg_pack_differs(const k3_bufs *k3, const sp_tensor out[5]) {
    int bad = 0;
    for (int i = 0; i < 5; i++) {
        int64_t n = 0;
        sp_tensor_numel(&out[i], &n);
        void *h = mg_download(out[i].data, (size_t)n * 2);
        sp_tensor hd;
        sp_tensor_dense(&hd, h, SP_BF16, out[i].ndim, out[i].shape, sp_cpu());
        bad += ts_ref_compare(&k3->views[i], &hd, NULL) != 0;
        free(h);
    }
    return bad;
}

/* 1 when `dev` has an active primary context, 0 when not; ends the test
 * (exit 1) when the driver cannot say. */
static inline int mg_primary_active(int dev) {
    typedef CUresult (*state_fn)(CUdevice, unsigned int *, int *);
    void *p = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    CUDA_OK(cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &p, 12000,
                                             cudaEnableDefault, &q));
#else
    CUDA_OK(cudaGetDriverEntryPoint("cuDevicePrimaryCtxGetState", &p, cudaEnableDefault, &q));
#endif
    unsigned int flags = 0;
    int active = 0;
    if (q != cudaDriverEntryPointSuccess || !p || ((state_fn)p)(dev, &flags, &active) != CUDA_SUCCESS) {
        fprintf(stderr, "cuDevicePrimaryCtxGetState(%d) is not available\n", dev);
        exit(1);
    }
    return active != 0;
}

#endif /* SP_MG_UTIL_H */
