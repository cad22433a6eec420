/*
 * plan.c — the one place that decides how a KDA call runs: which kernel
 * serves it, and how that kernel spreads over the device (sp_kda_plan).
 * Every rule below has its reason beside it and its measurements in a
 * section of docs/TUNING.md named after its constant.
 *
 *   sequences under CHUNKED_MIN_MEAN_TOKENS tokens on average, or a
 *     verify table: DECODE_AUTO on and the decode kernel serves it -> DECODE
 *                                                    else -> RECURRENT
 *   CPU tensors, or a call the chunked kernels cannot serve -> RECURRENT
 *   gate or beta forms other than K3's (the lower-bound gate, beta bf16
 *     logits), CHUNKED_EVERY_GATE_AUTO off           -> RECURRENT
 *     (on: the chunked kernels' every-gate builds, by the rules below)
 *   at most SP_KDA_TWO_PASS_MAX_PAIRS (sequence, head) pairs, with the
 *     workspace                                      -> CHUNKED_TWO_PASS
 *   else                                             -> CHUNKED
 */
#include "cuda/device.h"
#include "kda/kda_internal.h"

#include <stdint.h>
#include <stdio.h>

/* A chunk of 32 tokens costs the chunked kernels a fixed pipeline of
 * barriers and small products whatever its fill; below this many tokens a
 * sequence on average the recurrent kernel's token steps are cheaper
 * (docs/TUNING.md, "CHUNKED_MIN_MEAN_TOKENS"; fewer were not measured). */
#define CHUNKED_MIN_MEAN_TOKENS 8

/* AUTO sends decode and verify calls (above) to the decode kernel where it
 * serves them, faster than the recurrent kernel over the decode grid
 * (docs/TUNING.md, "DECODE_AUTO"; 0: the recurrent kernel). */
#define DECODE_AUTO 1

/* The head share is 1 - HEAD_K free / pairs, at least HEAD_MIN; above
 * HEAD_MAX two kernels run. HEAD_K puts it on the gentle side of the best
 * shares measured: too small a share makes the pass wait for records, and
 * costs more than too large a one (docs/TUNING.md, "TWO_PASS_HEAD_SHARE"). */
#define HEAD_K 0.17
#define HEAD_MIN 0.05
#define HEAD_MAX 0.8

/* AUTO sends calls in gate or beta forms other than K3's (the lower-bound
 * gate, beta bf16 logits) to the chunked kernels' every-gate builds, as it
 * sends K3's to the K3 builds: they do K3's products and a chunk of
 * element-wise exponentials at most where the recurrent kernel walks every
 * token (docs/TUNING.md, "CHUNKED_EVERY_GATE"; 0: the recurrent kernel). */
#define CHUNKED_EVERY_GATE_AUTO 1

/* The one-pass kernel starts the blocks of the longest sequences first
 * (list scheduling longest first: an unequal batch then does not end on a
 * long sequence started last) where its blocks make more than one wave and
 * the sequences average at least this many tokens; below it each block's
 * ranking of the lengths costs more than the order wins (docs/TUNING.md,
 * "ONE_PASS_LONGEST_FIRST"). */
#define ONE_PASS_LONGEST_FIRST_MEAN_TOKENS 1024

/* The decode kernel's V rows a warp, 16 or 32 (a block is one pair's 128
 * rows, its shared memory those rows, fp32, or bf16 where a bf16 pool's call
 * has no more tokens than sequences): with fp32 rows three blocks fill a
 * multiprocessor either way and 16 rows give twice the warps; with bf16 rows
 * 32 give six blocks of four warps where 16 give three of eight (registers),
 * and 32 the faster through the decode driver at every step it runs
 * (docs/TUNING.md, "DECODE_ROWS_PER_WARP"). */
#define DECODE_ROWS_PER_WARP 16
#define DECODE_ROWS_PER_WARP_BF16_ROWS 32

const char *sp_kda_kernel_name(sp_kda_kernel k) {
    switch (k) {
    case SP_KDA_KERNEL_AUTO: return "auto";
    case SP_KDA_KERNEL_RECURRENT: return "recurrent";
    case SP_KDA_KERNEL_CHUNKED: return "chunked";
    case SP_KDA_KERNEL_CHUNKED_TWO_PASS: return "chunked_two_pass";
    case SP_KDA_KERNEL_DECODE: return "decode";
    }
    return "unknown";
}

/* ---- the rules, as functions of their inputs ------------------------------- */

int sp_kda_chunked_splits_(int64_t pairs, int sms) {
    /* The most splits of the V columns (each block then owns 128 / splits)
     * that still keep every block in one wave, one block a multiprocessor: a
     * second wave would cost a whole block's time again (docs/TUNING.md,
     * "ONE_PASS_SPLITS"). */
    int s = 1;
    while (s < 8 && pairs * s * 2 <= sms) s *= 2;
    return s;
}

int sp_kda_chunked_longest_first_(int64_t T, int64_t N, int64_t blocks, int sms) {
    /* One wave of blocks all start at once: no order to choose. */
    return N > 1 && N <= SP_KDA_LONGEST_FIRST_MAX_N && blocks > sms &&
           T / N >= ONE_PASS_LONGEST_FIRST_MEAN_TOKENS;
}

int sp_kda_chunked_wgmma_(int splits) {
    /* The wgmma build reads each V operand row once a warpgroup instead of
     * once a warp: it wins wherever a block owns all 128 V columns, in one
     * wave or several, and loses where blocks split them (docs/TUNING.md,
     * "ONE_PASS_WGMMA"). */
    return splits == 1;
}

int sp_kda_decode_rows_per_warp_(int state_bf16, int tokens_outer) {
    return state_bf16 && !tokens_outer ? DECODE_ROWS_PER_WARP_BF16_ROWS : DECODE_ROWS_PER_WARP;
}

int64_t sp_kda_decode_pairs_a_block_(int64_t pairs, int64_t slots) {
    /* One wave, each block the same number of pairs (the last fewer); 1
     * where the pairs fit in one wave (docs/TUNING.md, "DECODE_STREAM"). */
    if (slots < 1 || pairs < 1) return 0;
    return (pairs + slots - 1) / slots;
}

int sp_kda_two_pass_records_(int64_t pairs, int sms) {
    /* A state-pass block waits on its records' arrival: four in flight walk
     * fastest, but then it takes a multiprocessor to itself; with two, two
     * blocks share one. So two where that makes one wave of blocks out of
     * more, four elsewhere (docs/TUNING.md, "TWO_PASS_RECORDS"). */
    if (sms < 1) sms = 1;
    const int64_t blocks = SP_KDA_TWO_PASS_BLOCKS_PER_PAIR * pairs;
    return blocks > sms && blocks <= 2 * (int64_t)sms ? 2 : 4;
}

int64_t sp_kda_two_pass_head_slots_(int64_t pairs, int sms, int records, int64_t slots) {
    /* With two records in flight, the pass's blocks leave 2 sms - 8 pairs
     * block slots free: there the last records are prepared beside the state
     * pass, which starts once the first share of them is written, so that
     * the preparing blocks, fewer and slower than a whole prepare kernel's,
     * keep ahead of the pass to its end; the pass's time then hides theirs.
     * With four records a block has a multiprocessor to itself and the few
     * preparing blocks left lose (docs/TUNING.md, "TWO_PASS_HEAD_SHARE"). */
    if (records != 2 || sms < 1 || pairs < 1) return slots;
    const int64_t free_blocks = 2 * (int64_t)sms - SP_KDA_TWO_PASS_BLOCKS_PER_PAIR * pairs;
    if (free_blocks < 1) return slots;
    double head = 1.0 - HEAD_K * (double)free_blocks / (double)pairs;
    if (head > HEAD_MAX) return slots;
    if (head < HEAD_MIN) head = HEAD_MIN;
    const int64_t h = (int64_t)(head * (double)slots);
    return h < 1 ? 1 : h;
}

sp_status sp_kda_two_pass_bytes_(int64_t T, int64_t N, int64_t H, size_t *bytes) {
    /* A record and a 4-byte flag (the one-kernel form's) per slot and head. */
    const int64_t slots = sp_kda_two_pass_slots_(T, N);
    int64_t records;
    SP_REQUIRE(!__builtin_mul_overflow(slots, H, &records) &&
                   !__builtin_mul_overflow((uint64_t)records,
                                           (uint64_t)SP_KDA_TWO_PASS_RECORD_BYTES + 4, bytes),
               SP_ERR_OVERFLOW, "workspace: the two-pass kernel's size for T %lld, N %lld, H %lld "
               "overflows", (long long)T, (long long)N, (long long)H);
    return SP_OK;
}

/* ---- which kernel ------------------------------------------------------------ */

/* Why the chunked kernels cannot serve the call, or NULL when they can
 * (*dev: the device's row, when the call is on a usable CUDA device). */
static const char *chunked_unsupported(const sp_kda_args *a, const sp_kda_dims *d,
                                       const sp_cuda_device **dev) {
    *dev = NULL;
    if (d->dev.type != SP_DEVICE_CUDA) return "they run on CUDA tensors only";
    if (d->width > 0)
        return "a verify table (2-D state_indices) writes the state after every token, which "
               "they do not keep";
    if (d->interval % SP_KDA_CHUNK != 0) return "checkpoint_interval must be a multiple of 32";
    if (sp_cuda_device_((int)d->dev.ordinal, SP_CUDA_PART_KDA, dev) != SP_OK) {
        *dev = NULL;
        return "the device's properties could not be read";
    }
    if (!(*dev)->kda_chunked)
        return "this GPU gives a block less shared memory than they need "
               "(sp_kda_chunked_smem_bytes_)";
    /* q, k, v, g are read in place (sp_kda_reads_in_place: strided ones
     * 16-byte aligned already) and o written in 16-byte pieces; the
     * boundary packs the other views into 256-byte aligned slots first. */
    const sp_tensor *in[5] = {&a->q, &a->k, &a->v, &a->g, &a->o};
    for (int i = 0; i < 5; i++)
        if ((i == 4 || sp_kda_reads_in_place(in[i])) && (uintptr_t)in[i]->data % 16 != 0)
            return "dense q, k, v, g and o must be 16-byte aligned";
    return NULL;
}

const char *sp_kda_decode_layout_unsupported_(const sp_kda_args *a, const sp_kda_dims *d) {
    if (d->interval > 0) return "it writes no checkpoints";
    /* Its rows are copied in 16-byte pieces. */
    if ((uintptr_t)a->state.data % 16 != 0 || d->pitch * (d->state_bf16 ? 2 : 4) % 16 != 0)
        return "the pool must be 16-byte aligned, its slot pitch a multiple of 16 bytes";
    return NULL;
}

/* Why the decode kernel cannot serve the call, or NULL when it can. */
static const char *decode_unsupported(const sp_kda_args *a, const sp_kda_dims *d) {
    if (d->dev.type != SP_DEVICE_CUDA) return "it runs on CUDA tensors only";
    return sp_kda_decode_layout_unsupported_(a, d);
}

int sp_kda_k3_forms_(const sp_kda_args *a) {
    return a->gate == SP_KDA_GATE_LOWER_BOUND && a->beta_form == SP_KDA_BETA_LOGITS &&
           a->beta.dtype == SP_BF16;
}

int sp_kda_chunked_can_serve_(const sp_kda_args *a, const sp_kda_dims *d) {
    const sp_cuda_device *dev;
    return chunked_unsupported(a, d, &dev) == NULL;
}

/* Several tokens a sequence: each prepared once, the rows kept between them;
 * a decode step (no more tokens than sequences): each group's rows through
 * the sequence's tokens, a bf16 pool's rows copied as bf16
 * (docs/TUNING.md, "DECODE_TOKENS_OUTER"). */
int sp_kda_decode_tokens_outer_(int64_t T, int64_t N) { return T > N; }

sp_status sp_kda_plan_(const sp_kda_args *a, const sp_kda_dims *d, sp_kda_plan *plan) {
    const int32_t k = a->kernel;
    SP_REQUIRE(k == SP_KDA_KERNEL_AUTO || k == SP_KDA_KERNEL_RECURRENT ||
                   k == SP_KDA_KERNEL_CHUNKED || k == SP_KDA_KERNEL_CHUNKED_TWO_PASS ||
                   k == SP_KDA_KERNEL_DECODE,
               SP_ERR_INVALID_ARGUMENT, "kernel: %d is not an sp_kda_kernel", (int)k);
    if (k == SP_KDA_KERNEL_DECODE) {
        const char *no = decode_unsupported(a, d);
        SP_REQUIRE(!no, SP_ERR_UNSUPPORTED, "kernel: the decode kernel cannot serve this call: %s",
                   no);
    }
    const sp_cuda_device *dev;
    const char *why = chunked_unsupported(a, d, &dev);
    if (k == SP_KDA_KERNEL_CHUNKED || k == SP_KDA_KERNEL_CHUNKED_TWO_PASS)
        SP_REQUIRE(!why, SP_ERR_UNSUPPORTED, "kernel: the %s kernel cannot serve this call: %s",
                   sp_kda_kernel_name((sp_kda_kernel)k), why);
    size_t need = 0;
    if (!why) SP_FORWARD(sp_kda_two_pass_bytes_(d->T, d->N, d->H, &need));
    if (k == SP_KDA_KERNEL_CHUNKED_TWO_PASS)
        SP_REQUIRE(a->workspace_bytes >= need, SP_ERR_WORKSPACE_TOO_SMALL,
                   "workspace: %zu bytes, the two-pass kernel needs %zu here "
                   "(sp_kda_prefill_workspace_bytes)",
                   a->workspace_bytes, need);
    sp_kda_plan p;
    memset(&p, 0, sizeof p);
    const int64_t pairs = d->N * d->H;
    if (k != SP_KDA_KERNEL_AUTO)
        p.kernel = k;
    else if (d->width > 0 || (d->N > 0 && d->T / d->N < CHUNKED_MIN_MEAN_TOKENS))
        p.kernel = DECODE_AUTO && !decode_unsupported(a, d) ? SP_KDA_KERNEL_DECODE
                                                            : SP_KDA_KERNEL_RECURRENT;
    else if (why || (!CHUNKED_EVERY_GATE_AUTO && !sp_kda_k3_forms_(a)))
        p.kernel = SP_KDA_KERNEL_RECURRENT;
    else if (pairs <= SP_KDA_TWO_PASS_MAX_PAIRS && a->workspace_bytes >= need)
        p.kernel = SP_KDA_KERNEL_CHUNKED_TWO_PASS;
    else
        p.kernel = SP_KDA_KERNEL_CHUNKED;
    /* The configuration, from the device's row (dev is set wherever a
     * chunked kernel was chosen). */
    if (p.kernel == SP_KDA_KERNEL_CHUNKED || p.kernel == SP_KDA_KERNEL_CHUNKED_TWO_PASS)
        p.every_gate = !sp_kda_k3_forms_(a);
    if (p.kernel == SP_KDA_KERNEL_CHUNKED) {
        p.splits = sp_kda_chunked_splits_(pairs, dev->sms);
        p.longest_first = sp_kda_chunked_longest_first_(d->T, d->N, pairs * p.splits, dev->sms);
        p.wgmma = sp_kda_chunked_wgmma_(p.splits) && dev->kda_wgmma;
    } else if (p.kernel == SP_KDA_KERNEL_CHUNKED_TWO_PASS) {
        p.records = sp_kda_two_pass_records_(pairs, dev->sms);
        /* The head share, measured on the K3 build, for both builds. */
        const int64_t slots = sp_kda_two_pass_slots_(d->T, d->N);
        p.head_slots = sp_kda_two_pass_head_slots_(pairs, dev->sms, p.records, slots);
        p.workspace_bytes = need;
    } else if (p.kernel == SP_KDA_KERNEL_DECODE) {
        p.decode_tokens_outer = sp_kda_decode_tokens_outer_(d->T, d->N);
        p.decode_rows_per_warp = sp_kda_decode_rows_per_warp_(d->state_bf16, p.decode_tokens_outer);
    }
    *plan = p;
    return SP_OK;
}

/* ---- a plan of the caller's ------------------------------------------------- */

/* `forced` serves the checked call d (whose own plan is d->plan). */
static sp_status check_forced(const sp_kda_args *a, const sp_kda_dims *d,
                              const sp_kda_plan *forced) {
    const int32_t k = forced->kernel;
    SP_REQUIRE(k == SP_KDA_KERNEL_RECURRENT || k == SP_KDA_KERNEL_CHUNKED ||
                   k == SP_KDA_KERNEL_CHUNKED_TWO_PASS || k == SP_KDA_KERNEL_DECODE,
               SP_ERR_INVALID_ARGUMENT, "plan: kernel %d is not a kernel that runs (AUTO is not)",
               (int)k);
    sp_kda_args with = *a;
    with.kernel = k;
    sp_kda_plan own;
    SP_FORWARD(sp_kda_plan_(&with, d, &own)); /* the kernel serves the call */
    if (forced->kernel == SP_KDA_KERNEL_CHUNKED) {
        const int s = forced->splits;
        SP_REQUIRE(s == 1 || s == 2 || s == 4 || s == 8, SP_ERR_INVALID_ARGUMENT,
                   "plan: splits %d is not 1, 2, 4 or 8", (int)s);
        SP_REQUIRE(forced->wgmma == 0 || forced->wgmma == 1, SP_ERR_INVALID_ARGUMENT,
                   "plan: wgmma %d is not 0 or 1", (int)forced->wgmma);
        SP_REQUIRE(forced->longest_first == 0 || forced->longest_first == 1,
                   SP_ERR_INVALID_ARGUMENT, "plan: longest_first %d is not 0 or 1",
                   (int)forced->longest_first);
        SP_REQUIRE(!forced->longest_first || d->N <= SP_KDA_LONGEST_FIRST_MAX_N,
                   SP_ERR_UNSUPPORTED, "plan: longest_first orders at most %d sequences, not %lld",
                   SP_KDA_LONGEST_FIRST_MAX_N, (long long)d->N);
        const sp_cuda_device *dev;
        SP_FORWARD(sp_cuda_device_((int)d->dev.ordinal, SP_CUDA_PART_KDA, &dev));
        SP_REQUIRE(!forced->wgmma || dev->kda_wgmma, SP_ERR_UNSUPPORTED,
                   "plan: the wgmma build has no wgmma code for cuda:%d",
                   (int)d->dev.ordinal);
    }
    if (k == SP_KDA_KERNEL_CHUNKED || k == SP_KDA_KERNEL_CHUNKED_TWO_PASS) {
        SP_REQUIRE(forced->every_gate == 0 || forced->every_gate == 1, SP_ERR_INVALID_ARGUMENT,
                   "plan: every_gate %d is not 0 or 1", (int)forced->every_gate);
        SP_REQUIRE(forced->every_gate || own.every_gate == 0, SP_ERR_UNSUPPORTED,
                   "plan: every_gate 0 (the K3 build) serves the lower-bound gate with beta bf16 "
                   "logits only");
    }
    if (forced->kernel == SP_KDA_KERNEL_DECODE) {
        const int r = forced->decode_rows_per_warp;
        SP_REQUIRE(r == 16 || r == 32, SP_ERR_INVALID_ARGUMENT,
                   "plan: decode_rows_per_warp %d is not 16 or 32", r);
        SP_REQUIRE(forced->decode_tokens_outer == 0 || forced->decode_tokens_outer == 1,
                   SP_ERR_INVALID_ARGUMENT, "plan: decode_tokens_outer %d is not 0 or 1",
                   (int)forced->decode_tokens_outer);
        const long long P = (long long)forced->decode_pairs_a_block;
        SP_REQUIRE(P >= 0, SP_ERR_INVALID_ARGUMENT, "plan: decode_pairs_a_block %lld is negative",
                   P);
        if (P > 0) {
            SP_REQUIRE(!forced->decode_tokens_outer, SP_ERR_UNSUPPORTED,
                       "plan: decode_pairs_a_block %lld: the stream form runs groups outer "
                       "(decode_tokens_outer 0)",
                       P);
            SP_REQUIRE(r == SP_KDA_DECODE_STREAM_ROWS, SP_ERR_UNSUPPORTED,
                       "plan: decode_pairs_a_block %lld: the stream form runs %d rows a warp",
                       P, SP_KDA_DECODE_STREAM_ROWS);
            SP_REQUIRE(!d->state_k_first, SP_ERR_UNSUPPORTED,
                       "plan: decode_pairs_a_block %lld: the stream form copies a V-first "
                       "pool's rows",
                       P);
            const sp_cuda_device *dev;
            SP_FORWARD(sp_cuda_device_((int)d->dev.ordinal, SP_CUDA_PART_KDA, &dev));
            SP_REQUIRE(dev->kda_decode_stream_per_sm[d->state_bf16 != 0] > 0,
                       SP_ERR_UNSUPPORTED,
                       "plan: decode_pairs_a_block %lld: the stream form has no code with bulk "
                       "copies for cuda:%d",
                       P, (int)d->dev.ordinal);
        }
    }
    if (forced->kernel == SP_KDA_KERNEL_CHUNKED_TWO_PASS) {
        const int64_t slots = sp_kda_two_pass_slots_(d->T, d->N);
        SP_REQUIRE(forced->records == 2 || forced->records == 4, SP_ERR_INVALID_ARGUMENT,
                   "plan: records %d is not 2 or 4", (int)forced->records);
        SP_REQUIRE(forced->head_slots >= 1 && forced->head_slots <= slots,
                   SP_ERR_INVALID_ARGUMENT, "plan: head_slots %lld is outside [1, %lld]",
                   (long long)forced->head_slots, (long long)slots);
    }
    return SP_OK;
}

sp_status sp_kda_prefill_plan_(const sp_kda_args *args, sp_kda_plan *plan) {
    SP_REQUIRE(plan, SP_ERR_INVALID_ARGUMENT, "plan: NULL");
    sp_kda_dims d;
    SP_FORWARD(sp_kda_check_(args, 1, &d));
    *plan = d.plan;
    return SP_OK;
}

void sp_kda_plan_every_gate_(sp_kda_plan *plan) {
    if (plan->kernel != SP_KDA_KERNEL_CHUNKED && plan->kernel != SP_KDA_KERNEL_CHUNKED_TWO_PASS)
        return;
    plan->every_gate = 1;
}

sp_status sp_kda_prefill_planned_(const sp_kda_args *args, const sp_kda_plan *plan,
                                  struct CUstream_st *stream) {
    SP_REQUIRE(args, SP_ERR_INVALID_ARGUMENT, "args: NULL");
    SP_REQUIRE(plan, SP_ERR_INVALID_ARGUMENT, "plan: NULL");
    sp_kda_args a = *args;
    a.kernel = SP_KDA_KERNEL_AUTO;
    sp_kda_dims d;
    SP_FORWARD(sp_kda_check_(&a, 1, &d));
    SP_FORWARD(check_forced(&a, &d, plan));
    d.plan = *plan;
    return sp_kda_run_(&a, &d, stream);
}
