/*
 * index.h — index arrays of either width. Engines hand over sequence
 * bounds and slot numbers as int32 (vLLM's query_start_loc, cache_indices)
 * or int64 (fla's cu_seqlens); every entry takes both, and the host code
 * and the kernels read them through this one helper. Included by C and by
 * CUDA sources.
 */
#ifndef SP_INDEX_H
#define SP_INDEX_H

#include "bf16.h" /* SP_HD */
#include "stridepack.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A dense index array: its data and whether its entries are int64 (else
 * int32). A NULL data is an absent array. */
typedef struct sp_index_ {
    const void *at;
    int wide;
} sp_index_;

/* Entry i, widened to int64. */
static inline SP_HD int64_t sp_index_at_(sp_index_ x, int64_t i) {
    return x.wide ? ((const int64_t *)x.at)[i] : (int64_t)((const int32_t *)x.at)[i];
}

/* The array of a checked tensor (SP_SPEC_INDEX: i32 or i64); absent for an
 * unset one. */
static inline sp_index_ sp_index_of_(const sp_tensor *t) {
    sp_index_ x;
    x.at = t->data;
    x.wide = t->dtype == SP_I64;
    return x;
}

#ifdef __cplusplus
}
#endif

#endif /* SP_INDEX_H */
