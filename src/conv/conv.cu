/*
 * conv.cu — the CUDA causal convolution's launcher, prefill and decode, one
 * launch: the launch parameters from the checked call, the kernel instance
 * for its form and layouts, work items sized to the blocks the device holds
 * (the device table, cuda/device.h), and the launch. The kernels' threads
 * are conv_prefill.cuh and conv_decode.cuh; conv_emulate.cu runs them on
 * the host, by the same rules.
 */
#include "conv/conv_decode.cuh"
#include "conv/conv_prefill.cuh"
#include "cuda/device.h"
#include "cuda/runtime.h"

/* ---- the kernel instances ------------------------------------------------ */

/* Numbered as the device table's conv_per_sm: prefill (W - 2) * 4 + fast * 2
 * + silu (0 to 11), decode 12 + (W - 2) * 2 + silu (12 to 17). fast: rows of
 * x and outputs are 16-byte vectors. */
static_assert(SP_CONV_KERNELS == 18, "conv.cu numbers 18 kernel instances");

template <int W> static const void *instance_of(int decode, int fast, int silu) {
    if (decode)
        return silu ? (const void *)decode_kernel<W, 1> : (const void *)decode_kernel<W, 0>;
    return fast ? (silu ? (const void *)conv_kernel<W, 1, 1> : (const void *)conv_kernel<W, 1, 0>)
                : (silu ? (const void *)conv_kernel<W, 0, 1> : (const void *)conv_kernel<W, 0, 0>);
}

static const void *instance(int index) {
    const int decode = index >= 12, k = decode ? index - 12 : index;
    const int W = 2 + k / (decode ? 2 : 4), fast = !decode && k % 4 >= 2, silu = k % 2;
    return W == 2 ? instance_of<2>(decode, fast, silu)
         : W == 3 ? instance_of<3>(decode, fast, silu)
                  : instance_of<4>(decode, fast, silu);
}

/* The instance for a call: form, width, vector layouts, activation. */
static int kernel_index(const conv_params &p, int64_t W) {
    const int fast = vector_path(p);
    return p.decode ? 12 + (int)(W - 2) * 2 + p.silu : (int)(W - 2) * 4 + fast * 2 + p.silu;
}

/* The device table's row: blocks of each instance a multiprocessor holds. */
extern "C" sp_status sp_conv_cuda_device_facts_(sp_cuda_device *d) {
    for (int i = 0; i < SP_CONV_KERNELS; i++)
        SP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&d->conv_per_sm[i], instance(i),
                                                                    THREADS, 0));
    return SP_OK;
}

/* ---- the rules ------------------------------------------------------------- */

static bool aligned16(const void *ptr) { return (uintptr_t)ptr % 16 == 0; }

/* Rows of `row` elements keep 16-byte alignment (or there is one row). */
static bool rows16(int64_t row, int64_t rows) { return rows <= 1 || (row * 2) % 16 == 0; }

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Work items (token tiles, or decode groups of sequences) for a call, from
 * the blocks the device holds at once (`resident`). Prefill: tiles of 64
 * tokens, or 32, where that makes at least 4 waves of blocks, so that the
 * block scheduler evens out the multiprocessors; with fewer, one wave of
 * the longest tiles, none left over for a partial wave. A tile is 8 tokens
 * at least. Decode: 4 sequences a thread (two batches of 2), fewer where
 * the grid would not fill one wave (docs/TUNING.md, "CONV_WORK_ITEMS"). */
void sp_conv_choose_items_(const sp_conv_dims *d, conv_params *p, int64_t resident,
                           int64_t forced) {
    const int64_t units = d->decode ? d->N : d->T, least = d->decode ? 1 : 8;
    const int64_t slots = resident * THREADS; /* threads the device holds */
    int64_t len;
    if (d->decode) {
        const int64_t fill = units * p->nvec / slots;
        len = fill < 1 ? 1 : fill < 4 ? fill : 4;
    } else {
        len = 0;
        for (int64_t t = 64; t >= 32 && !len; t /= 2)
            if (cdiv(units, t) * p->nvec >= 4 * slots) len = t;
        if (!len) {
            const int64_t per_wave = slots / p->nvec;
            len = units > 0 ? cdiv(units, per_wave > 1 ? per_wave : 1) : 1;
        }
    }
    if (forced > 0) len = forced;
    p->tile = len < least ? least : len;
    p->tiles = units > 0 ? cdiv(units, p->tile) : 1; /* T = 0: empty sequences get their state */
}

void sp_conv_fill_params_(const sp_conv_args *a, const sp_conv_dims *d, conv_params *p) {
    memset(p, 0, sizeof *p);
    p->x = (const uint16_t *)a->x.data;
    p->x_row = a->x.strides[0];
    p->x_col = a->x.strides[1];
    p->w = a->weight.data;
    p->w_c = a->weight.strides[0];
    p->w_j = a->weight.strides[1];
    p->bias = d->has_bias ? a->bias.data : NULL;
    p->b_c = d->has_bias ? a->bias.strides[0] : 0;
    p->cu = sp_conv_cu_of_(a, d);
    p->idx = sp_index_of_(&a->state_indices);
    p->init = d->has_init ? (const uint8_t *)a->has_initial_state.data : NULL;
    p->state = (uint16_t *)a->state.data;
    p->s_slot = a->state.strides[0];
    p->s_c = a->state.strides[1];
    p->s_j = a->state.strides[2];
    p->nseg = d->nseg;
    for (int i = 0; i < d->nseg; i++) p->seg[i] = d->seg[i];
    p->T = d->T;
    p->C = d->C;
    p->N = d->N;
    p->slots = d->slots;
    p->silu = a->silu;
    p->decode = d->decode;
    p->w_bf16 = d->weight_bf16;

    const bool c8 = d->C % VEC == 0;
    if (c8 && p->x_col == 1) /* 16-byte loads where rows allow, else 8-byte */
        p->x_vec = aligned16(p->x) && rows16(p->x_row, d->T)                     ? 16
                   : (uintptr_t)p->x % 8 == 0 && (d->T <= 1 || (p->x_row * 2) % 8 == 0) ? 8
                                                                                       : 0;
    p->out_vec = c8 && d->key_dim % VEC == 0;
    for (int i = 0; i < d->nseg; i++) {
        const int64_t next = i + 1 < d->nseg ? d->seg[i + 1].first : d->C;
        if (next == d->seg[i].first) continue; /* no channel goes here */
        p->out_vec = p->out_vec && (next - d->seg[i].first == 1 || d->seg[i].col == 1) &&
                     aligned16(d->seg[i].data) && rows16(d->seg[i].row, d->T);
    }
    p->state_vec = c8 && (d->W == 2 || p->s_j == 1) && p->s_c == d->W - 1 && aligned16(p->state) &&
                   rows16(p->s_slot, d->slots);
    p->w_vec = c8 && p->w_j == 1 && p->w_c == d->W && aligned16(p->w);
    p->b_vec = c8 && d->has_bias && p->b_c == 1 && aligned16(p->bias);
    p->nvec = (d->C + VEC - 1) / VEC;
}

/* ---- the launch ------------------------------------------------------------ */

/* Blocks of instance `index` that `device` runs at once. */
static sp_status resident_blocks(int device, int index, int64_t *blocks) {
    const sp_cuda_device *info;
    SP_FORWARD(sp_cuda_device_(device, SP_CUDA_PART_CONV, &info));
    const int per_sm = info->conv_per_sm[index];
    *blocks = (int64_t)info->sms * (per_sm > 0 ? per_sm : 1);
    return SP_OK;
}

/* The launch's own status, not a pending error left by the caller. */
static sp_status launch(const void *kernel, conv_params *p, cudaStream_t stream) {
    void *params[] = {p};
    const int64_t blocks = cdiv(p->tiles * p->nvec, THREADS);
    SP_CUDA_CHECK(cudaLaunchKernel(kernel, dim3((unsigned)blocks), dim3(THREADS), params, 0, stream));
    return SP_OK;
}

static sp_status run_cuda(const sp_conv_args *a, const sp_conv_dims *d, int64_t items,
                          cudaStream_t stream) {
    conv_params p;
    sp_conv_fill_params_(a, d, &p);
    const int index = kernel_index(p, d->W);
    int64_t resident = 0;
    SP_FORWARD(resident_blocks((int)d->dev.ordinal, index, &resident));
    sp_conv_choose_items_(d, &p, resident, items);
    return launch(instance(index), &p, stream);
}

/* A checked call with N > 0, on its device. */
static sp_status on_device(const sp_conv_args *a, const sp_conv_dims *d, int64_t items,
                           struct CUstream_st *stream) {
    if (d->C == 0) return SP_OK;
    sp_cuda_device_guard g;
    SP_FORWARD(sp_cuda_device_enter_(&g, (int)d->dev.ordinal, "x"));
    return sp_cuda_device_leave_(&g, run_cuda(a, d, items, (cudaStream_t)stream));
}

extern "C" sp_status sp_conv_cuda_(const sp_conv_args *a, const sp_conv_dims *d,
                                   struct CUstream_st *stream) {
    return on_device(a, d, 0, stream);
}

extern "C" sp_status sp_conv_cuda_planned_(const sp_conv_args *a, int decode, int64_t items,
                                           struct CUstream_st *stream) {
    sp_conv_dims d;
    SP_FORWARD(sp_conv_check_(a, decode, 1, &d));
    if (d.N == 0) return SP_OK;
    SP_REQUIRE(d.dev.type == SP_DEVICE_CUDA, SP_ERR_UNSUPPORTED,
               "x: a planned call runs on CUDA tensors only");
    return on_device(a, &d, items, stream);
}
