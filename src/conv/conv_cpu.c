/*
 * conv_cpu.c — the CPU convolution: one OpenMP iteration per (sequence, block of
 * channels), each channel a sliding window over its sequence's tokens. The
 * sum is sp_conv_sum_, the same fp32 operations as the CUDA kernel.
 */
#include "conv/conv_internal.h"

enum { CHANNELS_PER_ITEM = 256 };

static void run_item(const sp_conv_args *a, const sp_conv_dims *d, int64_t n, int64_t c0) {
    const int64_t slot = sp_conv_slot_(a, n);
    if (slot < 0) return; /* padded: nothing written */
    int64_t s, e;
    int from_slot;
    sp_conv_host_sequence_(a, d, n, &s, &e, &from_slot);
    const int W = (int)d->W;
    const int64_t c1 = c0 + CHANNELS_PER_ITEM < d->C ? c0 + CHANNELS_PER_ITEM : d->C;
    for (int64_t c = c0; c < c1; c++) {
        float w[SP_CONV_MAX_WIDTH], z[SP_CONV_MAX_WIDTH];
        uint16_t bits[SP_CONV_MAX_WIDTH]; /* the window as stored: state bits survive */
        for (int j = 0; j < W; j++) w[j] = sp_conv_weight_(a, d, c, j);
        const float b = sp_conv_bias_(a, d, c);
        for (int j = 0; j < W - 1; j++) bits[j] = from_slot ? *sp_conv_state_(a, slot, c, j) : 0;
        for (int64_t t = s; t < e; t++) {
            bits[W - 1] = sp_conv_x_(a, t, c);
            for (int j = 0; j < W; j++) z[j] = sp_bf16_to_f32_(bits[j]);
            const float y = sp_conv_sum_(w, z, W, b);
            *sp_conv_out_(d, t, c) = sp_f32_to_bf16_(a->silu ? sp_conv_silu_(y) : y);
            for (int j = 0; j < W - 1; j++) bits[j] = bits[j + 1];
        }
        for (int j = 0; j < W - 1; j++) *sp_conv_state_(a, slot, c, j) = bits[j];
    }
}

sp_status sp_conv_cpu_(const sp_conv_args *a, const sp_conv_dims *d) {
    const int64_t chunks = (d->C + CHANNELS_PER_ITEM - 1) / CHANNELS_PER_ITEM;
    const int64_t items = d->N * chunks;
#pragma omp parallel for schedule(dynamic, 1) if (items > 1)
    for (int64_t i = 0; i < items; i++)
        run_item(a, d, i / chunks, (i % chunks) * CHANNELS_PER_ITEM);
    return SP_OK;
}
