/*
 * reference.c — the float64 convolution that the tests trust: the formula
 * of stridepack_conv.h written out, one (sequence, channel) at a time. The
 * input of a sequence is z = prev ++ x[s..e] indexed as one array; each
 * output is a float64 sum (every product of a bf16 and an f32 value is
 * exact in double), SiLU in double, rounded to bf16 once.
 */
#include "conv/conv_internal.h"

/* Entry i of z for channel c: the slot's inputs, then the tokens. */
static double z_at(const sp_conv_args *a, const sp_conv_dims *d, int64_t slot, int from_slot,
                   int64_t s, int64_t c, int64_t i) {
    if (i >= d->W - 1) return (double)sp_bf16_to_f32_(sp_conv_x_(a, s + i - (d->W - 1), c));
    return from_slot ? (double)sp_bf16_to_f32_(*sp_conv_state_(a, slot, c, i)) : 0.0;
}

static void run(const sp_conv_args *a, const sp_conv_dims *d, int64_t n, int64_t c) {
    const int64_t slot = sp_conv_slot_(a, n);
    if (slot < 0) return;
    int64_t s, e;
    int from_slot;
    sp_conv_host_sequence_(a, d, n, &s, &e, &from_slot);
    const double b = (double)sp_conv_bias_(a, d, c);
    for (int64_t t = s; t < e; t++) {
        double y = b;
        for (int64_t j = 0; j < d->W; j++)
            y += (double)sp_conv_weight_(a, d, c, j) * z_at(a, d, slot, from_slot, s, c, t - s + j);
        if (a->silu) y = y / (1.0 + exp(-y));
        *sp_conv_out_(d, t, c) = sp_f64_to_bf16_(y);
    }
    /* The last W-1 entries of z, read before any is overwritten. */
    uint16_t last[SP_CONV_MAX_WIDTH];
    for (int64_t j = 0; j < d->W - 1; j++)
        last[j] = sp_f64_to_bf16_(z_at(a, d, slot, from_slot, s, c, e - s + j));
    for (int64_t j = 0; j < d->W - 1; j++) *sp_conv_state_(a, slot, c, j) = last[j];
}

sp_status sp_conv_ref_(const sp_conv_args *a, const sp_conv_dims *d) {
    for (int64_t n = 0; n < d->N; n++)
        for (int64_t c = 0; c < d->C; c++) run(a, d, n, c);
    return SP_OK;
}
