/*
 * chunk_k.cuh — the K side of a chunk (chunk.cuh has the math): copying in
 * its k, q, g (and v), the gates and their running sums, the norms and
 * beta, the operands Lk, Lq, R, the products A and QK of the factored form
 * (the safe form's: chunk_safe.cuh), and T = (I + A)^-1.
 * Its functions take NT, the number of threads that run them together
 * (threads 0 .. NT - 1 of the block, NT 128 or 256: see kside), except the
 * solve for T, one warp's.
 */
#ifndef SP_KDA_CUDA_CHUNK_K_CUH
#define SP_KDA_CUDA_CHUNK_K_CUH

#include "kda/cuda/chunk.cuh"

/* Start copying 16-byte pieces of `rows` rows of one input, NT / 16 rows
 * apart from the thread's first, row `first_row` of the chunk: the piece
 * at column col of each row (src: that row of the sequence's token c0 +
 * first_row) into shared memory from dst (NT / 16 rows of DIM elements
 * apart). Rows past the sequence's end are zero-filled, read from the
 * sequence's first row (no byte of which the copy reads). */
template <int NT, int ROWS>
static __device__ __forceinline__ void load_pieces(const kda_input &x, const kda_seq &sq, int64_t h,
                                                   int64_t c0, int first_row, int col,
                                                   int64_t left, unsigned dst) {
    const uint16_t *first = kda_row(x, sq.bos, h) + col;
    const uint16_t *row = first + (c0 + first_row) * x.ts;
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        const int ok = (NT / 16) * i < left;
        sp_cp_async16_fill_to_(dst + i * (NT / 16) * DIM * 2, ok ? row + i * (NT / 16) * x.ts : first,
                               ok ? 16 : 0);
    }
}

/* Start copying tokens c0 .. c0+31 of k, q and g (each row of 128 read in
 * place: 16-byte aligned wherever the tensor's strides put it) into dst: thread tid the
 * 16-byte piece tid % 16 of rows tid / 16, tid / 16 + NT / 16, ... Rows past
 * the sequence's end are zero-filled (the copy reads no byte for them).
 * with_g 0: g is f32, copied apart (load_g_f32_to). */
template <int NT>
static __device__ __forceinline__ void load_kqg(const kda_params &p, const kda_seq &sq, int64_t h,
                                                int64_t c0, int tid, raw_chunk &dst,
                                                int with_g) {
    const int row0 = tid >> 4, col = (tid & 15) * 8;
    const int64_t left = sq.len - c0 - row0; /* this thread's rows before the end */
    constexpr int ROWS = CHUNK * 16 / NT;
    load_pieces<NT, ROWS>(p.k, sq, h, c0, row0, col, left, sp_smem_addr_(&dst.k[row0][col]));
    load_pieces<NT, ROWS>(p.q, sq, h, c0, row0, col, left, sp_smem_addr_(&dst.q[row0][col]));
    if (with_g)
        load_pieces<NT, ROWS>(p.g, sq, h, c0, row0, col, left, sp_smem_addr_(&dst.g[row0][col]));
}

/* Start copying columns v0 .. v0+bv-1 of v's tokens c0 .. c0+31 into
 * dst[t][0 .. bv) (row pitch `pitch` elements), zero-filled past the end;
 * `threads` threads (a multiple of bv / 8), each every threads-th 16-byte
 * piece: a fixed column, rows threads / (bv / 8) apart. */
static __device__ __forceinline__ void load_v(const kda_params &p, const kda_seq &sq, int64_t h,
                                              int64_t c0, int v0, int bv, int tid, int threads,
                                              uint16_t *dst, int pitch) {
    const int lg = __ffs(bv / 8) - 1; /* bv / 8 pieces a row, a power of two */
    const int t0 = tid >> lg, col = (tid & ((1 << lg) - 1)) * 8, dt = threads >> lg;
    const uint16_t *first = kda_row(p.v, sq.bos, h) + v0 + col;
    const uint16_t *row = first + (c0 + t0) * p.v.ts;
    const int64_t step = dt * p.v.ts, left = sq.len - c0;
    unsigned to = sp_smem_addr_(dst + t0 * pitch + col);
    for (int t = t0; t < CHUNK; t += dt, row += step, to += dt * pitch * 2) {
        const int ok = t < left;
        sp_cp_async16_fill_to_(to, ok ? row : first, ok ? 16 : 0);
    }
}

/* Sums of N values over a warp at once (N a power of two up to 32): each
 * exchange step (lane bit OFF) halves the values a lane holds, keeping the
 * half its lane bit selects plus the partner's, so N - 1 + log2(32 / N)
 * shuffles instead of 5 N; then v[0] of lanes (32 / N) m .. + 32 / N - 1
 * is the sum of value m. */
template <int N, int OFF>
static __device__ __forceinline__ void warp_sums(float *v, int lane) {
    if constexpr (OFF > 0) {
        if constexpr (N > 1) {
            const int upper = lane & OFF;
#pragma unroll
            for (int j = 0; j < N / 2; j++) {
                const float lo = v[j], hi = v[N / 2 + j];
                v[j] = (upper ? hi : lo) + __shfl_xor_sync(SP_KDA_FULL_MASK, upper ? lo : hi, OFF);
            }
            warp_sums<N / 2, OFF / 2>(v, lane);
        } else {
            v[0] += __shfl_xor_sync(SP_KDA_FULL_MASK, v[0], OFF);
            warp_sums<1, OFF / 2>(v, lane);
        }
    }
}

/* ---- the K side of a chunk (every warp) ---------------------------------------- */

/* The K side's threads work on channel pairs: thread tid of NT takes
 * channels 2c, 2c + 1 (c = tid % 64) over the tokens of segment tid / 64,
 * one of NSEG segments of SEG tokens; the reference token ends one of
 * them. */
template <int NT> struct kside {
    static constexpr int NSEG = NT / (DIM / 2), SEG = CHUNK / NSEG, REF_SEG = REF_TOKEN / SEG;
    static_assert(NSEG * SEG == CHUNK && (REF_TOKEN + 1) % SEG == 0 && NSEG <= 4,
                  "segments tile the chunk and one ends at the reference token");
};

/* The dt_bias of thread tid's two channels, head h. */
static __device__ __forceinline__ float2 pair_bias(const kda_params &p, int64_t h, int tid) {
    const float *b = p.dt_bias + h * DIM + 2 * (tid % (DIM / 2));
    return make_float2(b[0], b[1]);
}

/* ---- a chunk's gates and betas ---------------------------------------------- */

/* The builds: K3 (ANY = 0: the lower-bound gate, beta bf16 logits, every
 * chunk factored) and every gate (the call's gate and beta forms, g bf16 or
 * f32, each chunk factored or safe as its gates allow; chunk.cuh). The
 * plan's every_gate picks the build. The every-gate build reads the beta
 * form at run time, and the gate form and g's dtype either at run time
 * (ANY = 1: the two-pass one kernel's preparing blocks, the host
 * emulation) or fixed at compile time (ANY = any_fixed(form, g32): the
 * one-pass kernel and the two-pass prepare kernel, one instance each; the
 * benchmark's probes), the same arithmetic. */
static constexpr int any_fixed(int form, int g32) { return 2 + 2 * form + g32; }
static_assert(SP_KDA_GATE_LOWER_BOUND == 0 && SP_KDA_GATE_SOFTPLUS == 1 &&
                  SP_KDA_GATE_LOG_DECAY == 2,
              "any_fixed's forms are sp_kda_gate's values");
template <int ANY> struct gate_build {
    static constexpr int FIXED = ANY >= 2;
    static constexpr int FORM = FIXED ? (ANY - 2) >> 1 : -1, G32 = FIXED ? (ANY - 2) & 1 : -1;
};

/* f(gates<ANY>()) for the build a call's gates take: K3's (ANY = 0,
 * p->any_gate 0), or the every-gate instance of its gate form and g dtype
 * (g is f32 with the log-decay only, the check's rule): the launchers'
 * one choice of instance (the one-pass kernel, the two-pass prepare
 * kernel). */
template <int ANY> struct gates {
    static constexpr int value = ANY;
};
template <typename F> static auto with_call_gates(const kda_params *p, F &&f) {
    if (!p->any_gate) return f(gates<0>());
    if (p->gate == SP_KDA_GATE_LOWER_BOUND)
        return f(gates<any_fixed(SP_KDA_GATE_LOWER_BOUND, 0)>());
    if (p->gate == SP_KDA_GATE_SOFTPLUS) return f(gates<any_fixed(SP_KDA_GATE_SOFTPLUS, 0)>());
    return p->g_f32 ? f(gates<any_fixed(SP_KDA_GATE_LOG_DECAY, 1)>())
                    : f(gates<any_fixed(SP_KDA_GATE_LOG_DECAY, 0)>());
}

/* Each token's decay is floored at 2^-GATE_FLOOR (log2 units): fp32 flushes
 * it to zero, a total forgetting, which -inf means; the floor keeps running
 * sums finite. (A log-decay above 0 is outside the contract: the factored
 * form's bound assumes decays.) */
static constexpr float GATE_FLOOR = 128.0f;

/* softplus(y) log2(e) = log2(1 + 2^u) for u = y log2(e), as max(u, 0) +
 * log2(1 + 2^-|u|): two special-function instructions and three others,
 * within about 2^-21 absolute of the exact value for every u (ex2's and
 * lg2's errors, the rounding of 1 + 2^-|u|) besides the sum's rounding: u
 * itself for large u, 0 where 1 + 2^-|u| rounds to 1. An absolute bound
 * is the one a log-decay needs, the decay being its power of two: a
 * relative one on tiny gates took a series and two selects, on the K side
 * that bounds the one-pass kernel (docs/TUNING.md, "CHUNKED_EVERY_GATE"). */
static SP_HD __forceinline__ float softplus_log2(float u) {
    return fmaxf(u, 0.0f) + sp_lg2_ftz_(1.0f + sp_ex2_ftz_(-fabsf(u)));
}

/* A channel's gate in log2 units (times log2(e), for ex2) from its raw g
 * input x; h: which of the thread's two channels. The lower-bound gate as
 * lb2 / (1 + 2^(nl x + nlb)): lb2 = lower_bound log2(e), nl = -expA log2(e),
 * nlb = nl dt_bias. The every-gate build: the call's form (the softplus
 * gate by softplus_log2, the log-decay as given), FLOORED (by gate_sums). */
template <int ANY> struct chunk_gate {
    static constexpr bool FLOORED = ANY != 0;
    float nl, nlb[2], lb2, expA, bl2[2]; /* bl2: dt_bias log2(e) */
    int gate;
    SP_HD __forceinline__ chunk_gate(const kda_params &p, float expA_, float2 b) {
        nl = -expA_ * SP_LOG2E, lb2 = p.lower_bound * SP_LOG2E;
        nlb[0] = nl * b.x, nlb[1] = nl * b.y;
        expA = expA_, bl2[0] = b.x * SP_LOG2E, bl2[1] = b.y * SP_LOG2E, gate = p.gate;
    }
    SP_HD __forceinline__ float operator()(float x, int h) const {
        const int form = gate_build<ANY>::FIXED ? gate_build<ANY>::FORM : gate;
        if (!ANY || form == SP_KDA_GATE_LOWER_BOUND)
            return lb2 * sp_rcp_ftz_(1.0f + sp_ex2_ftz_(fmaf(x, nl, nlb[h])));
        if (form == SP_KDA_GATE_SOFTPLUS) return -expA * softplus_log2(fmaf(x, SP_LOG2E, bl2[h]));
        return x * SP_LOG2E;
    }
};

/* Token t's beta input as stored (bf16 in the low half: K3's, or f32 bits),
 * read a chunk ahead and made a number where it is used (beta_of): made at
 * the load, the one-pass kernel's K warp 0 waited there for it. */
template <int ANY>
static __device__ __forceinline__ uint32_t beta_in(const kda_params &p, int64_t t, int64_t h) {
    if (ANY) return kda_in_bits(p.beta, p.beta_f32, t, h, 0);
    return *kda_row(p.beta, t, h);
}

/* Where gates_and_norms reads an f32 g (every-gate builds with the
 * log-decay in f32; at NULL elsewhere: g is bf16, copied in with k and q,
 * or the build is K3's): the row of the chunk's token t at at + t ts, plus
 * hop for t from split on; channel 0 first. A thread's segment lies on one
 * side of split (a multiple of its length). Every row of the chunk is
 * there, 0 past the sequence's end (staged by load_g_f32_to). */
typedef struct g32_rows {
    const float *at;
    int64_t ts;
    int split, hop;
    SP_HD __forceinline__ const float *segment(int t0) const {
        return at + (int64_t)t0 * ts + (t0 < split ? 0 : hop);
    }
} g32_rows;

/* Whether a build's call has an f32 g (compile-time where the build is one
 * form's). */
template <int ANY> static __device__ __forceinline__ int g_is_f32(const kda_params &p) {
    return gate_build<ANY>::FIXED ? gate_build<ANY>::G32 == 1 : ANY && p.g_f32;
}

/* An f32 g's row of token t (of the batch), head h: channel 0. */
static __device__ __forceinline__ const float *g_f32_row(const kda_params &p, int64_t t, int64_t h) {
    return (const float *)p.g.at + sp_kda_at_(p.g.ts, p.g.hs, t, h);
}

/* The one-pass kernel's f32 g: in shared memory, where a chunk's bf16 g
 * would be (the two raw buffers' g, half the chunk's tokens each), one
 * chunk at a time. */
static constexpr int G32_HOP = (int)(sizeof(raw_chunk) / sizeof(float)) - CHUNK / 2 * DIM;
static __device__ __forceinline__ g32_rows g_f32_staged(const raw_chunk *raw) {
    static_assert(sizeof(raw[0].g) == CHUNK / 2 * DIM * sizeof(float), "half a chunk of f32 g a buffer");
    return g32_rows{(const float *)&raw[0].g[0][0], DIM, CHUNK / 2, G32_HOP};
}

/* The two-pass prepare kernel's f32 g: rows of DIM floats in shared
 * memory from `at`, the chunk's tokens in order. */
static __device__ __forceinline__ g32_rows g_f32_rows_at(const float *at) {
    return g32_rows{at, DIM, CHUNK, 0};
}

/* Start copying the f32 g of tokens c0 .. c0 + 31 of head h into shared
 * memory from dst: token t's row at dst + t DIM floats, plus HOP for the
 * second half of the chunk (G32_HOP: the one-pass kernel's staged rows,
 * g_f32_staged; 0: rows in order, g_f32_rows_at). 16-byte pieces by NT
 * threads (the chunked kernels read g's rows at 16-byte aligned addresses:
 * sp_kda_reads_in_place), zero-filled past the end. */
template <int NT, int HOP>
static __device__ __forceinline__ void load_g_f32_to(const kda_params &p, const kda_seq &sq, int64_t h,
                                                     int64_t c0, int tid, unsigned dst_base) {
    /* Thread tid: the piece col of tokens t0 + TPK k, k = 0 .. CHUNK / TPK - 1,
     * each on a side of CHUNK / 2 known at compile time: g32_rows::segment's
     * places, its side test on TPK k (t0 < TPK), not on the token (through
     * segment() ptxas spills more in the f32 instances). */
    constexpr int ROW = DIM / 4, TPK = NT / ROW; /* 16-byte pieces a row, rows a step */
    static_assert(NT % ROW == 0 && (CHUNK / 2) % TPK == 0, "whole rows a step, a half in whole steps");
    const int t0 = tid / ROW, col = 4 * (tid % ROW);
    const float *first = g_f32_row(p, sq.bos, h);
    const float *src = first + (c0 + t0) * p.g.ts + col;
    const int64_t step = (int64_t)TPK * p.g.ts, left = sq.len - c0 - t0;
    const unsigned dst = dst_base + 4u * (unsigned)(t0 * DIM + col);
#pragma unroll
    for (int k = 0; k < CHUNK / TPK; k++) {
        const int ok = TPK * k < left;
        const unsigned to = dst + 4u * (unsigned)(TPK * k * DIM + (TPK * k < CHUNK / 2 ? 0 : HOP));
        sp_cp_async16_fill_to_(to, ok ? src + k * step : first, ok ? 16 : 0);
    }
}

/* b from the beta input (bits, beta_in): its sigmoid (K3), or by the
 * call's form. */
template <int ANY> static __device__ __forceinline__ float beta_of(const kda_params &p, uint32_t bits) {
    if (ANY) return sp_kda_beta_f32_(p.beta_form, sp_kda_bits_f32_(bits, p.beta_f32));
    return 1.0f / (1.0f + __expf(-sp_bf16_to_f32_((uint16_t)bits)));
}

/* The factored form's bound (chunk.cuh): each channel's decay over each
 * segment at most FACTORED_MAX_DECAY nats a token, the lower-bound gate's
 * bound, so that over either half of the chunk every factor stays within
 * e^(+-80). Whether a thread's two channels leave it, from their sums over
 * its segment (log2 units). */
static constexpr float FACTORED_MAX_DECAY = 5.0f;
template <int SEG> static SP_HD __forceinline__ int out_of_range(const float sum[2]) {
    return fminf(sum[0], sum[1]) < -(float)SEG * FACTORED_MAX_DECAY * SP_LOG2E;
}

/* A token's g inputs of two channels: a bf16 pair, or two floats. */
static SP_HD __forceinline__ float g_lo(uint32_t x) { return sp_bf16x2_lo_(x); }
static SP_HD __forceinline__ float g_hi(uint32_t x) { return sp_bf16x2_hi_(x); }
static SP_HD __forceinline__ float g_lo(float2 x) { return x.x; }
static SP_HD __forceinline__ float g_hi(float2 x) { return x.y; }

/* The running sums of two channels' gates over SEG tokens (their g inputs
 * graw), those from token `valid` on taken as 0; FULL: all valid (no
 * select per token: K3's full segments; the every-gate build keeps one form,
 * gates_and_norms). A FLOORED gate (the every-gate build's) is floored, and
 * made 0 for a token past the end, by one max that keeps a NaN: every gate
 * is at most 0 or NaN, and a token past the end has g input 0 (its copy's
 * zero fill, or taken as 0), so its gate is a number at most 0. */
template <int SEG, bool FULL, typename G, typename X>
static SP_HD __forceinline__ void gate_sums(const X graw[SEG], int valid, const G gate,
                                            float gam[2][SEG], float sum[2]) {
    SP_HD_UNROLL
    for (int j = 0; j < SEG; j++) {
        const float x[2] = {g_lo(graw[j]), g_hi(graw[j])};
        const bool in = FULL || j < valid;
        SP_HD_UNROLL
        for (int h = 0; h < 2; h++) {
            const float g = gate(x[h], h);
            /* floored: a NaN stays one, as elsewhere */
            sum[h] += G::FLOORED ? sp_fmax_nan_(g, in ? -GATE_FLOOR : 0.0f) : in ? g : 0.0f;
            gam[h][j] = sum[h];
        }
    }
}

/* Thread (c, seg): the gates of its two channels over its segment's tokens
 * and their running sums from the segment's start, in log2 units (times
 * log2(e), for ex2), in gam (registers: operands() takes them on); the
 * sums at the segment's end also go to s.seg_end. Tokens past the end get
 * gate 0 (no decay). bias: the two channels' dt_bias. g from raw, or (g32.at
 * not NULL, every-gate builds) f32 from g32's rows in shared memory. Then warp w:
 * the norms of k and q of its CHUNK / (NT / 32) tokens, and warp 0 the
 * betas (lane t holds token t's input, loaded a chunk ahead). Returns
 * whether the thread's channels leave the factored form's bound (0 in K3). */
template <int NT, int ANY, typename OPS>
static __device__ __forceinline__ int gates_and_norms(const kda_params &p, const raw_chunk &raw,
                                                      const g32_rows g32, int nt, int tid,
                                                      float expA, float2 bias, uint32_t beta_x,
                                                      chunk_work &s, OPS &ops,
                                                      float gam[2][kside<NT>::SEG]) {
    constexpr int SEG = kside<NT>::SEG, TPW = CHUNK / (NT / 32);
    const int d = 2 * (tid % (DIM / 2)), seg = tid / (DIM / 2), t0 = seg * SEG;
    const chunk_gate<ANY> gate(p, expA, bias);
    float sum[2] = {0.0f, 0.0f};
    /* All the segment's gates loaded before the first is used (the
     * compiler kept only two loads in flight). */
    const int from_f32 = gate_build<ANY>::FIXED ? gate_build<ANY>::G32 : g32.at != NULL;
    if (ANY && from_f32) {
        /* f32: one 8-byte load a token from the staged rows (a token
         * past the end reads its staged 0). Unpredicated loads, and (as
         * for bf16 g) one loop form for full and partial segments:
         * predicated loads and a second, full-segment copy of the loop made
         * ptxas spill the K warps' registers, and so did the staged rows'
         * selects (docs/TUNING.md, "ONE_PASS_REGISTERS"). */
        static_assert(CHUNK / 2 % SEG == 0, "a segment in one half of the staged rows");
        float2 g2[SEG];
        const float *rows = g32.segment(t0) + d;
#pragma unroll
        for (int j = 0; j < SEG; j++) g2[j] = *(const float2 *)(rows + (int64_t)j * g32.ts);
        gate_sums<SEG, false>(g2, nt - t0, gate, gam, sum);
    } else {
        uint32_t graw[SEG];
#pragma unroll
        for (int j = 0; j < SEG; j++) graw[j] = *(const uint32_t *)&raw.g[t0 + j][d];
        if (ANY) /* one form, as for f32 g */
            gate_sums<SEG, false>(graw, nt - t0, gate, gam, sum);
        else if (t0 + SEG <= nt)
            gate_sums<SEG, true>(graw, SEG, gate, gam, sum);
        else
            gate_sums<SEG, false>(graw, nt - t0, gate, gam, sum);
    }
    *(float2 *)&s.seg_end[seg][d] = make_float2(sum[0], sum[1]);
    const int w = tid >> 5, lane = tid & 31;
    float sk[TPW], sq[TPW];
#pragma unroll
    for (int i = 0; i < TPW; i++) {
        const int t = TPW * w + i;
        const uint2 kk = *(const uint2 *)&raw.k[t][4 * lane];
        const uint2 qq = *(const uint2 *)&raw.q[t][4 * lane];
        const float k0 = sp_bf16x2_lo_(kk.x), k1 = sp_bf16x2_hi_(kk.x);
        const float k2 = sp_bf16x2_lo_(kk.y), k3 = sp_bf16x2_hi_(kk.y);
        const float q0 = sp_bf16x2_lo_(qq.x), q1 = sp_bf16x2_hi_(qq.x);
        const float q2 = sp_bf16x2_lo_(qq.y), q3 = sp_bf16x2_hi_(qq.y);
        sk[i] = fmaf(k0, k0, fmaf(k1, k1, fmaf(k2, k2, k3 * k3)));
        sq[i] = fmaf(q0, q0, fmaf(q1, q1, fmaf(q2, q2, q3 * q3)));
    }
    /* The 2 TPW sums over the warp at once (warp_sums): lanes LPV m .. LPV m
     * + LPV - 1 end with sum m. */
    constexpr int NV = 2 * TPW, LPV = 32 / NV;
    float v[NV];
#pragma unroll
    for (int i = 0; i < TPW; i++) v[i] = sk[i], v[TPW + i] = sq[i];
    warp_sums<NV, 16>(v, lane);
    if (lane % LPV == 0) {
        const int m = lane / LPV;
        if (m < TPW)
            s.rk[TPW * w + m] = rsqrtf(v[0] + (float)SP_KDA_EPS);
        else
            s.rq[TPW * w + m - TPW] = p.scale * rsqrtf(v[0] + (float)SP_KDA_EPS);
    }
    if (w == 0) ops.b[lane] = lane < nt ? beta_of<ANY>(p, beta_x) : 0.0f;
    return ANY ? out_of_range<SEG>(sum) : 0;
}

/* Thread (c, seg)'s two channels' sums over the chunk's segments: those
 * before its own (base), through the reference token (gmid), all (glast). */
template <int NT>
static SP_HD __forceinline__ void segment_sums(int tid, const chunk_work &s, float base[2],
                                               float gmid[2], float glast[2]) {
    constexpr int NSEG = kside<NT>::NSEG, REF_SEG = kside<NT>::REF_SEG;
    const int d = 2 * (tid % (DIM / 2)), seg = tid / (DIM / 2);
    SP_HD_UNROLL
    for (int k = 0; k < NSEG; k++) {
        const float2 e = *(const float2 *)&s.seg_end[k][d];
        if (k == seg) base[0] = glast[0], base[1] = glast[1];
        glast[0] += e.x, glast[1] += e.y;
        if (k == REF_SEG) gmid[0] = glast[0], gmid[1] = glast[1];
    }
}
typedef struct pair_sums {
    float base[2], gmid[2], glast[2];
} pair_sums;

/* Lk, Lq, R for thread (c, seg)'s tokens and two channels (rounded to bf16
 * once, stored as pairs): k and q normalized times 2^(gam + base), k times
 * 2^-(gam + base) (the factored form: base refers to the reference token)
 * or 2^(glast - gam - base) (the safe form: base to the chunk's start). */
template <int NT, int SAFE, typename OPS>
static SP_HD __forceinline__ void write_operands(const raw_chunk &raw, int tid,
                                                 const chunk_work &s,
                                                 const float gam[2][kside<NT>::SEG],
                                                 const float base[2], const float glast[2],
                                                 OPS &ops) {
    constexpr int SEG = kside<NT>::SEG;
    const int d = 2 * (tid % (DIM / 2)), seg = tid / (DIM / 2), t0 = seg * SEG;
    /* Eight tokens at a time, every load before the first store: the
     * compiler may not move a shared-memory load above a store that might
     * alias it, and one warp per scheduler has no other work to hide the
     * latencies with. */
    SP_HD_UNROLL
    for (int i0 = 0; i0 < SEG; i0 += 8) {
        const int t = t0 + i0;
        const float4 rk0 = *(const float4 *)&s.rk[t], rk1 = *(const float4 *)&s.rk[t + 4];
        const float4 rq0 = *(const float4 *)&s.rq[t], rq1 = *(const float4 *)&s.rq[t + 4];
        const float rk[8] = {rk0.x, rk0.y, rk0.z, rk0.w, rk1.x, rk1.y, rk1.z, rk1.w};
        const float rq[8] = {rq0.x, rq0.y, rq0.z, rq0.w, rq1.x, rq1.y, rq1.z, rq1.w};
        uint32_t kk[8], qq[8];
        SP_HD_UNROLL
        for (int j = 0; j < 8; j++) {
            kk[j] = *(const uint32_t *)&raw.k[t + j][d];
            qq[j] = *(const uint32_t *)&raw.q[t + j][d];
        }
        SP_HD_UNROLL
        for (int j = 0; j < 8; j++) {
            const float kh[2] = {sp_bf16x2_lo_(kk[j]) * rk[j], sp_bf16x2_hi_(kk[j]) * rk[j]};
            const float qh[2] = {sp_bf16x2_lo_(qq[j]) * rq[j], sp_bf16x2_hi_(qq[j]) * rq[j]};
            float to_mid[2], from_mid[2];
            SP_HD_UNROLL
            for (int h = 0; h < 2; h++) {
                const float x = gam[h][i0 + j] + base[h];
                to_mid[h] = sp_ex2_ftz_(x);
                from_mid[h] = SAFE ? sp_ex2_ftz_(glast[h] - x) : sp_rcp_ftz_(to_mid[h]);
            }
            *(uint32_t *)op_at(ops.lk, t + j, d) = sp_bf16x2_(kh[0] * to_mid[0], kh[1] * to_mid[1]);
            *(uint32_t *)op_at(ops.lq, t + j, d) = sp_bf16x2_(qh[0] * to_mid[0], qh[1] * to_mid[1]);
            *(uint32_t *)op_at(ops.r, t + j, d) = sp_bf16x2_(kh[0] * from_mid[0], kh[1] * from_mid[1]);
        }
    }
}

/* After gates_and_norms and a barrier, the same thread (c, seg), for a
 * factored chunk: Lk, Lq, R for its tokens and two channels from its gam,
 * and the threads of segment 0 their channels' two state scalings. */
template <int NT, typename OPS>
static SP_HD __forceinline__ void operands(const raw_chunk &raw, int tid, const chunk_work &s,
                                           const float gam[2][kside<NT>::SEG],
                                           OPS &ops) {
    const int d = 2 * (tid % (DIM / 2)), seg = tid / (DIM / 2);
    /* gam is relative to the segment's start: token t's offset from the
     * reference is gam + (the earlier segments' sums) - gmid. */
    float gmid[2] = {0.0f, 0.0f}, glast[2] = {0.0f, 0.0f}, base[2] = {0.0f, 0.0f};
    segment_sums<NT>(tid, s, base, gmid, glast);
    base[0] -= gmid[0], base[1] -= gmid[1];
    if (seg == 0) {
        *(float2 *)&ops.c[d] = make_float2(sp_ex2_ftz_(gmid[0]), sp_ex2_ftz_(gmid[1]));
        *(float2 *)&ops.e[d] =
            make_float2(sp_ex2_ftz_(glast[0] - gmid[0]), sp_ex2_ftz_(glast[1] - gmid[1]));
    }
    write_operands<NT, 0>(raw, tid, s, gam, base, glast, ops);
}

/* The 16x8 tile pairs of A (strictly lower, rows scaled by beta) and QK
 * (lower): four tile-pair positions (mi, nb), warp w taking position w % 4
 * of A (w < 4) or QK (w >= 4) with eight warps, or both of position w with
 * four (they share the R operand, and four independent accumulations hide
 * the tensor cores' latency better than two). The pair right of the
 * diagonal block of rows 0..15 is zero: written without multiplying. */
template <int NT, typename OPS>
static __device__ void intra_products(int w, int lane, chunk_work &s, OPS &ops) {
    constexpr int BOTH = NT / 32 == 4;
    static_assert(NT / 32 == 4 || NT / 32 == 8, "four or eight warps");
    const int r = lane >> 2, q = lane & 3, pos = w & 3, mi = pos >> 1, nb = (pos & 1) * 2;
    const int zero_only = mi == 0 && nb == 2;
    const int first = BOTH ? 0 : w >> 2; /* 0: A, 1: QK */
    float acc[2][2][4] = {};             /* [A or QK (BOTH) / the one][tile] */
    if (!zero_only) {
        const int2 la = a_at(lane), lb = b_at(lane);
#pragma unroll 4
        for (int ks = 0; ks < DIM / 16; ks++) {
            uint32_t b[4];
            sp_ldsm_x4_<0>(op_at(ops.r, 8 * nb + lb.x, 16 * ks + lb.y), b);
#pragma unroll
            for (int m = 0; m < 1 + BOTH; m++) {
                uint32_t a[4];
                sp_ldsm_x4_<0>(op_at((first + m) ? ops.lq : ops.lk, 16 * mi + la.x, 16 * ks + la.y), a);
                sp_mma_bf16_(acc[m][0], a, b[0], b[1]);
                sp_mma_bf16_(acc[m][1], a, b[2], b[3]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < 1 + BOTH; m++) {
        const int is_qk = first + m;
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = 16 * mi + r + 8 * (e >> 1), jj = 8 * (nb + j) + 2 * q + (e & 1);
                float x = 0.0f;
                if (!zero_only && (jj < i || (is_qk && jj == i)))
                    x = is_qk ? tf32_round(acc[m][j][e]) : ops.b[i] * acc[m][j][e];
                if (is_qk)
                    ops.qk[i][jj] = x;
                else
                    s.at[jj][i] = x;
            }
    }
}

/* One warp: T = (I + A)^-1 (A strictly lower) by 16 x 16 blocks. The
 * diagonal blocks in fp32: lanes 0-15 solve column `lane` of T11 = (I +
 * A11)^-1 and lanes 16-31 column lane - 16 of T22 = (I + A22)^-1, by
 * column-oriented forward substitution (once x_k is final, every later row
 * takes its term A[i][k] x_k: one FMA per row on the dependency chain, with
 * A's columns read as float4 rows of at). Then T21 = -T22 A21 T11 on the
 * tensor cores (tf32, fp32 accumulation), as T21^T = -(T11^T A21^T) T22^T so
 * that the first product's accumulators are the second's A operand. T12 = 0. */
template <typename OPS>
static __device__ void solve_t(int lane, const chunk_work &s, OPS &ops) {
    constexpr int B = CHUNK / 2;
    const int j = lane & (B - 1), base = lane & B;
    float x[B];
#pragma unroll
    for (int i = 0; i < B; i++) x[i] = i == j ? 1.0f : 0.0f;
#pragma unroll
    for (int k = 0; k < B - 1; k++) {
        const float *col = &s.at[base + k][base]; /* column k of the block: A[base + i][base + k] */
#pragma unroll
        for (int i4 = (k + 1) & ~3; i4 < B; i4 += 4) {
            const float4 a4 = *(const float4 *)&col[i4];
            const float a[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (i4 + e > k) x[i4 + e] = fmaf(-a[e], x[k], x[i4 + e]);
        }
    }
#pragma unroll
    for (int i = 0; i < B; i++) {
        ops.t[base + i][base + j] = tf32_round(x[i]);
        if (base == 0) ops.t[i][B + j] = 0.0f;
    }
    __syncwarp();
    /* C1 = T11^T A21^T (16 x 16: two n8 tiles), k permuted as in acc_as_a:
     * k-step columns q, q + 4 are physical columns 2q, 2q + 1. */
    const int r = lane >> 2, q = lane & 3;
    float c1[2][4] = {}, c2[2][4] = {};
#pragma unroll
    for (int ks = 0; ks < 2; ks++) {
        const int k0 = 8 * ks + 2 * q;
        const uint32_t a[4] = {__float_as_uint(ops.t[k0][r]), __float_as_uint(ops.t[k0][r + 8]),
                               __float_as_uint(ops.t[k0 + 1][r]),
                               __float_as_uint(ops.t[k0 + 1][r + 8])};
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
            sp_mma_tf32_(c1[nt], a, to_tf32(s.at[k0][B + 8 * nt + r]),
                         to_tf32(s.at[k0 + 1][B + 8 * nt + r]));
    }
    /* C2 = C1 T22^T; T21[n][m] = -C2[m][n]. */
#pragma unroll
    for (int kt = 0; kt < 2; kt++) {
        uint32_t a[4];
        acc_as_a(c1[kt], a);
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            uint32_t b0, b1;
            pair(&ops.t[B + 8 * nt + r][B + 8 * kt + 2 * q], &b0, &b1);
            sp_mma_tf32_(c2[nt], a, b0, b1);
        }
    }
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            ops.t[B + 8 * nt + 2 * q + (e & 1)][r + 8 * (e >> 1)] = tf32_round(-c2[nt][e]);
}

#endif /* SP_KDA_CUDA_CHUNK_K_CUH */
