/*
 * two_pass_records.cuh — the two-pass KDA prefill's records
 * (chunked_two_pass.cu): its kernels' sizes, where chunk c of sequence n
 * keeps its record (chunk_ops) and flag in the workspace, and the writing of
 * one record (the K side of one chunk, chunk_k.cuh), by either kernel that
 * prepares them.
 *
 * Record slots: chunk c of sequence n goes to slot floor(bos_n / 32) + n + c.
 * Slots of different sequences are distinct and fewer than floor(T / 32) + N
 * (a sequence of L tokens from bos ends before slot floor((bos + L) / 32) +
 * n + 1, the next one's first), so the workspace holds
 * (floor(T / 32) + N) * H records of SP_KDA_TWO_PASS_RECORD_BYTES, then as
 * many 4-byte flags.
 */
#ifndef SP_KDA_CUDA_TWO_PASS_RECORDS_CUH
#define SP_KDA_CUDA_TWO_PASS_RECORDS_CUH

#include "kda/cuda/chunk_k.cuh"
#include "kda/cuda/chunk_safe.cuh"

#include <stddef.h>

/* The sizes: the prepare kernel's block, and the state pass's blocks of
 * ROW_GROUPS groups of COL_WARPS warps owning ROWS V rows of one (sequence,
 * head), each group 16 of the rows, each warp of a group COLS of the K
 * columns. */
struct two_pass_traits {
    static constexpr int PREP_THREADS = 256;
    static constexpr int COL_WARPS = 4;
    /* One row group a block: two lost to one (docs/TUNING.md,
     * "TWO_PASS_ROW_GROUPS"). */
    static constexpr int ROW_GROUPS = 1;
    static constexpr int ROWS = 16 * ROW_GROUPS;
    static constexpr int THREADS = 32 * COL_WARPS * ROW_GROUPS;
    static constexpr int COLS = DIM / COL_WARPS;
    static constexpr int BLOCKS_PER_PAIR = DIM / ROWS;
    /* V's row pitch in shared memory: 16 bytes more than the block's rows,
     * so that the transposing loads of 8 token rows (solve_w) hit distinct
     * banks (at 32 bytes a row they took twice the wavefronts, ncu). */
    static constexpr int V_PITCH = ROWS + 8;
    static constexpr int PART_PITCH = CHUNK + 8; /* partial products: float2 stores conflict-free */
    static constexpr int OUT_PITCH = 24;         /* output staging: 16-bit stores conflict-free */
};
typedef two_pass_traits TP;
static_assert(TP::BLOCKS_PER_PAIR == SP_KDA_TWO_PASS_BLOCKS_PER_PAIR, "the plan's block count");
static_assert(TP::COL_WARPS * 8 >= CHUNK, "a group's warps store 8 output tokens each");

static_assert(sizeof(chunk_ops) == SP_KDA_TWO_PASS_RECORD_BYTES, "record size");
static_assert(sizeof(chunk_ops) % 16 == 0, "records are copied in 16-byte pieces");
static_assert(offsetof(chunk_ops, t) % 16 == 0 && offsetof(chunk_ops, b) % 16 == 0,
              "T's rows are stored in 16-byte pieces of their own");

/* The record of (slot, head h): written by the prepare kernel, read by
 * the state pass. */
static __device__ __forceinline__ chunk_ops *record_of(const void *ws, int64_t slot, int64_t H,
                                                       int64_t h) {
    return (chunk_ops *)ws + (slot * H + h);
}

/* The flags of the one-kernel form, one per record, after the records. */
static __host__ __device__ __forceinline__ int *flags_of(void *ws, int64_t T, int64_t N,
                                                         int64_t H) {
    return (int *)((chunk_ops *)ws + sp_kda_two_pass_slots_(T, N) * H);
}

static __device__ __forceinline__ int64_t first_slot(int64_t bos, int64_t n) {
    return bos / CHUNK + n;
}

/* The chunk (sequence *n, chunk *c) stored at `slot`: the last sequence
 * whose first slot is at or before it. 0 when the slot holds none. */
static __device__ int chunk_at(const kda_params &p, int64_t slot, int64_t *n, int64_t *c) {
    int64_t lo = 0, hi = p.N - 1, found = -1;
    while (lo <= hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (first_slot(sp_index_at_(p.ix.cu, mid), mid) <= slot)
            found = mid, lo = mid + 1;
        else
            hi = mid - 1;
    }
    if (found < 0) return 0;
    *n = found;
    *c = slot - first_slot(sp_index_at_(p.ix.cu, found), found);
    return 1;
}

/* ---- writing a record ------------------------------------------------------ */

typedef struct prepare_smem {
    raw_chunk raw;
    chunk_work work;
    chunk_ops ops;
} prepare_smem;

/* An f32 g's rows, copied in with k and q: over Lk and Lq, which only the
 * operands write, after every thread has read its gates (gates_and_norms,
 * then a barrier). */
static __device__ __forceinline__ float *g32_staged(prepare_smem &s) {
    static_assert(offsetof(prepare_smem, ops) % 16 == 0 && offsetof(chunk_ops, lk) == 0 &&
                      offsetof(chunk_ops, lq) == sizeof(s.ops.lk) &&
                      sizeof(s.ops.lk) + sizeof(s.ops.lq) >= CHUNK * DIM * sizeof(float),
                  "CHUNK rows of DIM floats over Lk and Lq, 16-byte aligned");
    return (float *)&s.ops.lk[0][0];
}

/* The record of chunk `slot`, head h, by threads 0 .. NT - 1 of the block
 * (the last warp solves for T); nothing where the slot holds no chunk.
 * The gates' running sums and the norms are added as TP::PREP_THREADS threads
 * add them, whatever NT (each thread then takes TP::PREP_THREADS / NT of their
 * places), so that a record has the same bits whichever kernel wrote it.
 * ANY: the build's gates (chunk_k.cuh). */
template <int NT, int ANY>
static __device__ __forceinline__ void prepare_record(const kda_params &p, void *ws, int64_t slot,
                                                      int64_t h, prepare_smem &s) {
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    int64_t n, c;
    kda_seq sq;
    if (!chunk_at(p, slot, &n, &c) || !kda_seq_of(p, n, h, &sq) || c * CHUNK >= sq.len) return;
    const int64_t c0 = c * CHUNK;
    const int nt = (int)(sq.len - c0 < CHUNK ? sq.len - c0 : CHUNK);

    load_kqg<NT>(p, sq, h, c0, tid, s.raw, !g_is_f32<ANY>(p));
    if (g_is_f32<ANY>(p)) load_g_f32_to<NT, 0>(p, sq, h, c0, tid, sp_smem_addr_(g32_staged(s)));
    sp_cp_async_commit_();
    const float expA = expf(p.A_log[h]);
    const float2 bias = pair_bias(p, h, tid);
    const uint32_t beta_x = w == 0 && lane < nt ? beta_in<ANY>(p, sq.bos + c0 + lane, h) : 0u;
    sp_cp_async_wait_<0>();
    __syncthreads();
    constexpr int E = TP::PREP_THREADS / NT; /* places a thread takes */
    static_assert(E * NT == TP::PREP_THREADS, "NT divides TP::PREP_THREADS");
    float gam[E][2][kside<TP::PREP_THREADS>::SEG];
    int far = 0;
#pragma unroll
    for (int e = 0; e < E; e++)
        far |= gates_and_norms<TP::PREP_THREADS, ANY>(p, s.raw,
                                                      g_is_f32<ANY>(p) ? g_f32_rows_at(g32_staged(s))
                                                                       : g32_rows{},
                                                      nt,
                                                      tid + e * NT, expA, bias,
                                                      e == 0 ? beta_x : 0u, s.work, s.ops,
                                                      gam[e]);
    int safe = 0;
    if constexpr (ANY)
        safe = __syncthreads_or(far);
    else
        __syncthreads();
    if (!safe) {
#pragma unroll
        for (int e = 0; e < E; e++)
            operands<TP::PREP_THREADS>(s.raw, tid + e * NT, s.work, gam[e], s.ops);
        __syncthreads();
        intra_products<NT>(w, lane, s.work, s.ops);
    } else { /* the safe form (chunk_k.cuh) */
        pair_sums m[E];
#pragma unroll
        for (int e = 0; e < E; e++)
            m[e] = safe_sums<TP::PREP_THREADS>(tid + e * NT, s.work, gam[e], s.ops);
        __syncthreads();
        float ka[safe_pairs<NT>::EACH], qa[safe_pairs<NT>::EACH];
        safe_products<NT>(tid, s.raw, s.ops, ka, qa);
        __syncthreads();
        safe_store<NT>(tid, ka, qa, s.work, s.ops);
#pragma unroll
        for (int e = 0; e < E; e++)
            safe_operands<TP::PREP_THREADS>(s.raw, tid + e * NT, s.work, gam[e], m[e], s.ops);
    }
    if (ANY && tid == 0) chunk_form(s.ops) = (float)safe;
    __syncthreads();
    /* The record: T's rows by the warp that solves for them, the rest by the
     * other warps meanwhile. */
    const float4 *from = (const float4 *)&s.ops;
    float4 *to = (float4 *)record_of(ws, first_slot(sq.bos, n) + c, p.H, h);
    const int t_lo = (int)(offsetof(chunk_ops, t) / 16), t_hi = (int)(offsetof(chunk_ops, b) / 16);
    if (w == NT / 32 - 1) {
        solve_t(lane, s.work, s.ops);
        __syncwarp();
        for (int i = t_lo + lane; i < t_hi; i += 32) to[i] = from[i];
    } else {
        const int n16 = (int)(sizeof(chunk_ops) / 16), others = NT - 32;
        for (int i = tid; i < n16 - (t_hi - t_lo); i += others) {
            const int j = i < t_lo ? i : i + (t_hi - t_lo);
            to[j] = from[j];
        }
    }
}

#endif /* SP_KDA_CUDA_TWO_PASS_RECORDS_CUH */
