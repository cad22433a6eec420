/*
 * test_multi_gpu.c — the library follows each tensor's device, never the
 * caller's current one. Needs two GPUs (exit 77 otherwise):
 *   1. K3 inputs on the last GPU while the calling thread's current device is
 *      0: sp_pack and the KDA boundary run there, results bit-exact, and the
 *      caller's current device is still 0 afterwards;
 *   2. inputs spanning two devices: SP_ERR_DEVICE_MISMATCH, nothing written;
 *   3. one thread per GPU, each with its own boundary and stream, running
 *      packs and boundary calls at the same time: every GPU's output and
 *      final state bit-identical to a run of the same problem on GPU 0 alone.
 */
#include "check.h"
#include "k3_problem.h"

#include <pthread.h>
#include <string.h>

#ifdef SP_HAVE_CUDA
#include "cuda_ok.h"

enum { T = 300, H = 4, REPS = 8 };
static const int64_t lens[3] = {100, 37, 163};

/* One problem's buffers on one device. */
typedef struct dev_problem {
    int dev;
    void *buf[KB_COUNT]; /* dense arguments (q..beta unused: the K3 views feed them) */
    void *qkv, *proj, *g;
    sp_kda_args args; /* q, k, v, g, beta are the strided K3 views */
} dev_problem;

static kda_problem prob;
static k3_bufs host_k3;

static void *dev_alloc_copy(int dev, const void *src, size_t bytes) {
    void *p = NULL;
    int cur;
    CUDA_OK(cudaGetDevice(&cur));
    CUDA_OK(cudaSetDevice(dev));
    CUDA_OK(cudaMalloc(&p, bytes + 256));
    CUDA_OK(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaDeviceSynchronize()); /* pageable uploads may still be in flight */
    CUDA_OK(cudaSetDevice(cur));
    return p;
}

static void dp_make(dev_problem *d, int dev) {
    d->dev = dev;
    for (int i = 0; i < KB_COUNT; i++)
        d->buf[i] = prob.bytes[i] ? dev_alloc_copy(dev, prob.host[i], prob.bytes[i]) : NULL;
    d->qkv = dev_alloc_copy(dev, host_k3.qkv, host_k3.k.qkv_bytes);
    d->proj = dev_alloc_copy(dev, host_k3.proj, host_k3.k.proj_bytes);
    d->g = dev_alloc_copy(dev, host_k3.g, host_k3.k.g_bytes);
    kp_args(&prob, d->buf, sp_cuda(dev), &d->args);
    sp_tensor v[5];
    sp_k3_views(&host_k3.k, d->qkv, d->proj, d->g, sp_cuda(dev), v);
    d->args.q = v[0];
    d->args.k = v[1];
    d->args.v = v[2];
    d->args.g = v[3];
    d->args.beta = v[4];
}

static void dp_free(dev_problem *d) {
    for (int i = 0; i < KB_COUNT; i++) cudaFree(d->buf[i]);
    cudaFree(d->qkv);
    cudaFree(d->proj);
    cudaFree(d->g);
}

static void *download(const void *src, size_t bytes) {
    void *h = malloc(bytes + 1);
    CUDA_OK(cudaMemcpy(h, src, bytes, cudaMemcpyDeviceToHost));
    return h;
}

/* o and state of a finished run, on the host. */
typedef struct result {
    void *o, *state;
} result;

static result fetch(const dev_problem *d) {
    result r = {download(d->buf[KB_O], prob.bytes[KB_O]),
                download(d->buf[KB_STATE], prob.bytes[KB_STATE])};
    return r;
}

static int same(const result *a, const result *b) {
    return !memcmp(a->o, b->o, prob.bytes[KB_O]) && !memcmp(a->state, b->state, prob.bytes[KB_STATE]);
}

/* ---- 3: one thread per GPU ---- */
typedef struct worker {
    dev_problem d;
    int failures;
    result res;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    cudaStream_t s;
    sp_kda_boundary *b = NULL;
    /* The thread's current device stays 0: everything below must follow the
     * tensors to w->d.dev on its own. */
    CUDA_OK(cudaSetDevice(w->d.dev));
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_OK(cudaSetDevice(0));
    if (sp_kda_boundary_create(&b, sp_cuda(w->d.dev), T, H) != SP_OK) {
        w->failures++;
        return NULL;
    }
    size_t wsb = 0;
    sp_tensor in[5] = {w->d.args.q, w->d.args.k, w->d.args.v, w->d.args.g, w->d.args.beta}, out[5];
    sp_pack_workspace_bytes(in, 5, &wsb);
    void *ws = NULL;
    CUDA_OK(cudaSetDevice(w->d.dev));
    CUDA_OK(cudaMalloc(&ws, wsb));
    CUDA_OK(cudaSetDevice(0));
    for (int i = 0; i < REPS; i++) {
        if (sp_pack(in, 5, ws, wsb, out, NULL, (struct CUstream_st *)s) != SP_OK) w->failures++;
        /* The state pool is read and written by each run: reset it first. */
        CUDA_OK(cudaSetDevice(w->d.dev));
        CUDA_OK(cudaMemcpyAsync(w->d.buf[KB_STATE], prob.host[KB_STATE], prob.bytes[KB_STATE],
                                cudaMemcpyHostToDevice, s));
        CUDA_OK(cudaSetDevice(0));
        if (sp_kda_boundary_run(b, &w->d.args, (struct CUstream_st *)s) != SP_OK) w->failures++;
    }
    CUDA_OK(cudaStreamSynchronize(s));
    int cur = -1;
    CUDA_OK(cudaGetDevice(&cur));
    if (cur != 0) w->failures++;
    w->res = fetch(&w->d);
    /* The last pack's outputs equal the strided inputs, element by element. */
    for (int i = 0; i < 5; i++) {
        size_t bytes = (size_t)host_k3.views[i].shape[1] * H * (i == 4 ? 1 : 128) * 2;
        void *h = download(out[i].data, bytes);
        sp_tensor hd;
        sp_tensor_dense(&hd, h, SP_BF16, out[i].ndim, out[i].shape, sp_cpu());
        if (sp_ref_compare(&host_k3.views[i], &hd, NULL) != 0) w->failures++;
        free(h);
    }
    cudaFree(ws);
    sp_kda_boundary_destroy(b);
    cudaStreamDestroy(s);
    return NULL;
}

int main(void) {
    int ngpu = 0;
    if (!sp_cuda_available() || cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 2)
        SP_SKIP("needs two CUDA devices (found %d)", ngpu);
    sp_rng r;
    sp_rng_seed(&r, 2027);
    kp_make_ex(&prob, 3, lens, 0, H, SP_F32, SP_KDA_GATE_LOWER_BOUND, 0, 99, 0);
    k3_make(&host_k3, T, H, SP_K3_BETA_INPROJ, &r);
    CUDA_OK(cudaSetDevice(0));
    const int last = ngpu - 1;

    /* Reference: the boundary on GPU 0 alone. */
    dev_problem d0, dl;
    dp_make(&d0, 0);
    sp_kda_boundary *b0 = NULL;
    CHECK_OK(sp_kda_boundary_create(&b0, sp_cuda(0), T, H));
    CHECK_OK(sp_kda_boundary_run(b0, &d0.args, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    result ref = fetch(&d0);

    /* 1. Everything on the last GPU, current device 0. */
    dp_make(&dl, last);
    sp_kda_boundary *bl = NULL;
    CHECK_OK(sp_kda_boundary_create(&bl, sp_cuda(last), T, H));
    int cur = -1;
    CUDA_OK(cudaGetDevice(&cur));
    CHECK(cur == 0);
    uint64_t passes = sp_copy_pass_count();
    CHECK_OK(sp_kda_boundary_run(bl, &dl.args, NULL));
    CHECK(sp_copy_pass_count() - passes == 1);
    CUDA_OK(cudaGetDevice(&cur));
    CHECKF(cur == 0, "current device %d after a run on GPU %d", cur, last);
    CUDA_OK(cudaSetDevice(last));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaSetDevice(0));
    result rl = fetch(&dl);
    CHECKF(same(&rl, &ref), "GPU %d differs from GPU 0", last);

    /* 2. Inputs spanning two devices: rejected, nothing written. */
    sp_kda_args mixed = dl.args;
    mixed.beta = d0.args.beta;
    CUDA_OK(cudaMemset(dl.buf[KB_O], 0x5a, prob.bytes[KB_O]));
    void *o_before = download(dl.buf[KB_O], prob.bytes[KB_O]);
    CHECK_STATUS(sp_kda_boundary_run(bl, &mixed, NULL), SP_ERR_DEVICE_MISMATCH);
    sp_tensor in2[2] = {d0.args.q, dl.args.k}, out2[2];
    size_t wsb = 0;
    CHECK_STATUS(sp_pack_workspace_bytes(in2, 2, &wsb), SP_OK);
    CHECK_STATUS(sp_pack(in2, 2, dl.buf[KB_O], prob.bytes[KB_O], out2, NULL, NULL),
                 SP_ERR_DEVICE_MISMATCH);
    sp_copy_pair cross = {d0.args.q, dl.args.o}; /* GPU 0 -> the last GPU */
    CHECK_STATUS(sp_copy_batch(&cross, 1, NULL), SP_ERR_DEVICE_MISMATCH);
    void *o_after = download(dl.buf[KB_O], prob.bytes[KB_O]);
    CHECK(!memcmp(o_before, o_after, prob.bytes[KB_O]));
    free(o_before);
    free(o_after);

    /* 3. One thread per GPU at once. */
    worker *w = calloc((size_t)ngpu, sizeof *w);
    pthread_t *th = calloc((size_t)ngpu, sizeof *th);
    for (int i = 0; i < ngpu; i++) dp_make(&w[i].d, i);
    for (int i = 0; i < ngpu; i++) pthread_create(&th[i], NULL, work, &w[i]);
    for (int i = 0; i < ngpu; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < ngpu; i++) {
        CHECKF(w[i].failures == 0, "GPU %d: %d failed calls or checks", i, w[i].failures);
        CHECKF(w[i].res.o && same(&w[i].res, &ref), "GPU %d (threaded) differs from GPU 0 alone", i);
        free(w[i].res.o);
        free(w[i].res.state);
        dp_free(&w[i].d);
    }
    free(w);
    free(th);

    sp_kda_boundary_destroy(b0);
    sp_kda_boundary_destroy(bl);
    dp_free(&d0);
    dp_free(&dl);
    free(ref.o);
    free(ref.state);
    free(rl.o);
    free(rl.state);
    k3_free(&host_k3);
    kp_free(&prob);
    return sp_test_finish("test_multi_gpu");
}

#else
int main(void) { SP_SKIP("built without the CUDA backend"); }
#endif
