/*
 * dispatch.c — the one place that decides which KDA kernel serves a call,
 * and how the chunked kernel spreads over the multiprocessors. The rules
 * follow the measurements in docs/PERFORMANCE.md.
 */
#include "kda/kda_internal.h"

#include <stdint.h>

/* Below this many tokens per sequence on average, the recurrent kernel's
 * one block per (sequence, head) is at least as fast: a chunk of 32 tokens
 * costs the chunked kernel a fixed pipeline of barriers and small products. */
#define CHUNKED_MIN_MEAN_TOKENS 64

/* Why the chunked kernel cannot serve the call, or NULL when it can. */
static const char *chunked_unsupported(const sp_kda_args *a, const sp_kda_dims *d) {
    if (d->dev.type != SP_DEVICE_CUDA) return "it runs on CUDA tensors only";
    if (a->gate != SP_KDA_GATE_LOWER_BOUND)
        return "it needs the lower-bound gate (the softplus gate has no bound on a token's "
               "decay, which its factorized products rely on)";
    if (d->interval % SP_KDA_CHUNK != 0) return "checkpoint_interval must be a multiple of 32";
    /* Dense inputs are read as they are: 16-byte copies. Strided ones (the
     * boundary's) are packed into 256-byte aligned slots first. */
    const sp_tensor *in[4] = {&a->q, &a->k, &a->v, &a->g};
    for (int i = 0; i < 4; i++)
        if (sp_tensor_is_dense(in[i]) && (uintptr_t)in[i]->data % 16 != 0)
            return "dense q, k, v and g must be 16-byte aligned";
    return NULL;
}

sp_status sp_kda_choose_kernel_(const sp_kda_args *a, sp_kda_dims *d) {
    const int32_t k = a->kernel;
    SP_REQUIRE(k == SP_KDA_KERNEL_AUTO || k == SP_KDA_KERNEL_RECURRENT ||
                   k == SP_KDA_KERNEL_CHUNKED,
               SP_ERR_INVALID_ARGUMENT, "kernel: %d is not an sp_kda_kernel", (int)k);
    const char *why = chunked_unsupported(a, d);
    if (k == SP_KDA_KERNEL_CHUNKED)
        SP_REQUIRE(!why, SP_ERR_UNSUPPORTED, "kernel: the chunked kernel cannot serve this call: %s",
                   why);
    if (k != SP_KDA_KERNEL_AUTO) {
        d->kernel = k;
        return SP_OK;
    }
    const int long_enough = d->N == 0 || d->T / d->N >= CHUNKED_MIN_MEAN_TOKENS;
    d->kernel = !why && long_enough ? SP_KDA_KERNEL_CHUNKED : SP_KDA_KERNEL_RECURRENT;
    return SP_OK;
}

int sp_kda_chunked_splits_(int64_t pairs, int sms) {
    /* The most splits of the V columns (each block then owns 128 / splits)
     * that still keep every block in one wave, one block per multiprocessor:
     * a second wave would cost a whole block's time again. */
    int s = 1;
    while (s < 8 && pairs * s * 2 <= sms) s *= 2;
    return s;
}
