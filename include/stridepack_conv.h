/*
 * stridepack_conv.h — the producer of the KDA inputs: a depthwise causal
 * short convolution over the merged q/k/v projection, with a conv state pool
 * for varlen prefill and one-token decode. It writes its output either
 * token-major ([T, C], what producers do today: q, k and v are then column
 * slices that the KDA boundary must pack) or split into three tensors q, k
 * and v, dense, so that nothing needs copying before the prefill.
 *
 * Usage (K3: C = 3P, P = H*128; x is the [T, 3P] slice of the projection):
 *
 *     sp_conv_args a;
 *     sp_conv_args_init(&a);
 *     int64_t xs[2] = {T, 3 * P}, ws[2] = {3 * P, 4}, qs[2] = {T, P};
 *     sp_tensor_view(&a.x, proj, 0, SP_BF16, 2, xs, proj_strides, sp_cuda(0));
 *     sp_tensor_dense(&a.weight, w, SP_F32, 2, ws, sp_cuda(0));   // W = 4
 *     a.silu = 1;
 *     ...                                   // cu_seqlens, state, state_indices
 *     sp_tensor_dense(&a.q, q, SP_BF16, 2, qs, sp_cuda(0));     // split output
 *     sp_tensor_dense(&a.k, k, SP_BF16, 2, qs, sp_cuda(0));
 *     sp_tensor_dense(&a.v, v, SP_BF16, 2, qs, sp_cuda(0));
 *     if (sp_conv_prefill(&a, stream) != SP_OK)
 *         fprintf(stderr, "%s\n", sp_last_error());
 *
 * A dense [T, H*128] q is the same memory as the [1, T, H, 128] q of
 * sp_kda_args: make the 4-d view over the same pointer.
 *
 * What is computed, per sequence n (tokens s = cu_seqlens[n] ..
 * e = cu_seqlens[n+1]) and channel c, with W the kernel width:
 *
 *   z      = prev ++ x[s..e, c]   the W-1 previous inputs, then the tokens;
 *            prev = state[slot, c, 0..W-1) (oldest first) when the sequence
 *            has an initial state, W-1 zeros otherwise
 *   y[t,c] = bias[c] + sum_{j<W} weight[c, j] * z[t - s + j]
 *   out    = silu ? y / (1 + exp(-y)) : y,  rounded once to bf16
 *   state[slot, c, :] <- the last W-1 entries of z (for a sequence shorter
 *            than W-1 these include entries of prev; an empty sequence
 *            leaves prev: its slot unchanged, or zeros without an initial
 *            state)
 *
 * Arithmetic: inputs and weights are read to fp32 exactly; the sum starts
 * from the bias and adds one fused multiply-add per tap, oldest first; the
 * result (after SiLU) is rounded to bf16 once, to nearest even. The CPU and
 * the CUDA backend run the same fp32 sum, so without SiLU their outputs are
 * bit-identical (NaN payloads aside). SiLU uses libm's expf on the CPU and
 * the hardware exp2 and reciprocal on CUDA: a few fp32 ulps apart, which
 * after rounding to bf16 shows as an occasional one-ulp difference. The
 * token-major and the split layout always hold the same bits.
 * Against the float64 reference (float64 sum and SiLU, one rounding to
 * bf16) an output is equal or one bf16 ulp away, except where the sum
 * cancels; the bound that holds everywhere is
 *     |out - ref| <= ulp(ref) + 2^-20 * m,
 * m = |bias[c]| + sum_j |weight[c, j] * z[t - s + j]|: the fp32 rounding of
 * W fused steps and of the SiLU, relative to the size of the terms.
 *
 * The conventions of stridepack.h hold: every function returns sp_status,
 * sp_last_error() names the argument and the rule, everything is checked
 * before anything is written, nothing exits or prints, nothing is allocated
 * per call, and CUDA calls are asynchronous on `stream` and can be captured
 * in a CUDA graph.
 */
#ifndef STRIDEPACK_CONV_H
#define STRIDEPACK_CONV_H

#include "stridepack.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel widths supported: W in SP_CONV_MIN_WIDTH .. SP_CONV_MAX_WIDTH. */
#define SP_CONV_MIN_WIDTH 2
#define SP_CONV_MAX_WIDTH 4

/* The arguments of one call. T tokens, C channels, N sequences, W taps.
 * A tensor is "unset" when its ndim is 0 and its data NULL (as
 * sp_conv_args_init leaves it). All tensors live on one device. */
typedef struct sp_conv_args {
    /* Input, bf16, any strides (a column slice of a wider projection, or a
     * channel-major [C, T] buffer seen as [T, C] with strides (1, T)).
     * Prefill: [T, C]. Decode: [N, C], one token per sequence. */
    sp_tensor x;

    /* weight [C, W], f32 or bf16, any strides, W in 2..4; bias [C], the
     * weight's dtype, any stride, or unset (no bias). Both are read to fp32
     * exactly. */
    sp_tensor weight;
    sp_tensor bias;
    int32_t silu; /* 1: apply y / (1 + exp(-y)); 0: none */

    /* Sequences (prefill only; unset for decode): cu_seqlens i64 or i32 [N + 1],
     * dense, non-decreasing, cu_seqlens[0] >= 0, cu_seqlens[N] <= T. Rows
     * of the output outside every sequence are not written. */
    sp_tensor cu_seqlens;

    /* The conv state pool [slots, C, W-1], bf16, any strides (the vLLM
     * layout [slots, C, W-1] dense is the fast one). state_indices i32 or i64 [N],
     * dense: sequence n uses slot state_indices[n]; -1 marks a padded
     * sequence: skipped, nothing written for it (neither output rows nor
     * state). Other values must be in [0, slots) and distinct. */
    sp_tensor state;
    sp_tensor state_indices;

    /* has_initial_state bool [N], dense (prefill only; decode always reads
     * the slot): nonzero starts sequence n from its slot, zero from zeros.
     * Unset: no sequence has an initial state. */
    sp_tensor has_initial_state;

    /* The output, bf16, in exactly one of two layouts (set one, leave the
     * other unset), any strides, dense being the fast case:
     *   token-major: out [T, C] (decode: [N, C]);
     *   split:       q [T, key_dim], k [T, key_dim], v [T, value_dim] with
     *                C = 2 * key_dim + value_dim: channels 0 .. key_dim go
     *                to q, the next key_dim to k, the rest to v. */
    sp_tensor out;
    sp_tensor q, k, v;
} sp_conv_args;

/* Zero every field (every tensor unset, no SiLU).
 * @return SP_OK; SP_ERR_INVALID_ARGUMENT for a NULL args. */
SP_API sp_status sp_conv_args_init(sp_conv_args *args);

/* The varlen prefill: for every sequence, its output rows and its state
 * slot as described at the top. CPU tensors: one parallel pass. CUDA
 * tensors: one kernel launch on `stream`, token tiles of 8 channels per
 * thread with 16-byte loads and stores where the layout allows (channel
 * stride 1, rows and base 16-byte aligned, C and key_dim multiples of 8;
 * x rows only 8-byte aligned take 8-byte loads), element-wise otherwise.
 *
 * Checked before anything is written (each error names the argument):
 *   - structure and alignment of every tensor to its element size
 *     (SP_ERR_INVALID_ARGUMENT, SP_ERR_OVERFLOW, SP_ERR_MISALIGNED);
 *   - dtypes as above (SP_ERR_DTYPE_MISMATCH); silu 0 or 1
 *     (SP_ERR_INVALID_ARGUMENT);
 *   - shapes: T, C, N agree everywhere, state [slots, C, W-1], exactly one
 *     output layout, 2 * key_dim + value_dim = C (SP_ERR_SHAPE_MISMATCH;
 *     SP_ERR_INVALID_ARGUMENT for both layouts set or neither); W outside
 *     2..4 is SP_ERR_UNSUPPORTED;
 *   - cu_seqlens, state_indices, has_initial_state dense
 *     (SP_ERR_INVALID_ARGUMENT);
 *   - one device (SP_ERR_DEVICE_MISMATCH); CUDA build and device for CUDA
 *     tensors (SP_ERR_NO_DEVICE);
 *   - no output (out or q, k, v, and the state) shares a byte with another
 *     argument, nor two of its own elements one byte (SP_ERR_OVERLAP;
 *     decided per element, so q, k, v may be column slices of one buffer);
 *   - CPU tensors only, the index contents (SP_ERR_INVALID_ARGUMENT):
 *     cu_seqlens monotone within [0, T], state_indices -1 or in [0, slots),
 *     no slot used twice (a pool of over 65536 slots takes slots/8 bytes of
 *     heap for this check: SP_ERR_OUT_OF_MEMORY without them). CUDA
 *     tensors keep these arrays on the device, not read on the host: the
 *     kernel skips (writes nothing for) a sequence whose token range or slot
 *     is out of bounds, and distinct slots are the caller's duty (two
 *     sequences on one slot race);
 *   - CUDA: C up to 65535 * 1024 channels and T / 8 (decode: N) below
 *     2^31 - 1, else SP_ERR_UNSUPPORTED.
 * CUDA: asynchronous on `stream`, nothing allocated, nothing copied between
 * host and device, never synchronizes (graph-capturable); runs on the
 * tensors' device and restores the caller's current device.
 * N = 0 is SP_OK with nothing done.
 * @return SP_OK or the error above; SP_ERR_CUDA for a failed launch. */
SP_API sp_status sp_conv_prefill(const sp_conv_args *args, struct CUstream_st *stream);

/* The one-token decode on the same pool: x [N, C], one token per sequence,
 * state_indices [N]; cu_seqlens and has_initial_state unset. Each sequence
 * starts from its slot (z = state ++ x[n]) and leaves the last W-1 inputs
 * there, in place. Outputs [N, C] or q, k, v with N rows. Checks and
 * errors as sp_conv_prefill. */
SP_API sp_status sp_conv_decode(const sp_conv_args *args, struct CUstream_st *stream);

/* The float64 references of both: the formula above followed literally,
 * CPU tensors only (SP_ERR_UNSUPPORTED for CUDA), same checks; outputs
 * rounded to bf16 once. For tests. */
SP_API sp_status sp_conv_prefill_reference(const sp_conv_args *args);
SP_API sp_status sp_conv_decode_reference(const sp_conv_args *args);

#ifdef __cplusplus
}
#endif

#endif /* STRIDEPACK_CONV_H */
