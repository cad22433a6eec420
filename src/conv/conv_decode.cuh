/*
 * conv_decode.cuh — a thread of the decode kernel: 8 channels of up to 4
 * sequences of one token each (conv_kernels.cuh has what it shares with
 * prefill). No shared memory, fewer registers than prefill, more threads:
 * the weights read once, two sequences' windows and inputs in flight at a
 * time, the slot indices read a batch ahead. A sequence's new window is the
 * old one moved on by the input, bits moved, not converted.
 */
#ifndef SP_CONV_DECODE_CUH
#define SP_CONV_DECODE_CUH

#include "conv/conv_kernels.cuh"

#define DBATCH 2 /* sequences in flight per thread */

/* A slot's W-1 inputs of 8 channels as stored in the dense layout (tap j
 * of channel i is element i*(W-1)+j: W-1 16-byte vectors), whatever the
 * pool's strides: decode keeps its windows in this form while in flight,
 * half the registers of fp32. */
template <int W> struct window {
    bf8 v[W - 1];
};

template <int W> static FN void window_load(const conv_params &p, int64_t slot, int64_t c0,
                                            window<W> &r) {
    const uint16_t *base = p.state + slot * p.s_slot;
    if (p.state_vec) {
        SP_HD_UNROLL
        for (int k = 0; k < W - 1; k++) r.v[k] = load16(base + c0 * (W - 1) + k * VEC);
        return;
    }
    SP_HD_UNROLL
    for (int k = 0; k < W - 1; k++) r.v[k] = bf8{{0, 0, 0, 0}};
    SP_HD_UNROLL
    for (int i = 0; i < VEC; i++) {
        if (c0 + i >= p.C) break;
        SP_HD_UNROLL
        for (int j = 0; j < W - 1; j++)
            put(r.v[(i * (W - 1) + j) / VEC], (i * (W - 1) + j) % VEC,
                base[(c0 + i) * p.s_c + j * p.s_j]);
    }
}

template <int W> static FN void window_store(const conv_params &p, int64_t slot, int64_t c0,
                                             const window<W> &r) {
    uint16_t *base = p.state + slot * p.s_slot;
    if (p.state_vec) {
        SP_HD_UNROLL
        for (int k = 0; k < W - 1; k++) {
            uint4 *at = (uint4 *)(base + c0 * (W - 1) + k * VEC);
            must_align(at, 16);
            *at = to_uint4(r.v[k]);
        }
        return;
    }
    SP_HD_UNROLL
    for (int i = 0; i < VEC; i++) {
        if (c0 + i >= p.C) break;
        SP_HD_UNROLL
        for (int j = 0; j < W - 1; j++)
            base[(c0 + i) * p.s_c + j * p.s_j] =
                get(r.v[(i * (W - 1) + j) / VEC], (i * (W - 1) + j) % VEC);
    }
}

/* Decode: sequences [n0, n1) (token n is sequence n), channels from c0.
 * Nothing but loads and stores: the slot index, then the window and the
 * input of DBATCH sequences in flight together before the first is used,
 * the weights read once for all of them. The new window is the old one
 * moved on by the input: the same bf16 bits, moved, not converted. */
template <int W, int SILU>
static FN void decode_thread(const conv_params &p, int64_t n0, int64_t n1, int64_t c0) {
    if (c0 >= p.C) return;
    float w[VEC][W], bias[VEC];
    load_params<W>(p, c0, w, bias);
    const int si = seg_of(p, c0);
    int64_t next[DBATCH]; /* the next batch's slots, read a batch ahead */
    SP_HD_UNROLL
    for (int b = 0; b < DBATCH; b++) next[b] = n0 + b < n1 ? sp_index_at_(p.idx, n0 + b) : -1;
    for (int64_t n = n0; n < n1; n += DBATCH) {
        int64_t slot[DBATCH];
        bf8 x[DBATCH];
        window<W> r[DBATCH];
        SP_HD_UNROLL
        for (int b = 0; b < DBATCH; b++) {
            slot[b] = next[b];
            next[b] = n + DBATCH + b < n1 ? sp_index_at_(p.idx, n + DBATCH + b) : -1;
            if (n + b < n1) x[b] = load_x(p, n + b, c0); /* row n + b exists whatever the slot */
        }
        SP_HD_UNROLL
        for (int b = 0; b < DBATCH; b++)
            if (slot[b] >= 0 && slot[b] < p.slots) window_load<W>(p, slot[b], c0, r[b]);
        SP_HD_UNROLL
        for (int b = 0; b < DBATCH; b++) {
            if (slot[b] < 0 || slot[b] >= p.slots) continue; /* padded: nothing written */
            float z[W - 1][VEC];
            SP_HD_UNROLL
            for (int i = 0; i < VEC; i++)
                SP_HD_UNROLL
                for (int j = 0; j < W - 1; j++)
                    z[j][i] = widen(get(r[b].v[(i * (W - 1) + j) / VEC], (i * (W - 1) + j) % VEC));
            store_out(p, si, n + b, c0, step<W, SILU>(w, bias, z, x[b]));
            window<W> o = {}; /* every half is set below */
            SP_HD_UNROLL
            for (int i = 0; i < VEC; i++)
                SP_HD_UNROLL
                for (int j = 0; j < W - 1; j++) {
                    const int k = i * (W - 1) + j, from = k + 1; /* tap j+1, or the input */
                    put(o.v[k / VEC], k % VEC,
                        j < W - 2 ? get(r[b].v[from / VEC], from % VEC) : get(x[b], i));
                }
            window_store<W>(p, slot[b], c0, o);
        }
    }
}

/* No shared memory and fewer registers: more threads in flight, 4 blocks a
 * multiprocessor (docs/TUNING.md, "CONV_BLOCKS"). */
template <int W, int SILU>
static __global__ void __launch_bounds__(THREADS, 4) decode_kernel(const conv_params p) {
    int64_t grp, c0;
    if (item_of(p, (int64_t)blockIdx.x * THREADS + threadIdx.x, &grp, &c0)) {
        const int64_t n0 = grp * p.tile, n1 = n0 + p.tile < p.N ? n0 + p.tile : p.N;
        decode_thread<W, SILU>(p, n0, n1, c0);
    }
}

#endif /* SP_CONV_DECODE_CUH */
