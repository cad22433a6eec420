/*
 * conv_emulate.cu — sp_conv_emulate_: the CUDA kernels' threads
 * (conv_prefill.cuh, conv_decode.cuh) run one by one on the host, on CPU
 * tensors, with the launcher's parameters and work items (conv.cu), so that
 * the tests check the kernels' tiling, halo and state logic, and their
 * vector accesses' alignment, on machines without a GPU.
 */
#include "conv/conv_decode.cuh"
#include "conv/conv_prefill.cuh"

thread_local long sp_conv_emulated_misaligned_; /* conv_kernels.cuh, must_align */

/* The kernel on the host, thread by thread. No thread may depend on
 * another having run first, nor write what another writes: the even items
 * run first, last to first, then the odd ones, first to last, so that of
 * two neighbouring tiles the earlier runs first at every other boundary
 * and the later one at the rest. For tests. */
template <int W, int FAST, int SILU> static void emulate_as(const conv_params &p) {
    const int64_t tiles = p.tiles;
    for (int64_t i = 0; i < tiles; i++) {
        const int64_t even = (tiles - 1) / 2 + 1; /* items 0, 2, 4, ... */
        const int64_t bx = i < even ? 2 * (even - 1 - i) : 2 * (i - even) + 1;
        for (int64_t v = 0; v < p.nvec; v++) {
            int64_t item, c0;
            (void)item_of(p, bx * p.nvec + v, &item, &c0);
            if (p.decode) {
                const int64_t n0 = item * p.tile, n1 = n0 + p.tile < p.N ? n0 + p.tile : p.N;
                decode_thread<W, SILU>(p, n0, n1, c0);
            } else {
                conv_thread<W, FAST, SILU>(p, item, tiles, c0);
            }
        }
    }
}

/* The instance the launcher would pick (kernel_index), run on the host. */
template <int W> static void emulate(const conv_params &p) {
    const bool fast = vector_path(p);
    if (fast && p.silu) emulate_as<W, 1, 1>(p);
    if (fast && !p.silu) emulate_as<W, 1, 0>(p);
    if (!fast && p.silu) emulate_as<W, 0, 1>(p);
    if (!fast && !p.silu) emulate_as<W, 0, 0>(p);
}

/* What an H200 holds of the prefill kernel at W = 4 (132 multiprocessors,
 * 3 blocks each): the launcher's choice on a machine without a GPU. */
#define EMULATED_RESIDENT (132 * 3)

extern "C" sp_status sp_conv_emulate_(const sp_conv_args *a, int decode, int64_t tile) {
    sp_conv_dims d;
    SP_FORWARD(sp_conv_check_(a, decode, 0, &d));
    SP_REQUIRE(d.dev.type == SP_DEVICE_CPU, SP_ERR_UNSUPPORTED,
               "x: the kernel's emulation runs on CPU tensors only");
    if (d.N == 0 || d.C == 0) return SP_OK;
    conv_params p;
    sp_conv_fill_params_(a, &d, &p);
    sp_conv_choose_items_(&d, &p, EMULATED_RESIDENT, tile);
    sp_conv_emulated_misaligned_ = 0;
    if (d.W == 2) emulate<2>(p);
    if (d.W == 3) emulate<3>(p);
    if (d.W == 4) emulate<4>(p);
    SP_REQUIRE(sp_conv_emulated_misaligned_ == 0, SP_ERR_MISALIGNED,
               "x: %ld vector accesses of the kernel would fault on misaligned addresses",
               sp_conv_emulated_misaligned_);
    return SP_OK;
}
