/*
 * dispatch.c — the one place that decides which KDA kernel serves a call,
 * and how the chunked kernel spreads over the multiprocessors. The rules
 * follow the measurements in docs/PERFORMANCE.md.
 */
#include "kda/kda_internal.h"

#include <stdint.h>

/* Below this many tokens per sequence on average, the recurrent kernel's
 * one block per (sequence, head) can be as fast: a chunk of 32 tokens costs
 * the chunked kernels a fixed pipeline of barriers and small products
 * whatever its fill. At 8 tokens a sequence the chunked kernel is still
 * the faster (2.06 against 2.51 ms for 256 sequences of 8 tokens, H = 96,
 * docs/PERFORMANCE.md); fewer were not measured. */
#define CHUNKED_MIN_MEAN_TOKENS 8

const char *sp_kda_kernel_name(sp_kda_kernel k) {
    switch (k) {
    case SP_KDA_KERNEL_AUTO: return "auto";
    case SP_KDA_KERNEL_RECURRENT: return "recurrent";
    case SP_KDA_KERNEL_CHUNKED: return "chunked";
    case SP_KDA_KERNEL_CHUNKED_TWO_PASS: return "chunked_two_pass";
    }
    return "unknown";
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

/* Why the chunked kernels cannot serve the call, or NULL when they can. */
static const char *chunked_unsupported(const sp_kda_args *a, const sp_kda_dims *d) {
    if (d->dev.type != SP_DEVICE_CUDA) return "they run on CUDA tensors only";
    if (a->gate != SP_KDA_GATE_LOWER_BOUND)
        return "they need the lower-bound gate (the softplus gate has no bound on a token's "
               "decay, which their factorized products rely on)";
    if (d->interval % SP_KDA_CHUNK != 0) return "checkpoint_interval must be a multiple of 32";
    if (!sp_kda_cuda_chunked_fits_((int)d->dev.ordinal))
        return "this GPU gives a block less shared memory than they need (about 216 KB)";
    /* q, k, v, g are read in place (sp_kda_reads_in_place: strided ones
     * 16-byte aligned already) and o written in 16-byte pieces; the
     * boundary packs the other views into 256-byte aligned slots first. */
    const sp_tensor *in[5] = {&a->q, &a->k, &a->v, &a->g, &a->o};
    for (int i = 0; i < 5; i++)
        if ((i == 4 || sp_kda_reads_in_place(in[i])) && (uintptr_t)in[i]->data % 16 != 0)
            return "dense q, k, v, g and o must be 16-byte aligned";
    return NULL;
}

int sp_kda_chunked_can_serve_(const sp_kda_args *a, const sp_kda_dims *d) {
    return chunked_unsupported(a, d) == NULL;
}

sp_status sp_kda_choose_kernel_(const sp_kda_args *a, sp_kda_dims *d) {
    const int32_t k = a->kernel;
    SP_REQUIRE(k == SP_KDA_KERNEL_AUTO || k == SP_KDA_KERNEL_RECURRENT ||
                   k == SP_KDA_KERNEL_CHUNKED || k == SP_KDA_KERNEL_CHUNKED_TWO_PASS,
               SP_ERR_INVALID_ARGUMENT, "kernel: %d is not an sp_kda_kernel", (int)k);
    const char *why = chunked_unsupported(a, d);
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
    if (k != SP_KDA_KERNEL_AUTO) {
        d->kernel = k;
        return SP_OK;
    }
    if (why || (d->N > 0 && d->T / d->N < CHUNKED_MIN_MEAN_TOKENS)) {
        d->kernel = SP_KDA_KERNEL_RECURRENT;
    } else if (d->N * d->H <= SP_KDA_TWO_PASS_MAX_PAIRS && a->workspace_bytes >= need) {
        d->kernel = SP_KDA_KERNEL_CHUNKED_TWO_PASS;
    } else {
        d->kernel = SP_KDA_KERNEL_CHUNKED;
    }
    return SP_OK;
}

/* State-pass blocks a (sequence, head) pair: one per 16 of its 128 V rows
 * (chunked_two_pass.cu); with two records in flight two share a
 * multiprocessor. */
#define PASS_BLOCKS_PER_PAIR 8

int sp_kda_two_pass_records_(int64_t pairs, int sms) {
    /* A state-pass block (8 a pair) waits on its records' arrival: four in
     * flight walk fastest, but then it takes a multiprocessor to itself;
     * with two, two blocks share one. So two where that makes one wave of
     * blocks out of more, four elsewhere (on the H200 at T = 16384, four
     * against three: 0.595 against 0.653 ms at 12 pairs, 1.910 against
     * 2.009 at 48; two at 24 pairs: 1.007 against 1.149 for the former two
     * row groups a block; docs/PERFORMANCE.md). */
    if (sms < 1) sms = 1;
    const int64_t blocks = PASS_BLOCKS_PER_PAIR * pairs;
    return blocks > sms && blocks <= 2 * (int64_t)sms ? 2 : 4;
}

/* The head share is 1 - HEAD_K free / pairs, at least HEAD_MIN; above
 * HEAD_MAX two kernels run. HEAD_K puts it on the gentle side of the best
 * shares measured: too small a share makes the pass wait for records, and
 * costs more than too large a one. */
#define HEAD_K 0.17
#define HEAD_MIN 0.05
#define HEAD_MAX 0.8

int64_t sp_kda_two_pass_head_slots_(int64_t pairs, int sms, int records, int64_t slots) {
    /* With two records in flight, 8 pairs blocks leave 2 sms - 8 pairs
     * block slots free: there the last records are prepared beside the
     * state pass, which starts once the first share `head` of them is
     * written, so that the preparing blocks, fewer and slower than a whole
     * prepare kernel's, keep ahead of the pass to its end. The pass's time
     * then hides theirs. On the H200 at T = 16384 (docs/PERFORMANCE.md),
     * ms, two kernels against the best share measured: 20 pairs 0.907
     * against 0.834 (0.05), 24 pairs 0.957 against 0.889 (0.35), 28 pairs
     * 1.005 against 0.984 (0.7); at 32 pairs (8 free) every share lost
     * (1.046 against 2.05 at 0.85). Those were preparing blocks faster
     * than the ones that write a record's exact bits (prepare_record): at
     * 24 pairs these gave 0.976 ms at 0.3, 0.928 at 0.37, 0.904 at 0.45,
     * 0.913 at 0.55, so the shares now sit higher (0.12, 0.49, 0.76 at 20,
     * 24, 28 pairs). With four records a block has a
     * multiprocessor to itself and the few preparing blocks left lose (12
     * pairs: 0.551 against 0.617 at best). */
    if (records != 2 || sms < 1 || pairs < 1) return slots;
    const int64_t free_blocks = 2 * (int64_t)sms - PASS_BLOCKS_PER_PAIR * pairs;
    if (free_blocks < 1) return slots;
    double head = 1.0 - HEAD_K * (double)free_blocks / (double)pairs;
    if (head > HEAD_MAX) return slots;
    if (head < HEAD_MIN) head = HEAD_MIN;
    const int64_t h = (int64_t)(head * (double)slots);
    return h < 1 ? 1 : h;
}

static int forced_records, forced_head; /* sp_kda_two_pass_force_ */

void sp_kda_two_pass_force_(int records, int head_permille) {
    forced_records = records;
    forced_head = head_permille;
}

void sp_kda_two_pass_plan_(int64_t pairs, int sms, int64_t slots, int *records,
                           int64_t *head_slots) {
    *records = forced_records ? forced_records : sp_kda_two_pass_records_(pairs, sms);
    if (forced_head > 0) {
        const int64_t h = slots * forced_head / 1000;
        *head_slots = h < 1 ? 1 : h > slots ? slots : h;
    } else {
        *head_slots = sp_kda_two_pass_head_slots_(pairs, sms, *records, slots);
    }
}

int sp_kda_chunked_splits_(int64_t pairs, int sms) {
    /* The most splits of the V columns (each block then owns 128 / splits)
     * that still keep every block in one wave, one block per multiprocessor:
     * a second wave would cost a whole block's time again. */
    int s = 1;
    while (s < 8 && pairs * s * 2 <= sms) s *= 2;
    return s;
}

int sp_kda_chunked_wgmma_(int splits) {
    /* The wgmma build reads each V operand row once a warpgroup instead of
     * once a warp. Since its products are no longer serialized (the warp
     * index known uniform, their registers fenced) it wins wherever a block
     * owns all 128 V columns, in one wave or several, and loses where blocks
     * split them (on the H200 at T = 16384, H = 96: 1.393 against 1.450 ms
     * in 8 sequences, 1.776 against 1.837 before in one; T = 2048, H = 96:
     * 0.232 against 0.242, in 16 sequences 0.277 against 0.286; two splits:
     * 1.605 against 1.529 at H = 64, 1.586 against 1.519 at H = 48;
     * docs/PERFORMANCE.md). */
    return splits == 1;
}
