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
 * The test's own setup calls name their device (ON_DEVICE): only the library
 * is trusted to follow the tensors.
 */
#include "check.h"

#include <pthread.h>
#include <string.h>

#ifdef SP_HAVE_CUDA
#include "mg_util.h"

enum { T = 300, H = 4, REPS = 8 };
static const int64_t lens[3] = {100, 37, 163};

static kda_problem prob;
static k3_bufs host_k3;

/* o and state of a finished run, on the host. */
typedef struct result {
    void *o, *state;
} result;

static result fetch(const mg_problem *d) {
    result r = {mg_download(d->buf[KB_O], prob.bytes[KB_O]),
                mg_download(d->buf[KB_STATE], prob.bytes[KB_STATE])};
    return r;
}

static int same(const result *a, const result *b) {
    return !memcmp(a->o, b->o, prob.bytes[KB_O]) && !memcmp(a->state, b->state, prob.bytes[KB_STATE]);
}

static int current_device(void) {
    int cur = -1;
    CUDA_OK(cudaGetDevice(&cur));
    return cur;
}

/* ---- 3: one thread per GPU ---- */
typedef struct worker {
    mg_problem d;
    int failures;
    result res;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    const int dev = w->d.dev;
    cudaStream_t s;
    sp_kda_boundary *b = NULL;
    /* The thread's current device stays 0: everything below must follow the
     * tensors to `dev` on its own. */
    CUDA_OK(cudaSetDevice(0));
    ON_DEVICE(dev, 0, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (sp_kda_boundary_create(&b, sp_cuda(dev), T, H) != SP_OK) {
        w->failures++;
        return NULL;
    }
    size_t wsb = 0;
    sp_tensor in[5] = {w->d.args.q, w->d.args.k, w->d.args.v, w->d.args.g, w->d.args.beta}, out[5];
    sp_pack_workspace_bytes(in, 5, &wsb);
    void *ws = NULL;
    ON_DEVICE(dev, 0, cudaMalloc(&ws, wsb));
    for (int i = 0; i < REPS; i++) {
        if (sp_pack(in, 5, ws, wsb, out, NULL, (struct CUstream_st *)s) != SP_OK) w->failures++;
        /* The state pool is read and written by each run: reset it first. */
        ON_DEVICE(dev, 0, cudaMemcpyAsync(w->d.buf[KB_STATE], prob.host[KB_STATE],
                                          prob.bytes[KB_STATE], cudaMemcpyHostToDevice, s));
        if (sp_kda_boundary_run(b, &w->d.args, (struct CUstream_st *)s) != SP_OK) w->failures++;
        if (current_device() != 0) w->failures++;
    }
    ON_DEVICE(dev, 0, cudaStreamSynchronize(s));
    w->res = fetch(&w->d);
    /* The last pack's outputs equal the strided inputs, element by element. */
    w->failures += mg_pack_differs(&host_k3, out);
    ON_DEVICE(dev, 0, cudaFree(ws));
    if (sp_kda_boundary_destroy(b) != SP_OK) w->failures++;
    ON_DEVICE(dev, 0, cudaStreamDestroy(s));
    return NULL;
}

int main(void) {
    int ngpu = 0;
    if (!sp_cuda_available() || cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 2)
        SP_SKIP("needs two usable CUDA devices (found %d)", ngpu);
    ts_rng r;
    ts_rng_seed(&r, 2027);
    kp_make_ex(&prob, 3, lens, 0, H, SP_F32, SP_KDA_GATE_LOWER_BOUND, 0, 99, 0);
    k3_make(&host_k3, T, H, TS_K3_BETA_INPROJ, &r);
    CUDA_OK(cudaSetDevice(0));
    const int last = ngpu - 1;

    /* Reference: the boundary on GPU 0 alone. */
    mg_problem d0, dl;
    mg_make(&d0, 0, 0, &prob, &host_k3);
    sp_kda_boundary *b0 = NULL;
    CHECK_OK(sp_kda_boundary_create(&b0, sp_cuda(0), T, H));
    CHECK_OK(sp_kda_boundary_run(b0, &d0.args, NULL));
    CUDA_OK(cudaDeviceSynchronize());
    result ref = fetch(&d0);

    /* 1. Everything on the last GPU, current device 0. */
    mg_make(&dl, last, 0, &prob, &host_k3);
    sp_kda_boundary *bl = NULL;
    CHECK_OK(sp_kda_boundary_create(&bl, sp_cuda(last), T, H));
    CHECK(current_device() == 0);
    uint64_t passes = sp_copy_pass_count();
    CHECK_OK(sp_kda_boundary_run(bl, &dl.args, NULL));
    CHECK(sp_copy_pass_count() - passes == 1);
    CHECKF(current_device() == 0, "current device %d after a run on GPU %d", current_device(),
           last);
    ON_DEVICE(last, 0, cudaDeviceSynchronize());
    result rl = fetch(&dl);
    CHECKF(same(&rl, &ref), "GPU %d differs from GPU 0", last);
    /* sp_pack alone, with a workspace on the last GPU. */
    {
        sp_tensor in[5] = {dl.args.q, dl.args.k, dl.args.v, dl.args.g, dl.args.beta}, out[5];
        size_t wsb = 0;
        void *ws = NULL;
        CHECK_OK(sp_pack_workspace_bytes(in, 5, &wsb));
        ON_DEVICE(last, 0, cudaMalloc(&ws, wsb));
        CHECK_OK(sp_pack(in, 5, ws, wsb, out, NULL, NULL));
        CHECK(current_device() == 0);
        ON_DEVICE(last, 0, cudaDeviceSynchronize());
        CHECK(mg_pack_differs(&host_k3, out) == 0);
        ON_DEVICE(last, 0, cudaFree(ws));
    }

    /* 2. Inputs spanning two devices: rejected, nothing written. */
    sp_kda_args mixed = dl.args;
    mixed.beta = d0.args.beta;
    ON_DEVICE(last, 0, cudaMemset(dl.buf[KB_O], 0x5a, prob.bytes[KB_O]));
    ON_DEVICE(last, 0, cudaDeviceSynchronize());
    void *o_before = mg_download(dl.buf[KB_O], prob.bytes[KB_O]);
    passes = sp_copy_pass_count();
    CHECK_STATUS(sp_kda_boundary_run(bl, &mixed, NULL), SP_ERR_DEVICE_MISMATCH);
    sp_tensor in2[2] = {d0.args.q, dl.args.k}, out2[2];
    size_t wsb = 0;
    CHECK_STATUS(sp_pack_workspace_bytes(in2, 2, &wsb), SP_OK);
    CHECK_STATUS(sp_pack(in2, 2, dl.buf[KB_O], prob.bytes[KB_O], out2, NULL, NULL),
                 SP_ERR_DEVICE_MISMATCH);
    sp_copy_pair cross = {d0.args.q, dl.args.o}; /* GPU 0 -> the last GPU */
    CHECK_STATUS(sp_copy_batch(&cross, 1, NULL), SP_ERR_DEVICE_MISMATCH);
    CHECK(sp_copy_pass_count() == passes);
    ON_DEVICE(last, 0, cudaDeviceSynchronize());
    void *o_after = mg_download(dl.buf[KB_O], prob.bytes[KB_O]);
    CHECK(!memcmp(o_before, o_after, prob.bytes[KB_O]));
    CHECK(current_device() == 0);
    free(o_before);
    free(o_after);

    /* 3. One thread per GPU at once. */
    worker *w = calloc((size_t)ngpu, sizeof *w);
    pthread_t *th = calloc((size_t)ngpu, sizeof *th);
    for (int i = 0; i < ngpu; i++) mg_make(&w[i].d, i, 0, &prob, &host_k3);
    for (int i = 0; i < ngpu; i++) CHECK(pthread_create(&th[i], NULL, work, &w[i]) == 0);
    for (int i = 0; i < ngpu; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < ngpu; i++) {
        CHECKF(w[i].failures == 0, "GPU %d: %d failed calls or checks", i, w[i].failures);
        CHECKF(w[i].res.o && same(&w[i].res, &ref), "GPU %d (threaded) differs from GPU 0 alone", i);
        free(w[i].res.o);
        free(w[i].res.state);
        mg_free(&w[i].d, 0);
    }
    free(w);
    free(th);

    CHECK_OK(sp_kda_boundary_destroy(b0));
    CHECK_OK(sp_kda_boundary_destroy(bl));
    CHECK(current_device() == 0);
    mg_free(&d0, 0);
    mg_free(&dl, 0);
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
