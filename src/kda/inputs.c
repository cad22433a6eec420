/*
 * inputs.c — the inputs boundary alone (stridepack_kda.h): q, k, v, g, beta
 * checked against the KDA input contract as any strided views, then the
 * non-dense ones packed with one sp_pack into a workspace fixed at
 * creation, for a KDA prefill that is not ours. Only the inputs' rules are
 * checked here (their shapes by the prefill's own rule,
 * sp_kda_check_inputs_); the consumer's other arguments are its own.
 */
#include "kda/kda_internal.h"

#include <stdio.h>
#include <stdlib.h>

enum { N_INPUTS = 5 }; /* q, k, v, g, beta */
static const char *const names[N_INPUTS] = {"q", "k", "v", "g", "beta"};

struct sp_kda_inputs {
    sp_device dev;
    int64_t max_tokens, max_heads;
    void *workspace;
    size_t workspace_bytes;
    int owned; /* the workspace is ours to free */
};

sp_status sp_kda_inputs_workspace_bytes(int64_t max_tokens, int64_t max_heads, size_t *bytes) {
    SP_REQUIRE(bytes, SP_ERR_INVALID_ARGUMENT, "bytes: NULL");
    SP_REQUIRE(max_tokens >= 0 && max_heads >= 0, SP_ERR_INVALID_ARGUMENT,
               "max_tokens, max_heads: %lld, %lld; capacities must be >= 0",
               (long long)max_tokens, (long long)max_heads);
    /* Four [T, H, 128] and one [T, H] bf16 slot, each rounded up to the
     * pack's alignment, plus the alignment of the base (sp_pack's layout). */
    uint64_t th, big, small, total;
    SP_REQUIRE(!__builtin_mul_overflow((uint64_t)max_tokens, (uint64_t)max_heads, &th) &&
                   !__builtin_mul_overflow(th, (uint64_t)SP_KDA_D * 2, &big) &&
                   !__builtin_mul_overflow(th, (uint64_t)2, &small) &&
                   big <= UINT64_MAX / 8,
               SP_ERR_OVERFLOW, "max_tokens x max_heads: %lld x %lld overflows",
               (long long)max_tokens, (long long)max_heads);
    const uint64_t a = SP_PACK_ALIGN;
    big = (big + a - 1) / a * a;
    small = (small + a - 1) / a * a;
    total = 4 * big + small;
    if (total > 0) total += a - 1;
    SP_REQUIRE(total <= SIZE_MAX && max_heads <= INT64_MAX / SP_KDA_D / 4 &&
                   max_tokens <= INT64_MAX / 4,
               SP_ERR_OVERFLOW, "max_tokens x max_heads: %lld x %lld is too large",
               (long long)max_tokens, (long long)max_heads);
    *bytes = (size_t)total;
    return SP_OK;
}

sp_status sp_kda_inputs_create(sp_kda_inputs **out, sp_device dev, int64_t max_tokens,
                               int64_t max_heads, void *workspace, size_t workspace_bytes) {
    SP_REQUIRE(out, SP_ERR_INVALID_ARGUMENT, "out: NULL");
    *out = NULL;
    SP_REQUIRE(dev.type == SP_DEVICE_CPU || dev.type == SP_DEVICE_CUDA, SP_ERR_INVALID_ARGUMENT,
               "dev: device type %d is neither CPU nor CUDA", (int)dev.type);
    SP_REQUIRE(dev.type == SP_DEVICE_CPU || dev.ordinal >= 0, SP_ERR_INVALID_ARGUMENT,
               "dev: CUDA ordinal %d is negative", (int)dev.ordinal);
    SP_REQUIRE((workspace == NULL) == (workspace_bytes == 0), SP_ERR_INVALID_ARGUMENT,
               "workspace: %p with %zu bytes; give both or neither", workspace, workspace_bytes);
    size_t need = 0;
    SP_FORWARD(sp_kda_inputs_workspace_bytes(max_tokens, max_heads, &need));
    if (workspace)
        SP_REQUIRE(workspace_bytes >= need, SP_ERR_WORKSPACE_TOO_SMALL,
                   "workspace: %zu bytes given, %zu needed for %lld tokens x %lld heads "
                   "(see sp_kda_inputs_workspace_bytes)",
                   workspace_bytes, need, (long long)max_tokens, (long long)max_heads);
    if (dev.type == SP_DEVICE_CUDA) SP_FORWARD(sp_check_device_usable_(dev));

    sp_kda_inputs *p = calloc(1, sizeof *p);
    SP_REQUIRE(p, SP_ERR_OUT_OF_MEMORY, "sp_kda_inputs_create: no memory for the object");
    p->dev = dev;
    p->max_tokens = max_tokens;
    p->max_heads = max_heads;
    p->workspace = workspace;
    p->workspace_bytes = workspace ? workspace_bytes : need;
    if (!workspace && need > 0) {
        p->owned = 1;
        const sp_status s = sp_workspace_alloc_(dev, need, &p->workspace);
        if (s != SP_OK) {
            free(p);
            return s;
        }
    }
    *out = p;
    return SP_OK;
}

/* One input's placement and dtype; its shape is sp_kda_check_inputs_'s. */
static sp_status check_one(const sp_kda_inputs *p, const sp_tensor *t, const char *name) {
    SP_FORWARD(sp_tensor_check_aligned_(t, name));
    SP_FORWARD(sp_check_device_(t, p->dev, name, "the inputs boundary serves"));
    SP_REQUIRE(t->dtype == SP_BF16, SP_ERR_DTYPE_MISMATCH, "%s: dtype %s, the KDA inputs are bf16",
               name, sp_dtype_name((sp_dtype)t->dtype));
    return SP_OK;
}

sp_status sp_kda_inputs_pack(sp_kda_inputs *p, const sp_tensor in[5], sp_tensor out[5],
                             size_t *n_copied, struct CUstream_st *stream) {
    SP_REQUIRE(p, SP_ERR_INVALID_ARGUMENT, "p: NULL inputs boundary");
    SP_REQUIRE(in && out, SP_ERR_INVALID_ARGUMENT, "in, out: NULL");
    for (int i = 0; i < N_INPUTS; i++) SP_FORWARD(check_one(p, &in[i], names[i]));
    const sp_tensor *const views[N_INPUTS] = {&in[0], &in[1], &in[2], &in[3], &in[4]};
    int64_t T = 0, H = 0;
    SP_FORWARD(sp_kda_check_inputs_(views, &T, &H));
    SP_REQUIRE(T <= p->max_tokens, SP_ERR_CAPACITY,
               "q: T = %lld exceeds the inputs boundary's max_tokens %lld", (long long)T,
               (long long)p->max_tokens);
    SP_REQUIRE(H <= p->max_heads, SP_ERR_CAPACITY,
               "q: H = %lld exceeds the inputs boundary's max_heads %lld", (long long)H,
               (long long)p->max_heads);
    /* sp_pack checks the workspace's size and that no input lies inside it;
     * the capacity check above makes the size suffice. */
    return sp_pack(in, N_INPUTS, p->workspace, p->workspace_bytes, out, n_copied, stream);
}

sp_status sp_kda_inputs_pack_unreadable_(sp_kda_inputs *p, const sp_tensor in[5],
                                         sp_tensor out[5], size_t *n_copied,
                                         struct CUstream_st *stream) {
    sp_tensor to_pack[N_INPUTS], packed[N_INPUTS];
    int which[N_INPUTS];
    size_t n = 0, copied = 0;
    for (int i = 0; i < N_INPUTS; i++) {
        out[i] = in[i];
        if (i < N_INPUTS - 1 && !sp_kda_reads_in_place(&in[i])) {
            which[n] = i;
            to_pack[n++] = in[i];
        }
    }
    if (n > 0) SP_FORWARD(sp_pack_validated_(to_pack, n, p->workspace, packed, &copied, stream));
    for (size_t j = 0; j < n; j++) out[which[j]] = packed[j];
    *n_copied = copied;
    return SP_OK;
}

sp_status sp_kda_inputs_destroy(sp_kda_inputs *p) {
    if (!p) return SP_OK;
    sp_status s = SP_OK;
    if (p->owned) s = sp_workspace_free_(p->dev, p->workspace);
    free(p);
    return s;
}
