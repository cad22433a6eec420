/*
 * boundary.c — the KDA input boundary: check the prefill's whole contract on
 * strided views, pack those of q, k, v, g that the prefill cannot read in
 * place (sp_kda_reads_in_place) with one sp_pack through an inputs boundary
 * (sp_kda_inputs, inputs.c) owned here, whose workspace is allocated once
 * (addresses fixed for CUDA graphs), then run the prefill. Eager calls and graph capture go
 * through the same function; capture is checked against the warm-up.
 */
#include "kda/kda_internal.h"

#include <stdlib.h>

enum { N_INPUTS = 5 }; /* q, k, v, g, beta */
#define BOUNDARY_TWO_PASS_MAX_HEADS 32

struct sp_kda_boundary {
    sp_device dev;
    int64_t max_tokens, max_heads;
    sp_kda_inputs *inputs; /* the pack and its workspace */
    void *kda_workspace; /* the two-pass kernel's, CUDA with max_heads <= 32 */
    size_t kda_workspace_bytes;
    size_t last_copied;
    /* The last eager (not capturing) run on a CUDA device: what a capture
     * must repeat. */
    int warmed;
    struct CUstream_st *warm_stream;
    int64_t warm_T;
    sp_tensor warm_inputs[N_INPUTS];
};

sp_status sp_kda_boundary_create(sp_kda_boundary **out, sp_device dev, int64_t max_tokens,
                                 int64_t max_heads) {
    SP_REQUIRE(out, SP_ERR_INVALID_ARGUMENT, "out: NULL");
    *out = NULL;
    SP_REQUIRE(max_tokens >= 0 && max_heads >= 0, SP_ERR_INVALID_ARGUMENT,
               "max_tokens, max_heads: %lld, %lld; capacities must be >= 0",
               (long long)max_tokens, (long long)max_heads);
    SP_REQUIRE(dev.type == SP_DEVICE_CPU || dev.type == SP_DEVICE_CUDA, SP_ERR_INVALID_ARGUMENT,
               "dev: device type %d is neither CPU nor CUDA", (int)dev.type);
    if (dev.type == SP_DEVICE_CUDA)
        SP_REQUIRE(sp_cuda_available(), SP_ERR_NO_DEVICE,
                   "dev: no usable CUDA device in this build or machine");
    sp_kda_boundary *b = calloc(1, sizeof *b);
    SP_REQUIRE(b, SP_ERR_OUT_OF_MEMORY, "sp_kda_boundary_create: no memory for the object");
    b->dev = dev;
    b->max_tokens = max_tokens;
    b->max_heads = max_heads;
    /* The pack's worst case at full capacity, every input strided: what the
     * inputs boundary sizes (refusing sizes that overflow) and allocates. */
    sp_status s = sp_kda_inputs_create(&b->inputs, dev, max_tokens, max_heads, NULL, 0);
    if (s != SP_OK) {
        free(b);
        return s;
    }
    /* AUTO picks the two-pass kernel for at most SP_KDA_TWO_PASS_MAX_PAIRS
     * (sequence, head) pairs. Its need, (T / 32 + N) * H records, is then
     * at most (max_tokens / 32) * max_heads + that many pairs. Kept for
     * small head counts (tensor-parallel ranks), where it pays most. */
    size_t kda_bytes = 0;
    if (dev.type == SP_DEVICE_CUDA && max_heads > 0 && max_heads <= BOUNDARY_TWO_PASS_MAX_HEADS &&
        max_tokens > 0)
        s = sp_kda_two_pass_bytes_(max_tokens, SP_KDA_TWO_PASS_MAX_PAIRS, max_heads, &kda_bytes);
    b->kda_workspace_bytes = kda_bytes;
    if (s == SP_OK && kda_bytes > 0)
        s = sp_cuda_alloc_(dev.ordinal, kda_bytes, &b->kda_workspace, "workspace");
    if (s != SP_OK) {
        (void)sp_kda_inputs_destroy(b->inputs);
        free(b);
        return s;
    }
    *out = b;
    return SP_OK;
}

static int same_view(const sp_tensor *a, const sp_tensor *b) {
    if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i] || a->strides[i] != b->strides[i]) return 0;
    return 1;
}

/* During capture the graph must repeat the warm-up exactly. */
static sp_status check_capture(const sp_kda_boundary *b, const sp_tensor *in, int64_t T,
                               struct CUstream_st *stream) {
    static const char *names[N_INPUTS] = {"q", "k", "v", "g", "beta"};
    SP_REQUIRE(b->warmed, SP_ERR_INVALID_ARGUMENT,
               "stream: capturing, but this boundary has had no eager warm-up run");
    SP_REQUIRE(stream == b->warm_stream, SP_ERR_INVALID_ARGUMENT,
               "stream: capture on a stream other than the warm-up's");
    SP_REQUIRE(T == b->warm_T, SP_ERR_INVALID_ARGUMENT,
               "q: capture with T = %lld, the warm-up had T = %lld (T is fixed per graph)",
               (long long)T, (long long)b->warm_T);
    for (int i = 0; i < N_INPUTS; i++)
        SP_REQUIRE(same_view(&in[i], &b->warm_inputs[i]), SP_ERR_INVALID_ARGUMENT,
                   "%s: capture with a view (address or strides) other than the warm-up's",
                   names[i]);
    return SP_OK;
}

sp_status sp_kda_boundary_run(sp_kda_boundary *b, const sp_kda_args *args,
                              struct CUstream_st *stream) {
    SP_REQUIRE(b, SP_ERR_INVALID_ARGUMENT, "b: NULL boundary");
    SP_REQUIRE(args, SP_ERR_INVALID_ARGUMENT, "args: NULL");
    /* q's device first: the contract check below makes every argument agree
     * with it, and would otherwise report a CPU boundary's CUDA tensors as a
     * missing device rather than the wrong one. */
    SP_FORWARD(sp_check_device_(&args->q, b->dev, "q", "the boundary serves"));
    /* The caller's workspace if any, else the boundary's own. */
    sp_kda_args full = *args;
    if (!full.workspace && full.workspace_bytes == 0 && b->kda_workspace) {
        full.workspace = b->kda_workspace;
        full.workspace_bytes = b->kda_workspace_bytes;
    }
    args = &full;
    sp_kda_dims d;
    SP_FORWARD(sp_kda_check_(args, 0, &d));
    /* The workspace was sized for bf16 inputs: an f32 g (a log-decay) goes
     * through only where it is read in place. */
    SP_REQUIRE(args->g.dtype == SP_BF16 || sp_kda_reads_in_place(&args->g), SP_ERR_UNSUPPORTED,
               "g: f32 at strides %s, %p is not read in place, and the boundary packs bf16 "
               "inputs only: pass it dense, or with rows of 128 contiguous channels at 16-byte "
               "aligned addresses",
               sp_strides_text_(&args->g).s, args->g.data);
    SP_REQUIRE(d.T <= b->max_tokens, SP_ERR_CAPACITY,
               "q: T = %lld exceeds the boundary's max_tokens %lld", (long long)d.T,
               (long long)b->max_tokens);
    SP_REQUIRE(d.H <= b->max_heads, SP_ERR_CAPACITY,
               "q: H = %lld exceeds the boundary's max_heads %lld", (long long)d.H,
               (long long)b->max_heads);

    const sp_tensor in[N_INPUTS] = {args->q, args->k, args->v, args->g, args->beta};
    int capturing = 0;
    if (d.dev.type == SP_DEVICE_CUDA) {
        SP_FORWARD(sp_cuda_capturing_(stream, &capturing));
        if (capturing) SP_FORWARD(check_capture(b, in, d.T, stream));
    }

    /* The check above is the prefill's whole check (device and launch
     * limits included), so neither call below refuses its arguments after
     * the pack has written the workspace. What can still fail then is a
     * CUDA launch, or the CPU prefill's scratch allocation; the pack has
     * written only this boundary's own workspace by that point. */
    /* Only the views the prefill cannot read in place go to the pack (none
     * in the K3 layouts; beta never). Checked once: sp_kda_check_ made every
     * rule of sp_pack's inputs (views, alignment, one usable device), and
     * the workspace was sized at creation for max_tokens x max_heads with
     * every input strided. */
    sp_tensor use[N_INPUTS];
    size_t copied = 0;
    SP_FORWARD(sp_kda_inputs_pack_unreadable_(b->inputs, in, use, &copied, stream));
    sp_kda_args packed = *args;
    packed.q = use[0];
    packed.k = use[1];
    packed.v = use[2];
    packed.g = use[3];
    packed.beta = use[4];
    SP_FORWARD(sp_kda_run_(&packed, &d, stream)); /* checked above, not again */

    b->last_copied = copied;
    if (d.dev.type == SP_DEVICE_CUDA && !capturing) {
        b->warmed = 1;
        b->warm_stream = stream;
        b->warm_T = d.T;
        for (int i = 0; i < N_INPUTS; i++) b->warm_inputs[i] = in[i];
    }
    return SP_OK;
}

sp_status sp_kda_boundary_last_copied(const sp_kda_boundary *b, size_t *n_copied) {
    SP_REQUIRE(b && n_copied, SP_ERR_INVALID_ARGUMENT, "b, n_copied: NULL");
    *n_copied = b->last_copied;
    return SP_OK;
}

sp_status sp_kda_boundary_destroy(sp_kda_boundary *b) {
    if (!b) return SP_OK;
    sp_status s = sp_kda_inputs_destroy(b->inputs);
    if (b->kda_workspace) { /* CUDA only */
        const sp_status s2 = sp_cuda_free_(b->dev.ordinal, b->kda_workspace);
        if (s == SP_OK) s = s2;
    }
    free(b);
    return s;
}
