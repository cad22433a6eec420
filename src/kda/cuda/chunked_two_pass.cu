/*
 * chunked_two_pass.cu — the chunked KDA prefill as two kernels, for calls
 * with few (sequence, head) pairs. There the one-pass kernel (chunked.cu)
 * runs few blocks, each paying a chunk's whole K side (gates, norms, the
 * products A and QK, the solve for T) before its state can move on; here
 * the K side of every chunk runs first, all chunks in parallel, and the
 * serial walk over the chunks does only the state's products:
 *
 *   1. prepare: one block per (chunk, head) computes the chunk's operands
 *      (chunk_k.cuh) and stores them, one chunk_ops record per (chunk, head),
 *      in the caller's workspace;
 *   2. state pass: per (sequence, head), blocks of 16 V rows walk the
 *      chunks, the records of the next chunks copied in while one is used.
 *      A block's slice of S^T is split over warps of 16 rows by 32 K
 *      columns; the partial products over K of its 4 warps
 *      meet in shared memory, where each warp adds up the sums it needs
 *      itself, in one order (one barrier a chunk, docs/TUNING.md,
 *      "TWO_PASS_ROW_GROUPS"), then each warp updates its own columns and
 *      writes 8 of the chunk's 32 output rows. What a chunk waits on is its
 *      record's arrival (a 37.5 KB copy, mostly from memory): the plan's
 *      records in flight (plan.c).
 *
 * Where the state pass leaves block slots free (two blocks a multiprocessor
 * and fewer than twice as many blocks as multiprocessors), the second
 * kernel is one cooperative kernel: the state-pass blocks, and on the free
 * slots blocks that prepare the records from slot head_slots on, in slot
 * order, each setting the record's flag once written; a state-pass block
 * waits for a record's flag before copying it. The first kernel then
 * prepares only slots 0 .. head_slots - 1 (and clears the flags), so the
 * pass starts that much sooner, and the preparing blocks, fewer than a
 * whole prepare kernel's, keep ahead of it (the plan's head_slots); both
 * builds (K3's and every gate's) have the one kernel. A record's bits do not
 * depend on which kernel wrote it (prepare_record).
 *
 * Where the records lie in the workspace, and how one is written:
 * two_pass_records.cuh.
 */
#include "cuda/runtime.h"
#include "kda/cuda/two_pass_records.cuh" /* chunk_k.cuh, chunk_safe.cuh */
#include "kda/cuda/chunk_v.cuh"

#include <stddef.h>
#include <stdint.h>

/* ---- 1. prepare ------------------------------------------------------------ */

/* One block per record of slots 0 .. gridDim.x / H - 1, block j the record
 * (slot j / H, head j % H): the heads of a slot side by side, so that blocks
 * running together read whole token rows of k, q and g (docs/TUNING.md,
 * "TWO_PASS_PREPARE_ORDER"). Where the one kernel follows, the blocks also
 * clear its flags of records clear_from .. items - 1 (flags: NULL
 * otherwise). */
template <int ANY>
static __global__ void __launch_bounds__(TP::PREP_THREADS, 2)
    kda_prepare_kernel(kda_params p, void *ws, int *flags, int64_t clear_from, int64_t items) {
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    const int64_t b = blockIdx.x;
    if (flags) {
        const int64_t stride = (int64_t)gridDim.x * TP::PREP_THREADS;
        for (int64_t i = clear_from + b * TP::PREP_THREADS + threadIdx.x; i < items; i += stride)
            flags[i] = 0;
    }
    prepare_record<TP::PREP_THREADS, ANY>(p, ws, b / p.H, b % p.H, *(prepare_smem *)smem_bytes);
}

/* The prepare kernel for the call's gates: K3's, or the every-gate build's
 * instance of the call's gate form and g dtype (with_call_gates: one
 * instance each, so that a form's code runs in one piece). */
static const void *prepare_kernel(const kda_params *p) {
    return with_call_gates(p, [](auto g) {
        return (const void *)kda_prepare_kernel<decltype(g)::value>;
    });
}

/* ---- 2. state pass --------------------------------------------------------- */

template <int RECORDS> struct pass_smem {
    static_assert(RECORDS == 2 || RECORDS == 4, "two or four records in flight");
    /* mbarriers: a record's bytes have landed (RECORDS of them used). Four
     * slots put the records 32 bytes into the block's shared memory whatever
     * RECORDS: where the records start within 128 bytes moves the whole
     * pass (docs/TUNING.md, "TWO_PASS_RECORD_OFFSET"). */
    uint64_t arrived[4];
    alignas(16) chunk_ops ops[RECORDS];  /* this chunk's record and the next ones */
    alignas(16) uint16_t v[RECORDS][CHUNK][TP::V_PITCH]; /* the block's V columns */
    float part_p[TP::ROW_GROUPS][TP::COL_WARPS][16][TP::PART_PITCH]; /* each warp's P^T over
                                                                     its K columns */
    float part_o[TP::ROW_GROUPS][TP::COL_WARPS][16][TP::PART_PITCH]; /* and its S'^T Lq^T */
    alignas(16) uint16_t out[4 * TP::ROW_GROUPS][8][TP::OUT_PITCH]; /* each warp's 8 output
                                                                       tokens, 16 V rows */
};

/* Start copying a record into buffer buf. The record is one contiguous
 * block: on Hopper one bulk copy by one thread, completing on the buffer's
 * mbarrier (a loop of 16-byte copies by every thread costs more issue slots
 * than the pass's arithmetic). */
template <typename Smem>
static __device__ __forceinline__ void load_record(const chunk_ops *from, const int *flag, int tid,
                                                   int threads, Smem &s, int buf) {
#if __CUDA_ARCH__ >= 900
    (void)threads;
    if (tid == 0) {
        const unsigned bar = sp_smem_addr_(&s.arrived[buf]), bytes = (unsigned)sizeof(chunk_ops);
        if (flag) { /* the one kernel: the record is written once its flag is set */
            while (!sp_flag_acquire_(flag)) __nanosleep(64);
            sp_fence_proxy_async_global_();
        }
        sp_fence_proxy_async_();
        sp_mbarrier_expect_tx_(bar, bytes);
        sp_bulk_copy_g2s_(sp_smem_addr_(&s.ops[buf]), from, bytes, bar);
    }
#else
    if (flag)
        while (!sp_flag_acquire_(flag)) __nanosleep(64);
    char *to = (char *)&s.ops[buf];
    for (int i = tid; i < (int)(sizeof(chunk_ops) / 16); i += threads)
        sp_cp_async16_fill_(to + 16 * i, (const char *)from + 16 * i, 16);
#endif
}

/* Wait for buffer buf's copies (its use number `use`, counting from 0):
 * the record's mbarrier, and the V copies of all but the newest `younger`
 * committed groups. */
template <int younger, typename Smem>
static __device__ __forceinline__ void wait_record(Smem &s, int buf, int64_t use) {
#if __CUDA_ARCH__ >= 900
    sp_mbarrier_wait_(sp_smem_addr_(&s.arrived[buf]), (unsigned)(use & 1));
#else
    (void)s, (void)buf, (void)use;
#endif
    sp_cp_async_wait_<younger>();
}

/* Accumulator tile x (rows r, r+8; columns 8nt + 2q, +1) to part[row][col]. */
static __device__ __forceinline__ void put_tile(float (*part)[TP::PART_PITCH], int nt, int r, int q,
                                                const float x[4]) {
    *(float2 *)&part[r][8 * nt + 2 * q] = make_float2(x[0], x[1]);
    *(float2 *)&part[r + 8][8 * nt + 2 * q] = make_float2(x[2], x[3]);
}

/* The tile back from a [16][TP::PART_PITCH] array. */
static __device__ __forceinline__ void get_tile(const float (*from)[TP::PART_PITCH], int nt, int r, int q,
                                                float x[4]) {
    const float2 a = *(const float2 *)&from[r][8 * nt + 2 * q];
    const float2 b = *(const float2 *)&from[r + 8][8 * nt + 2 * q];
    x[0] = a.x, x[1] = a.y, x[2] = b.x, x[3] = b.y;
}

/* Tile nt of the sum of a row group's TP::COL_WARPS partial [16][TP::PART_PITCH] arrays, added
 * in the order of k whichever warp adds them (so every warp's sum is the
 * same, bit for bit); part[mine] is this warp's own tile, taken from its
 * registers, own (mine -1, own NULL: every tile from shared memory). */
static __device__ __forceinline__ void sum_tiles(const float (*part)[16][TP::PART_PITCH], int nt, int r, int q,
                                                 int mine, const float own[4], float x[4]) {
#pragma unroll
    for (int k = 0; k < TP::COL_WARPS; k++) {
        float y[4];
        if (k == mine)
            y[0] = own[0], y[1] = own[1], y[2] = own[2], y[3] = own[3];
        else
            get_tile(part[k], nt, r, q, y);
        if (k == 0)
            x[0] = y[0], x[1] = y[1], x[2] = y[2], x[3] = y[3];
        else
            x[0] += y[0], x[1] += y[1], x[2] += y[2], x[3] += y[3];
    }
}

/* A block owns TP::ROWS V rows of one (sequence, head); warp w holds rows
 * 16 (w / COL_WARPS) .. +15 of them and K columns TP::COLS (w % COL_WARPS)
 * .. of S^T. The per-thread addressing (a V piece to copy, an output vector
 * to store) is worked out once; a chunk only adds its offset. ANY: the
 * build's gates (a safe chunk's state is scaled before W^T R is added). */
template <int RECORDS, int ANY>
static __device__ __forceinline__ void state_pass(const kda_params &p, const void *ws,
                                                  const int *flags, int64_t head_slots, int64_t bx,
                                                  pass_smem<RECORDS> &s) {
    constexpr int ROWS = TP::ROWS, NDS = TP::COLS / 8;
    const int split = (int)(bx % TP::BLOCKS_PER_PAIR);
    const int64_t nh = bx / TP::BLOCKS_PER_PAIR, h = nh % p.H, n = nh / p.H;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int r = lane >> 2, q = lane & 3, rg = w / TP::COL_WARPS, kq = w % TP::COL_WARPS;
    const bool outputs = kq < CHUNK / 8; /* warps whose 8 tokens of output are kq's */
    kda_seq sq;
    if (!kda_seq_of(p, n, h, &sq)) return;
    const int64_t L = sq.len, HD = p.H * DIM;
    const int64_t slot0 = first_slot(sq.bos, n);
    const chunk_ops *rec = record_of(ws, slot0, p.H, h);
    /* The one kernel: chunk c's record is written once flag[c H] is set
     * (chunks in slots below head_slots were written before the launch). */
    const int *flag = flags ? flags + slot0 * p.H + h : NULL;
    /* vw0: the warp's first V row of the block's; vrow: this lane's first of the head's */
    const int v0 = split * ROWS, vw0 = 16 * rg, vrow = v0 + vw0 + r, d0 = TP::COLS * kq;
    /* V: thread tid < 2 ROWS copies token vt's 8 columns from vc. */
    const int vt = tid / (ROWS / 8), vc = tid % (ROWS / 8) * 8, copies_v = tid < CHUNK * ROWS / 8;
    const uint16_t *v_at = kda_row(p.v, sq.bos + vt, h) + v0 + vc;
    /* Output: lane < 16 of an output warp stores token 8 kq + ot's V rows
     * from oh. */
    const int ot = lane >> 1, oh = (lane & 1) * 8;
    uint16_t *o_at = p.o + (sq.bos + 8 * kq + ot) * HD + h * DIM + v0 + vw0 + oh;

    float S[NDS][4]; /* S^T rows vrow, vrow + 8; K columns d0 .. d0 + TP::COLS - 1 */
    /* A sequence without tokens leaves its slot as it was, bit for bit. */
    if (L > 0)
        state_load(p.state, p.state_bf16, p.state_k_first, sq.read_base, vrow, d0, q, S, NDS);
#if __CUDA_ARCH__ >= 900
    if (tid == 0) {
        for (int b = 0; b < RECORDS; b++) sp_mbarrier_init_(sp_smem_addr_(&s.arrived[b]), 1);
        sp_mbarrier_init_fence_();
    }
    __syncthreads();
#endif
    /* Chunks 0 .. RECORDS - 2 in flight; then each iteration starts chunk + RECORDS - 1
     * into the buffer the last chunk used. */
#pragma unroll
    for (int b = 0; b < RECORDS - 1; b++) {
        const int64_t t0 = (int64_t)b * CHUNK;
        if (t0 < L) {
            load_record(rec + b * p.H, flag && slot0 + b >= head_slots ? flag + b * p.H : NULL,
                        tid, TP::THREADS, s, b);
            const int ok = t0 + vt < L;
            if (copies_v) sp_cp_async16_fill_(&s.v[b][vt][vc], ok ? v_at + t0 * p.v.ts : v_at, ok ? 16 : 0);
        }
        sp_cp_async_commit_();
    }
    int64_t crow = sq.crow;
    const int64_t chunks_per_ckpt = p.interval / CHUNK;
    for (int64_t c0 = 0, ci = 0; c0 < L; c0 += CHUNK, ci++) {
        const int buf = (int)(ci % RECORDS), next = (int)((ci + RECORDS - 1) % RECORDS);
        const chunk_ops &o = s.ops[buf];
        const int nt = (int)(L - c0 < CHUNK ? L - c0 : CHUNK);
        wait_record<RECORDS - 2>(s, buf, ci / RECORDS); /* groups: RECORDS - 1 + ci committed, ci + 1 done */
        __syncthreads(); /* the record landed; every warp is done with the last one */
        const int64_t t0 = c0 + (int64_t)(RECORDS - 1) * CHUNK;
        if (t0 < L) {
            const int64_t cn = ci + RECORDS - 1;
            load_record(rec + cn * p.H, flag && slot0 + cn >= head_slots ? flag + cn * p.H : NULL,
                        tid, TP::THREADS, s, next);
            const int ok = t0 + vt < L;
            if (copies_v) sp_cp_async16_fill_(&s.v[next][vt][vc], ok ? v_at + t0 * p.v.ts : v_at, ok ? 16 : 0);
        }
        sp_cp_async_commit_();

        /* S' = S diag(c); partial P^T = S' Lk^T and S' Lq^T over our columns. */
        float P[4][4] = {}, O[4][4] = {};
        state_products(S, NDS, d0, lane, o, P, O);
#pragma unroll
        for (int t8 = 0; t8 < CHUNK / 8; t8++) {
            put_tile(s.part_p[rg][kq], t8, r, q, P[t8]);
            put_tile(s.part_o[rg][kq], t8, r, q, O[t8]);
        }
        __syncthreads();
        /* Every warp: the sums it needs of the partial tiles, added itself
         * (no second barrier); then the whole X^T = diag(b) (V - P)^T and
         * W^T = X^T T^T. */
#pragma unroll
        for (int t8 = 0; t8 < CHUNK / 8; t8++) {
            float x[4];
            sum_tiles(s.part_p[rg], t8, r, q, kq, P[t8], x);
            P[t8][0] = x[0], P[t8][1] = x[1], P[t8][2] = x[2], P[t8][3] = x[3];
        }
        float W[CHUNK / 8][4];
        solve_w(P, &s.v[buf][0][0], TP::V_PITCH, vw0, o, lane, W);
        /* Output rows 8 kq .. +7 of our 16 V rows: S'^T Lq^T + W^T QK^T. */
        float Ow[4];
        if (outputs) sum_tiles(s.part_o[rg], kq, r, q, -1, NULL, Ow);
        /* Our columns: S = diag(e) (S' + W^T R), or diag(e) S' + W^T R (safe);
         * the every-gate build scales both before and after, by e or 1 as
         * the form selects (docs/TUNING.md, "CHUNKED_EVERY_GATE"). */
        const bool safe = ANY && chunk_is_safe(o);
        if (ANY) scale_columns_if(S, o.e, d0, q, NDS, safe);
        if (outputs)
#pragma unroll
            for (int kt = 0; kt < CHUNK / 8; kt++) {
                if (kq < 2 && kt >= 2) continue; /* QK's zero block */
                uint32_t a[4], b0, b1;
                acc_as_a(W[kt], a);
                pair(&o.qk[8 * kq + r][8 * kt + 2 * q], &b0, &b1);
                sp_mma_tf32_(Ow, a, b0, b1);
            }
#pragma unroll
        for (int kt = 0; kt < CHUNK / 16; kt++) {
            uint32_t a[4];
            acc_pair_as_a(W[2 * kt], W[2 * kt + 1], a);
            state_add_wr(S, NDS, d0, lane, o, kt, a);
        }
        scale_columns_if(S, o.e, d0, q, NDS, !safe); /* K3's: always */
        if (outputs) { /* the 8 x 16 outputs through shared memory, as 16-byte rows */
            uint16_t(*ob)[TP::OUT_PITCH] = s.out[4 * rg + kq];
            ob[2 * q][r] = sp_bf16_rn_(Ow[0]);
            ob[2 * q + 1][r] = sp_bf16_rn_(Ow[1]);
            ob[2 * q][r + 8] = sp_bf16_rn_(Ow[2]);
            ob[2 * q + 1][r + 8] = sp_bf16_rn_(Ow[3]);
            __syncwarp();
            if (lane < 16 && 8 * kq + ot < nt)
                *(uint4 *)(o_at + c0 * HD) = *(const uint4 *)&ob[ot][oh];
        }
        if (chunks_per_ckpt > 0 && nt == CHUNK && (ci + 1) % chunks_per_ckpt == 0)
            state_store(p.ckpt, p.state_bf16, 0, kda_ckpt_base(p, crow++, h), vrow, d0, q, S, NDS);
    }
    if (L > 0)
        state_store(p.state, p.state_bf16, p.state_k_first, sq.slot_base, vrow, d0, q, S, NDS);
}

template <int RECORDS, int ANY>
static __global__ void __launch_bounds__(TP::THREADS, 1)
    kda_state_pass_kernel(kda_params p, const void *ws) {
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    state_pass<RECORDS, ANY>(p, ws, NULL, 0, blockIdx.x, *(pass_smem<RECORDS> *)smem_bytes);
}

/* ---- the state pass and the last records' preparation as one kernel ------- */

/* Blocks below state_blocks run the state pass; the others prepare the
 * records from slot head_slots on, in slot order, each setting the record's
 * flag once written. Every block is resident at once (a cooperative
 * launch), so a state-pass block waiting on a flag always has a preparing
 * block to wait for. ANY: the every-gate build, as in the two kernels. */
template <int RECORDS, int ANY>
static __global__ void __launch_bounds__(TP::THREADS, 1)
    kda_two_pass_fused_kernel(kda_params p, void *ws, int64_t state_blocks, int64_t head_slots) {
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    int *flags = flags_of(ws, p.T, p.N, p.H);
    if ((int64_t)blockIdx.x < state_blocks) {
        state_pass<RECORDS, ANY>(p, ws, flags, head_slots, blockIdx.x,
                               *(pass_smem<RECORDS> *)smem_bytes);
        return;
    }
    prepare_smem &s = *(prepare_smem *)smem_bytes;
    const int64_t workers = gridDim.x - state_blocks, items = sp_kda_two_pass_slots_(p.T, p.N) * p.H;
    for (int64_t j = head_slots * p.H + (blockIdx.x - state_blocks); j < items; j += workers) {
        prepare_record<TP::THREADS, ANY>(p, ws, j / p.H, j % p.H, s);
        __syncthreads(); /* the block's stores of the record are done; shared memory is free */
        if (threadIdx.x == 0) {
            __threadfence();
            sp_flag_release_(&flags[j], 1);
        }
    }
}

static_assert(offsetof(pass_smem<2>, ops) == 32 && offsetof(pass_smem<4>, ops) == 32,
              "the records' offset in shared memory");
static_assert(sizeof(pass_smem<4>) <= 227 * 1024 && 2 * sizeof(pass_smem<2>) <= 227 * 1024,
              "a block's shared memory on sm_90 (with two records, two blocks)");

/* The one kernel's shared memory: a state-pass block's or a preparing one's. */
template <int RECORDS> static constexpr size_t fused_smem(void) {
    return sizeof(pass_smem<RECORDS>) > sizeof(prepare_smem) ? sizeof(pass_smem<RECORDS>)
                                                         : sizeof(prepare_smem);
}

extern "C" size_t sp_kda_chunked_smem_bytes_(void) {
    size_t m = sp_kda_chunked_one_pass_smem_bytes_();
    if (fused_smem<4>() > m) m = fused_smem<4>();
    return m;
}

template <int RECORDS, int ANY>
static cudaError_t launch_pass(const kda_params *p, const void *ws, cudaStream_t stream) {
    const int bytes = (int)sizeof(pass_smem<RECORDS>);
    const void *kernel = (const void *)kda_state_pass_kernel<RECORDS, ANY>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess) return e;
    void *args[] = {(void *)p, &ws};
    return cudaLaunchKernel(kernel, dim3((unsigned)(p->N * p->H * TP::BLOCKS_PER_PAIR)),
                            dim3((unsigned)(TP::THREADS)), args, (size_t)bytes, stream);
}

/* Sets the one kernel's shared memory (*bytes) and gives the kernel. */
template <int RECORDS, int ANY> static cudaError_t fused_kernel(const void **kernel, int *bytes) {
    *bytes = (int)fused_smem<RECORDS>();
    *kernel = (const void *)kda_two_pass_fused_kernel<RECORDS, ANY>;
    return cudaFuncSetAttribute(*kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, *bytes);
}

/* Blocks of the one kernel a multiprocessor holds, of each build with two
 * and four records in flight; 0 where the device has no cooperative launch. */
extern "C" sp_status sp_kda_two_pass_device_facts_(sp_cuda_device *d) {
    const void *kernel[4]; /* [2 * build + (records == 4)], as the table's */
    int bytes[4];
    SP_CUDA_CHECK((fused_kernel<2, 0>(&kernel[0], &bytes[0])));
    SP_CUDA_CHECK((fused_kernel<4, 0>(&kernel[1], &bytes[1])));
    SP_CUDA_CHECK((fused_kernel<2, 1>(&kernel[2], &bytes[2])));
    SP_CUDA_CHECK((fused_kernel<4, 1>(&kernel[3], &bytes[3])));
    for (int i = 0; i < 4; i++) {
        int *per_sm = &d->kda_fused_per_sm[i / 2][i % 2];
        *per_sm = 0;
        if (d->cooperative)
            SP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kernel[i],
                                                                        TP::THREADS, bytes[i]));
    }
    return SP_OK;
}

/* The state pass with the records from head_slots on prepared beside it,
 * where every state-pass block and at least one preparing block are
 * resident together; else *launched = 0 and nothing is done. */
template <int RECORDS, int ANY>
static cudaError_t launch_fused(const kda_params *p, void *ws, int64_t head_slots,
                                const sp_cuda_device *dev, cudaStream_t stream, int *launched) {
    *launched = 0;
    const int per_sm = dev->kda_fused_per_sm[ANY][RECORDS == 4];
    if (per_sm < 1) return cudaSuccess;
    int64_t state_blocks = p->N * p->H * TP::BLOCKS_PER_PAIR;
    const int64_t resident = (int64_t)per_sm * dev->sms;
    if (state_blocks >= resident) return cudaSuccess;
    const void *kernel;
    int bytes;
    cudaError_t e = fused_kernel<RECORDS, ANY>(&kernel, &bytes);
    if (e != cudaSuccess) return e;
    const int64_t slots = sp_kda_two_pass_slots_(p->T, p->N), items = slots * p->H;
    int *flags = flags_of(ws, p->T, p->N, p->H);
    int64_t clear_from = head_slots * p->H;
    void *prep_args[] = {(void *)p, &ws, &flags, &clear_from, (void *)&items};
    e = cudaLaunchKernel(prepare_kernel(p), dim3((unsigned)(head_slots * p->H)),
                         dim3(TP::PREP_THREADS), prep_args, sizeof(prepare_smem), stream);
    if (e != cudaSuccess) return e;
    void *args[] = {(void *)p, &ws, &state_blocks, &head_slots};
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)resident);
    cfg.blockDim = dim3((unsigned)(TP::THREADS));
    cfg.dynamicSmemBytes = (size_t)bytes;
    cfg.stream = stream;
    cudaLaunchAttribute coop[1];
    coop[0].id = cudaLaunchAttributeCooperative; /* every block resident at once */
    coop[0].val.cooperative = 1;
    cfg.attrs = coop;
    cfg.numAttrs = 1;
    e = cudaLaunchKernelExC(&cfg, kernel, args);
    *launched = e == cudaSuccess;
    return e;
}

/* The plan's kernels of the build ANY (the every-gate build's for 1). */
template <int ANY>
static cudaError_t launch_two_pass(const kda_params *p, const sp_kda_plan *plan, void *workspace,
                                   const sp_cuda_device *dev, cudaStream_t stream) {
    const int prep_smem = (int)sizeof(prepare_smem);
    const void *prepare = prepare_kernel(p);
    cudaError_t e =
        cudaFuncSetAttribute(prepare, cudaFuncAttributeMaxDynamicSharedMemorySize, prep_smem);
    if (e != cudaSuccess) return e;
    const int64_t slots = sp_kda_two_pass_slots_(p->T, p->N), head_slots = plan->head_slots;
    const int records = plan->records;
    if (slots * p->H > INT32_MAX) return cudaErrorInvalidConfiguration; /* a prepare block a record */
    if (head_slots > 0 && head_slots < slots) {
        int launched = 0;
        e = records == 2 ? launch_fused<2, ANY>(p, workspace, head_slots, dev, stream, &launched)
                         : launch_fused<4, ANY>(p, workspace, head_slots, dev, stream, &launched);
        if (e != cudaSuccess || launched) return e;
    }
    int *no_flags = NULL;
    int64_t zero = 0;
    void *prep_args[] = {(void *)p, &workspace, &no_flags, &zero, &zero};
    e = cudaLaunchKernel(prepare, dim3((unsigned)(slots * p->H)), dim3(TP::PREP_THREADS),
                         prep_args, (size_t)prep_smem, stream);
    if (e != cudaSuccess) return e;
    return records == 2 ? launch_pass<2, ANY>(p, workspace, stream)
                        : launch_pass<4, ANY>(p, workspace, stream);
}

extern "C" cudaError_t sp_kda_launch_chunked_two_pass_(const kda_params *p, const sp_kda_plan *plan,
                                                       void *workspace, const sp_cuda_device *dev,
                                                       cudaStream_t stream) {
    return p->any_gate ? launch_two_pass<1>(p, plan, workspace, dev, stream)
                       : launch_two_pass<0>(p, plan, workspace, dev, stream);
}
