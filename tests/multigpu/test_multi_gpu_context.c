/*
 * test_multi_gpu_context.c — working on GPU 1 must not create a context on
 * GPU 0. A thread that never chose a device sees device 0 as current; the
 * library switches to the tensors' device for its work, and switching "back"
 * to device 0 would create a primary context there (memory on a GPU the
 * process never asked for). Needs two GPUs (exit 77 otherwise); run it as
 * its own process, since any context on GPU 0 made earlier would hide the
 * fault. Nothing in this process touches GPU 0:
 *   1. a fresh thread packs K3 inputs that live on GPU 1;
 *   2. another fresh thread creates a KDA boundary on GPU 1, runs it and
 *      destroys it;
 * after each, GPU 0 has no primary context, and the results are bit-exact.
 */
#include "check.h"

#include <pthread.h>
#include <string.h>

#ifdef SP_HAVE_CUDA
#include "mg_util.h"

enum { T = 200, H = 4, DEV = 1 };
static const int64_t lens[2] = {120, 80};

static kda_problem prob;
static k3_bufs host_k3;
static mg_problem d1;

typedef struct job {
    sp_status status[3];
    char error[256]; /* sp_last_error() of the first failed step (thread-local) */
    sp_tensor out[5];
    void *ws;
    size_t wsb;
} job;

/* Thread 1: one sp_pack of the GPU 1 views, from a thread with no device. */
static void *pack_job(void *arg) {
    job *j = arg;
    sp_tensor in[5] = {d1.args.q, d1.args.k, d1.args.v, d1.args.g, d1.args.beta};
    j->status[0] = sp_pack(in, 5, j->ws, j->wsb, j->out, NULL, NULL);
    return NULL;
}

/* Thread 2: a boundary's whole life on GPU 1, from a thread with no device. */
static void *boundary_job(void *arg) {
    job *j = arg;
    sp_kda_boundary *b = NULL;
    j->status[0] = sp_kda_boundary_create(&b, sp_cuda(DEV), T, H);
    j->status[1] = b ? sp_kda_boundary_run(b, &d1.args, NULL) : SP_ERR_INVALID_ARGUMENT;
    j->status[2] = sp_kda_boundary_destroy(b);
    for (int i = 0; i < 3; i++)
        if (j->status[i] != SP_OK) {
            snprintf(j->error, sizeof j->error, "%s", sp_last_error());
            break;
        }
    return NULL;
}

static void run_thread(void *(*fn)(void *), job *j) {
    pthread_t th;
    CHECK(pthread_create(&th, NULL, fn, j) == 0);
    pthread_join(th, NULL);
}

int main(void) {
    int ngpu = 0;
    if (!sp_cuda_available() || cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 2)
        SP_SKIP("needs two usable CUDA devices (found %d)", ngpu);
    CHECKF(!mg_primary_active(0), "GPU 0 has a context before the test touched any device");

    ts_rng r;
    ts_rng_seed(&r, 77);
    kp_make_ex(&prob, 2, lens, 0, H, SP_F32, SP_KDA_GATE_LOWER_BOUND, 0, 5, 0);
    k3_make(&host_k3, T, H, TS_K3_BETA_FA, &r);
    CUDA_OK(cudaSetDevice(DEV)); /* the main thread works on GPU 1 only */
    mg_make(&d1, DEV, DEV, &prob, &host_k3);

    /* 1. sp_pack */
    job j;
    memset(&j, 0, sizeof j);
    sp_tensor in[5] = {d1.args.q, d1.args.k, d1.args.v, d1.args.g, d1.args.beta};
    CHECK_OK(sp_pack_workspace_bytes(in, 5, &j.wsb));
    CUDA_OK(cudaMalloc(&j.ws, j.wsb));
    run_thread(pack_job, &j);
    CHECK_OK(j.status[0]);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(mg_pack_differs(&host_k3, j.out) == 0);
    CHECKF(!mg_primary_active(0), "sp_pack on GPU 1 created a context on GPU 0");

    /* 2. the KDA boundary */
    memset(j.status, 0, sizeof j.status);
    run_thread(boundary_job, &j);
    for (int i = 0; i < 3; i++)
        CHECKF(j.status[i] == SP_OK, "boundary step %d: %s (%s)", i, sp_status_string(j.status[i]),
               j.error);
    CUDA_OK(cudaDeviceSynchronize());
    CHECKF(!mg_primary_active(0), "a KDA boundary on GPU 1 created a context on GPU 0");
    CHECK(mg_primary_active(DEV));

    CUDA_OK(cudaFree(j.ws));
    mg_free(&d1, DEV);
    k3_free(&host_k3);
    kp_free(&prob);
    return sp_test_finish("test_multi_gpu_context");
}

#else
int main(void) { SP_SKIP("built without the CUDA backend"); }
#endif
