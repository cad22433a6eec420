/*
 * check.c — the convolution's contract (stridepack_conv.h), checked before
 * any byte is written, and the public entry points that dispatch by device.
 * Each tensor is described once in a table of named specs (contract.c:
 * name, dtype rule, expected sizes, density, output); the checks walk it.
 */
#include "conv/conv_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sp_status require_unset(const sp_tensor *t, const char *name, const char *why) {
    SP_REQUIRE(!sp_tensor_set_(t), SP_ERR_INVALID_ARGUMENT, "%s: set, but %s", name, why);
    return SP_OK;
}

/* The sizes that everything else is checked against: T and C from x, W
 * from the weight, N from cu_seqlens (prefill) or x (decode), the output
 * layout. */
static sp_status read_dims(const sp_conv_args *a, int decode, sp_conv_dims *d) {
    SP_REQUIRE(a->x.ndim == 2, SP_ERR_SHAPE_MISMATCH, "x: %d dims, expected [%s, C]",
               (int)a->x.ndim, decode ? "N" : "T");
    d->T = a->x.shape[0];
    d->C = a->x.shape[1];
    SP_REQUIRE(a->weight.ndim == 2, SP_ERR_SHAPE_MISMATCH, "weight: %d dims, expected [C, W]",
               (int)a->weight.ndim);
    d->W = a->weight.shape[1];
    SP_REQUIRE(d->W >= SP_CONV_MIN_WIDTH && d->W <= SP_CONV_MAX_WIDTH, SP_ERR_UNSUPPORTED,
               "weight: width W = %lld is not supported (%d to %d)", (long long)d->W,
               SP_CONV_MIN_WIDTH, SP_CONV_MAX_WIDTH);
    if (decode) {
        d->N = d->T;
    } else {
        SP_REQUIRE(a->cu_seqlens.ndim == 1 && a->cu_seqlens.shape[0] >= 1, SP_ERR_SHAPE_MISMATCH,
                   "cu_seqlens: expected [N + 1] with N >= 0");
        d->N = a->cu_seqlens.shape[0] - 1;
    }
    SP_REQUIRE(a->state.ndim == 3, SP_ERR_SHAPE_MISMATCH,
               "state: %d dims, expected [slots, C, W-1]", (int)a->state.ndim);
    d->slots = a->state.shape[0];

    const int token_major = sp_tensor_set_(&a->out);
    const int split = sp_tensor_set_(&a->q) || sp_tensor_set_(&a->k) || sp_tensor_set_(&a->v);
    SP_REQUIRE(!(token_major && split), SP_ERR_INVALID_ARGUMENT,
               "out: set together with q, k, v; set one output layout only");
    SP_REQUIRE(token_major || split, SP_ERR_INVALID_ARGUMENT,
               "out: no output; set out (token-major) or q, k and v (split)");
    if (split) {
        SP_REQUIRE(sp_tensor_set_(&a->q) && sp_tensor_set_(&a->k) && sp_tensor_set_(&a->v),
                   SP_ERR_INVALID_ARGUMENT, "%s: unset; the split layout needs q, k and v",
                   !sp_tensor_set_(&a->q)   ? "q"
                   : !sp_tensor_set_(&a->k) ? "k"
                                            : "v");
        SP_REQUIRE(a->q.ndim == 2 && a->v.ndim == 2, SP_ERR_SHAPE_MISMATCH,
                   "%s: expected [%s, key_dim] / [%s, value_dim]", a->q.ndim != 2 ? "q" : "v",
                   decode ? "N" : "T", decode ? "N" : "T");
        d->key_dim = a->q.shape[1];
        d->value_dim = a->v.shape[1];
        SP_REQUIRE(2 * d->key_dim + d->value_dim == d->C, SP_ERR_SHAPE_MISMATCH,
                   "v: 2 * key_dim + value_dim = 2 * %lld + %lld differs from x's C = %lld",
                   (long long)d->key_dim, (long long)d->value_dim, (long long)d->C);
    }
    return SP_OK;
}

static void fill_segments(const sp_conv_args *a, sp_conv_dims *d) {
    const sp_tensor *outs[3] = {&a->out, NULL, NULL};
    d->nseg = 1;
    if (d->key_dim || d->value_dim || !sp_tensor_set_(&a->out)) {
        outs[0] = &a->q;
        outs[1] = &a->k;
        outs[2] = &a->v;
        d->nseg = 3;
    }
    for (int i = 0; i < d->nseg; i++) {
        d->seg[i].data = (uint16_t *)outs[i]->data;
        d->seg[i].first = i * d->key_dim;
        d->seg[i].row = outs[i]->strides[0];
        d->seg[i].col = outs[i]->strides[1];
    }
}

/* Contents of the index arrays, readable here because they are host memory. */
static sp_status check_host_indices(const sp_conv_args *a, const sp_conv_dims *d) {
    const sp_index_ idx = sp_index_of_(&a->state_indices);
    if (!d->decode) {
        /* 0 <= cu[0] <= cu[1] <= ... <= cu[N] <= T, one bound at a time. */
        const sp_index_ cu = sp_index_of_(&a->cu_seqlens);
        const int64_t cu0 = sp_index_at_(cu, 0);
        SP_REQUIRE(cu0 >= 0, SP_ERR_INVALID_ARGUMENT,
                   "cu_seqlens: [0] = %lld is negative (needed: 0 <= [0] <= ... <= [N] <= T)",
                   (long long)cu0);
        for (int64_t n = 1; n <= d->N + 1; n++) {
            const int64_t lo = sp_index_at_(cu, n - 1), hi = n <= d->N ? sp_index_at_(cu, n) : d->T;
            if (lo <= hi) continue;
            char left[32], right[32] = "T";
            snprintf(left, sizeof left, "[%lld]", (long long)(n - 1));
            if (n <= d->N) snprintf(right, sizeof right, "[%lld]", (long long)n);
            return sp_set_error_(SP_ERR_INVALID_ARGUMENT,
                                "cu_seqlens: %s = %lld is above %s = %lld (needed: 0 <= [0] <= "
                                "... <= [N] <= T)",
                                left, (long long)lo, right, (long long)hi);
        }
    }
    for (int64_t n = 0; n < d->N; n++) {
        const int64_t e = sp_index_at_(idx, n);
        SP_REQUIRE(e >= -1 && e < d->slots, SP_ERR_INVALID_ARGUMENT,
                   "state_indices: [%lld] = %lld is outside [-1, %lld) (slots; -1 = padded)",
                   (long long)n, (long long)e, (long long)d->slots);
    }
    if (d->N > 1 && d->slots > 0) {
        /* One bit per slot: a second sequence on a slot is found in one pass.
         * On the stack up to 65536 slots, from the heap beyond. */
        unsigned char stack[8192];
        const size_t bytes = (size_t)(d->slots + 7) / 8;
        unsigned char *seen = bytes <= sizeof stack ? stack : calloc(bytes, 1);
        SP_REQUIRE(seen, SP_ERR_OUT_OF_MEMORY, "state_indices: no memory to check distinctness");
        if (seen == stack) memset(stack, 0, bytes);
        int64_t dup = -1;
        for (int64_t n = 0; n < d->N && dup < 0; n++) {
            const int64_t e = sp_index_at_(idx, n);
            if (e < 0) continue;
            unsigned char bit = (unsigned char)(1u << (e % 8));
            if (seen[e / 8] & bit) dup = n;
            seen[e / 8] |= bit;
        }
        if (seen != stack) free(seen);
        SP_REQUIRE(dup < 0, SP_ERR_INVALID_ARGUMENT,
                   "state_indices: [%lld] = %lld, a slot an earlier sequence uses",
                   (long long)dup, dup < 0 ? 0LL : (long long)sp_index_at_(idx, dup));
    }
    return SP_OK;
}

sp_status sp_conv_check_(const sp_conv_args *a, int decode, int host_indices, sp_conv_dims *out) {
    SP_REQUIRE(a, SP_ERR_INVALID_ARGUMENT, "args: NULL");
    SP_REQUIRE(a->silu == 0 || a->silu == 1, SP_ERR_INVALID_ARGUMENT, "silu: %d is not 0 or 1",
               (int)a->silu);
    if (decode) {
        SP_FORWARD(
            require_unset(&a->cu_seqlens, "cu_seqlens", "decode takes one token per sequence"));
        SP_FORWARD(require_unset(&a->has_initial_state, "has_initial_state",
                                 "decode always starts from the slot"));
    }
    sp_conv_dims d;
    memset(&d, 0, sizeof d);
    d.decode = decode;
    d.has_bias = sp_tensor_set_(&a->bias);
    d.has_init = !decode && sp_tensor_set_(&a->has_initial_state);
    SP_FORWARD(read_dims(a, decode, &d));

    const int64_t T = d.T, C = d.C, N = d.N, W1 = d.W - 1;
    sp_spec_ s[12];
    int n = 0;
    s[n++] = (sp_spec_){&a->x, "x", SP_BF16, 2, {T, C}, decode ? "[N, C]" : "[T, C]", 0, 0};
    s[n++] = (sp_spec_){&a->weight, "weight", SP_SPEC_FLOATS, 2, {C, d.W}, "[C, W] with x's C",
                        0, 0};
    if (d.has_bias)
        s[n++] = (sp_spec_){&a->bias, "bias", SP_SPEC_LIKE, 1, {C}, "[C] with x's C", 0, 0};
    if (!decode)
        s[n++] = (sp_spec_){&a->cu_seqlens, "cu_seqlens", SP_SPEC_INDEX, 1, {N + 1}, "[N + 1]",
                            1, 0};
    s[n++] = (sp_spec_){&a->state_indices, "state_indices", SP_SPEC_INDEX, 1, {N}, "[N]", 1, 0};
    if (d.has_init)
        s[n++] = (sp_spec_){&a->has_initial_state, "has_initial_state", SP_BOOL, 1, {N}, "[N]",
                            1, 0};
    const int first_output = n;
    s[n++] = (sp_spec_){&a->state, "state", SP_BF16, 3, {SP_SPEC_ANY, C, W1}, "[slots, C, W-1]",
                        0, 1};
    if (d.key_dim || d.value_dim || !sp_tensor_set_(&a->out)) {
        const int64_t kd = d.key_dim, vd = d.value_dim;
        s[n++] = (sp_spec_){&a->q, "q", SP_BF16, 2, {T, kd},
                        decode ? "[N, key_dim]" : "[T, key_dim]", 0, 1};
        s[n++] = (sp_spec_){&a->k, "k", SP_BF16, 2, {T, kd},
                        decode ? "[N, key_dim] as q" : "[T, key_dim] as q", 0, 1};
        s[n++] = (sp_spec_){&a->v, "v", SP_BF16, 2, {T, vd},
                        decode ? "[N, value_dim]" : "[T, value_dim]", 0, 1};
    } else {
        s[n++] = (sp_spec_){&a->out, "out", SP_BF16, 2, {T, C},
                        decode ? "[N, C] as x" : "[T, C] as x", 0, 1};
    }

    SP_FORWARD(sp_specs_placed_(s, n, a->weight.dtype, "weight"));
    d.dev = a->x.device;
    d.weight_bf16 = a->weight.dtype == SP_BF16;
    SP_FORWARD(sp_specs_layout_(s, n));

    /* Outputs: no element written twice, none on a byte of another argument. */
    for (int i = first_output; i < n; i++)
        SP_REQUIRE(!sp_tensor_self_overlaps_(s[i].t), SP_ERR_OVERLAP,
                   "%s: two elements share memory (zero or interleaved strides)", s[i].name);
    SP_FORWARD(sp_specs_disjoint_(s, n));
    d.slots = a->state.shape[0];
    fill_segments(a, &d);

    if (d.dev.type == SP_DEVICE_CUDA) {
        SP_FORWARD(sp_check_device_usable_(d.dev));
        /* Grid: token tiles in x (at least 8 tokens each), channel blocks of
         * 1024 in y. */
        SP_REQUIRE((C + 1023) / 1024 <= 65535, SP_ERR_UNSUPPORTED,
                   "x: C = %lld channels exceed one launch (65535 * 1024)", (long long)C);
        SP_REQUIRE((decode ? T : T / 8) < INT32_MAX, SP_ERR_UNSUPPORTED,
                   "x: %lld %s exceed one launch", (long long)T, decode ? "sequences" : "tokens");
    } else if (host_indices) {
        SP_FORWARD(check_host_indices(a, &d));
    }
    *out = d;
    return SP_OK;
}

/* ---- entry points ------------------------------------------------------ */

sp_status sp_conv_args_init(sp_conv_args *args) {
    SP_REQUIRE(args, SP_ERR_INVALID_ARGUMENT, "args: NULL");
    memset(args, 0, sizeof *args);
    return SP_OK;
}

static sp_status run(const sp_conv_args *a, int decode, int reference, struct CUstream_st *stream) {
    sp_conv_dims d;
    SP_FORWARD(sp_conv_check_(a, decode, 1, &d));
    if (reference)
        SP_REQUIRE(d.dev.type == SP_DEVICE_CPU, SP_ERR_UNSUPPORTED,
                   "x: the float64 reference runs on CPU tensors only");
    if (d.N == 0) return SP_OK;
    if (reference) return sp_conv_ref_(a, &d);
    if (d.dev.type == SP_DEVICE_CPU) return sp_conv_cpu_(a, &d);
    return sp_conv_cuda_(a, &d, stream);
}

sp_status sp_conv_prefill(const sp_conv_args *a, struct CUstream_st *stream) {
    return run(a, 0, 0, stream);
}

sp_status sp_conv_decode(const sp_conv_args *a, struct CUstream_st *stream) {
    return run(a, 1, 0, stream);
}

sp_status sp_conv_prefill_reference(const sp_conv_args *a) { return run(a, 0, 1, NULL); }

sp_status sp_conv_decode_reference(const sp_conv_args *a) { return run(a, 1, 1, NULL); }
