/*
 * bf16.h — bf16 <-> float conversions (round to nearest even, NaN kept a
 * NaN) that the host code and the kernels share, and SP_HD, which makes a
 * static inline helper callable from both (SP_HD_UNROLL: its loops
 * unrolled on the device). Included by C and by CUDA
 * sources.
 */
#ifndef SP_BF16_H
#define SP_BF16_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SP_HD __host__ __device__
#else
#define SP_HD
#endif

/* Before a loop of an SP_HD function: unrolled in device code (by 4:
 * SP_HD_UNROLL_4), a plain loop on the host. */
#ifdef __CUDA_ARCH__
#define SP_HD_UNROLL _Pragma("unroll")
#define SP_HD_UNROLL_4 _Pragma("unroll 4")
#else
#define SP_HD_UNROLL
#define SP_HD_UNROLL_4
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- bf16 <-> f32, round to nearest even -------------------------------- */

/* The bits of a float and back: the device's intrinsics, memcpy on the
 * host (no aliasing). */
#ifdef __CUDA_ARCH__
static inline SP_HD uint32_t sp_f32_bits_(float f) { return __float_as_uint(f); }
static inline SP_HD float sp_bits_f32_(uint32_t u) { return __uint_as_float(u); }
#else
static inline SP_HD uint32_t sp_f32_bits_(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static inline SP_HD float sp_bits_f32_(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
#endif

static inline SP_HD float sp_bf16_to_f32_(uint16_t h) { return sp_bits_f32_((uint32_t)h << 16); }

/* The two bf16 of a 32-bit word (the lower address in the low half). */
static inline SP_HD float sp_bf16x2_lo_(uint32_t u) { return sp_bits_f32_(u << 16); }
static inline SP_HD float sp_bf16x2_hi_(uint32_t u) { return sp_bits_f32_(u & 0xffff0000u); }

/* Adding 0x7fff plus the kept lsb carries into the kept bits exactly when
 * the dropped half is above the midpoint, or at it with an odd lsb. NaN is
 * kept a (quiet) NaN instead of letting the carry turn it into infinity. */
static inline SP_HD uint16_t sp_f32_to_bf16_(float f) {
    uint32_t u = sp_f32_bits_(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* double -> bf16 with one rounding. Going through float is exact except
 * when the float rounding lands on a bf16 midpoint that x itself is not on;
 * nudging one float ulp back towards x restores the right direction. */
static inline uint16_t sp_f64_to_bf16_(double x) {
    float f = (float)x;
    uint32_t u = sp_f32_bits_(f);
    if ((u & 0x7fffffffu) <= 0x7f800000u && (u & 0xffffu) == 0x8000u && (double)f != x) {
        double ax = x < 0 ? -x : x, af = f < 0 ? -(double)f : (double)f;
        u = ax > af ? u + 1 : u - 1;
        f = sp_bits_f32_(u);
    }
    return sp_f32_to_bf16_(f);
}

#ifdef __cplusplus
}
#endif

#endif /* SP_BF16_H */
