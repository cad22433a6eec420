/* pack.c — layer 3: sp_pack. Dense inputs pass through as themselves; the
 * rest get SP_PACK_ALIGN-aligned slots of the caller's workspace, filled by
 * one sp_copy_batch. Nothing is allocated, so a call can be graph-captured. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SP_PACK_STACK SP_MAX_PAIRS_PER_LAUNCH /* inputs, all on the stack */

static uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Bytes of one dense copy of t (validated); 0 with *ovf set on overflow. */
static uint64_t dense_bytes(const sp_tensor *t, int *ovf) {
    uint64_t b;
    if (__builtin_mul_overflow((uint64_t)sp_numel_(t), (uint64_t)sp_dtype_size((sp_dtype)t->dtype), &b) ||
        b > UINT64_MAX - SP_PACK_ALIGN)
        *ovf = 1;
    return b;
}

/* The checks of inputs[i] (the layout only, or everything sp_pack needs:
 * aligned, well placed, on inputs[0]'s device) with no name and, only once
 * they have failed, again with the argument's name for the message: this is
 * the per-call path, and snprintf costs more than the checks. */
static sp_status check_input_as(const sp_tensor *inputs, size_t i, int placed, const char *name) {
    if (!placed) return sp_tensor_check_layout_(&inputs[i], name);
    SP_FORWARD(sp_tensor_check_aligned_(&inputs[i], name));
    return sp_check_same_device_(&inputs[i], inputs[0].device, name);
}

static sp_status check_input(const sp_tensor *inputs, size_t i, int placed) {
    if (check_input_as(inputs, i, placed, "") == SP_OK) return SP_OK;
    char name[32];
    snprintf(name, sizeof name, "inputs[%zu]", i);
    return check_input_as(inputs, i, placed, name);
}

/* The workspace the non-dense inputs (valid views) need, and which inputs
 * are dense (dense may be NULL). */
static sp_status workspace_need(const sp_tensor *inputs, size_t n, uint64_t *need,
                                unsigned char *dense) {
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int is_dense = sp_tensor_is_dense(&inputs[i]);
        if (dense) dense[i] = (unsigned char)is_dense;
        if (is_dense) continue;
        int ovf = 0;
        uint64_t b = round_up(dense_bytes(&inputs[i], &ovf), SP_PACK_ALIGN);
        SP_REQUIRE(!ovf && total + b >= total, SP_ERR_OVERFLOW,
                   "inputs[%zu]: workspace size overflows", i);
        total += b;
    }
    *need = total ? total + SP_PACK_ALIGN - 1 : 0;
    SP_REQUIRE(*need >= total && *need <= SIZE_MAX, SP_ERR_OVERFLOW, "inputs: workspace size overflows");
    return SP_OK;
}

sp_status sp_workspace_alloc_(sp_device dev, size_t bytes, void **p) {
    *p = NULL;
    if (dev.type == SP_DEVICE_CUDA) return sp_cuda_alloc_(dev.ordinal, bytes, p, "workspace");
    SP_REQUIRE(bytes <= SIZE_MAX - SP_PACK_ALIGN, SP_ERR_OVERFLOW, "workspace: %zu bytes", bytes);
    const size_t rounded = (bytes + SP_PACK_ALIGN - 1) / SP_PACK_ALIGN * SP_PACK_ALIGN;
    *p = aligned_alloc(SP_PACK_ALIGN, rounded);
    SP_REQUIRE(*p, SP_ERR_OUT_OF_MEMORY, "workspace: no memory for %zu bytes", rounded);
    return SP_OK;
}

sp_status sp_workspace_free_(sp_device dev, void *p) {
    if (dev.type == SP_DEVICE_CUDA) return sp_cuda_free_(dev.ordinal, p);
    free(p);
    return SP_OK;
}

/* The slots, their check against the inputs, and the copy: sp_pack's work
 * once the inputs are checked and dense[i] says which are dense. */
static sp_status pack_planned(const sp_tensor *inputs, size_t n, const unsigned char *dense,
                              void *workspace, sp_tensor *outputs, size_t *n_copied,
                              struct CUstream_st *stream) {
    /* Lay out the slots and check them against every input before a byte moves. */
    sp_copy_pair pairs[SP_PACK_STACK];
    size_t np = 0;
    uintptr_t slot = (uintptr_t)round_up((uintptr_t)workspace, SP_PACK_ALIGN);
    const uintptr_t used_lo = slot;
    for (size_t i = 0; i < n; i++) {
        if (dense[i]) continue;
        sp_copy_pair *p = &pairs[np++];
        p->src = inputs[i];
        p->dst = inputs[i];
        p->dst.data = (void *)slot;
        for (int64_t d = p->dst.ndim - 1, run = 1; d >= 0; run *= p->dst.shape[d], d--)
            p->dst.strides[d] = run;
        int ovf = 0; /* checked above */
        slot += (uintptr_t)round_up(dense_bytes(&inputs[i], &ovf), SP_PACK_ALIGN);
    }
    for (size_t i = 0; np > 0 && i < n; i++) {
        uintptr_t lo, hi;
        sp_tensor_extent_(&inputs[i], &lo, &hi);
        SP_REQUIRE(!sp_extents_overlap_(used_lo, slot, lo, hi), SP_ERR_OVERLAP,
                   "workspace: bytes [%p, %p) overlap inputs[%zu] [%p, %p)", (void *)used_lo,
                   (void *)slot, i, (void *)lo, (void *)hi);
    }
    /* Every input is read before the first output is written: outputs may
     * alias inputs in any way. */
    sp_tensor out[SP_PACK_STACK];
    for (size_t i = 0, k = 0; i < n; i++) out[i] = dense[i] ? inputs[i] : pairs[k++].dst;
    if (np > 0) SP_FORWARD(sp_copy_validated_(pairs, np, stream));
    if (n > 0) memcpy(outputs, out, n * sizeof *outputs);
    if (n_copied) *n_copied = np;
    return SP_OK;
}

sp_status sp_pack_workspace_bytes(const sp_tensor *inputs, size_t n, size_t *bytes) {
    SP_REQUIRE(bytes != NULL, SP_ERR_INVALID_ARGUMENT, "bytes: output pointer is NULL");
    SP_REQUIRE(n == 0 || inputs != NULL, SP_ERR_INVALID_ARGUMENT, "inputs: NULL with n = %zu", n);
    for (size_t i = 0; i < n; i++) SP_FORWARD(check_input(inputs, i, 0));
    uint64_t need = 0;
    SP_FORWARD(workspace_need(inputs, n, &need, NULL));
    *bytes = (size_t)need;
    return SP_OK;
}

sp_status sp_pack(const sp_tensor *inputs, size_t n, void *workspace, size_t workspace_bytes,
                  sp_tensor *outputs, size_t *n_copied, struct CUstream_st *stream) {
    SP_REQUIRE(n == 0 || outputs != NULL, SP_ERR_INVALID_ARGUMENT, "outputs: NULL with n = %zu", n);
    SP_REQUIRE(n <= SP_PACK_STACK, SP_ERR_UNSUPPORTED, "inputs: %zu tensors, at most %d per sp_pack",
               n, SP_PACK_STACK);
    SP_REQUIRE(n == 0 || inputs != NULL, SP_ERR_INVALID_ARGUMENT, "inputs: NULL with n = %zu", n);
    for (size_t i = 0; i < n; i++) SP_FORWARD(check_input(inputs, i, 1));
    uint64_t need = 0;
    unsigned char dense[SP_PACK_STACK];
    SP_FORWARD(workspace_need(inputs, n, &need, dense));
    if (need > 0) {
        SP_REQUIRE(workspace != NULL, SP_ERR_INVALID_ARGUMENT,
                   "workspace: NULL, but %llu bytes are needed", (unsigned long long)need);
        SP_REQUIRE(workspace_bytes >= need, SP_ERR_WORKSPACE_TOO_SMALL,
                   "workspace: %zu bytes given, %llu needed (see sp_pack_workspace_bytes)",
                   workspace_bytes, (unsigned long long)need);
        SP_REQUIRE(need <= (uint64_t)UINTPTR_MAX - (uintptr_t)workspace, SP_ERR_OVERFLOW,
                   "workspace: %llu bytes from %p pass the top of the address space",
                   (unsigned long long)need, workspace);
        SP_FORWARD(sp_check_device_usable_(inputs[0].device));
    }
    return pack_planned(inputs, n, dense, workspace, outputs, n_copied, stream);
}

sp_status sp_pack_validated_(const sp_tensor *inputs, size_t n, void *workspace,
                             sp_tensor *outputs, size_t *n_copied, struct CUstream_st *stream) {
    uint64_t need = 0;
    unsigned char dense[SP_PACK_STACK];
    SP_FORWARD(workspace_need(inputs, n, &need, dense)); /* sized by the caller: cannot fail */
    return pack_planned(inputs, n, dense, workspace, outputs, n_copied, stream);
}
