/*
 * chunked.cu — the chunked KDA prefill on tensor cores (mma.sync, tf32
 * operands, fp32 accumulation). One block per (sequence, head, slice of V
 * columns) walks its sequence 32 tokens at a time with the fp32 state in
 * registers; inside a chunk everything is matrix products (the WY form of
 * the gated delta rule with a per-channel gate):
 *
 *   gam_i  = sum of g_t over t <= i in the chunk   (per channel, fp32)
 *   A[i,j] = b_i sum_d k_i[d] k_j[d] exp(gam_i - gam_j)[d]   j < i
 *   QK[i,j] =    sum_d q_i[d] k_j[d] exp(gam_i - gam_j)[d]   j <= i
 *   T      = (I + A)^-1                        (forward substitution, fp32)
 *   W      = T diag(b) (V - Kg S0)             Kg row i = k_i exp(gam_i)
 *   o      = Qg S0 + QK W                      Qg row i = q_i exp(gam_i)
 *   S1     = diag(exp(gam_31)) S0 + Kd^T W     Kd row j = k_j exp(gam_31 - gam_j)
 *
 * (k and q already normalized, q scaled.) The products need exp(gam_i -
 * gam_j) split into a row factor and a column factor around a reference
 * token m, the 16th: Lk row i = k_i exp(gam_i - gam_m), Lq likewise from q,
 * R row j = k_j exp(gam_m - gam_j); then A = b (Lk R^T), QK = Lq R^T. Each
 * factor stays within e^(+-16 |g|max): with the lower-bound gate (|g| <= 5)
 * within e^80, which fp32 and tf32 represent, while the true products are
 * at most 1. So the kernel serves the lower-bound gate only (the softplus
 * gate has no bound; dispatch.c sends it to the recurrent kernel). The same
 * three operands serve the state: with c = exp(gam_m) and e =
 * exp(gam_31 - gam_m) per channel, Kg = Lk diag(c), Qg = Lq diag(c),
 * Kd = R diag(e) and exp(gam_31) = c e, so
 *   S' = diag(c) S0;  P = Lk S', o = Lq S' + QK W;  S1 = diag(e) (S' + R^T W)
 * and the per-channel scalings are done on the state in registers.
 *
 * The state is kept transposed, S^T (V rows x K columns), as mma
 * accumulators: each V-warp owns 16 V rows and all 128 K columns. Then
 * S^T Kg^T, S^T Qg^T, the solve with T and the update W^T Kd all take their
 * A operand straight from accumulators (an accumulator pair of columns 2c,
 * 2c+1 serves as the A operand's columns c and c+4, the B operand's rows
 * permuted alike), so the V side needs no shared memory and no barrier.
 * The K side (gates, norms, A, QK, T) is shared by the block's 8 warps.
 *
 * Shared-memory row strides are chosen so that each warp's fragment loads
 * hit 32 distinct banks: 4 mod 32 floats for scalar loads with rows
 * indexed by the lane group, 8 mod 32 for float2 loads.
 */
#include "kda/cuda/common.cuh"

#define CT 32      /* tokens per chunk */
#define MID 15     /* reference token of the factorization */
#define THREADS 256
#define WARPS (THREADS / 32)
#define D SP_KDA_D
#define SO (D + 8)  /* lk, lq, r: 8 mod 32, for float2 fragment loads */
#define SA (CT + 8) /* a, qk, t: likewise */
#define T_WARP (WARPS - 1) /* the warp that solves for T */

typedef struct raw_chunk {
    uint16_t k[CT][D], q[CT][D], g[CT][D], v[CT][D]; /* v: the block's columns first */
} raw_chunk;

typedef struct chunk_smem {
    raw_chunk raw[2]; /* this chunk's and, arriving, the next one's */
    float gam[CT][D]; /* cumulative gate, per half chunk (see gates_and_norms) */
    float lk[CT][SO], lq[CT][SO], r[CT][SO];
    float a[CT][SA], qk[CT][SA], t[CT][SA];
    float rk[CT], rq[CT], b[CT];
    float c[D], e[D]; /* exp(gam_m), exp(gam_31 - gam_m) */
} chunk_smem;

/* ---- small device helpers ---------------------------------------------- */

/* fp32 -> tf32 bits, rounded to nearest (ties away from zero): what the
 * tensor cores read of an operand is its top 19 bits. */
static __device__ __forceinline__ uint32_t to_tf32(float x) {
    return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}

static __device__ __forceinline__ float tf32_round(float x) { return __uint_as_float(to_tf32(x)); }

/* c += a b for one m16n8k8 tile (A row-major, B column-major fragments). */
static __device__ __forceinline__ void mma_tf32(float c[4], const uint32_t a[4], uint32_t b0,
                                                uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Fragments with a permuted k index: k-step columns q and q + 4 of an
 * operand are its physical columns 2q and 2q + 1 (the same permutation on
 * both operands leaves the product unchanged). Then an accumulator tile
 * (rows r, r+8; columns 2q, 2q+1) is directly the A operand of the next
 * product, and shared-memory operands load as float2. */
static __device__ __forceinline__ void acc_as_a(const float c[4], uint32_t a[4]) {
    a[0] = to_tf32(c[0]);
    a[1] = to_tf32(c[2]);
    a[2] = to_tf32(c[1]);
    a[3] = to_tf32(c[3]);
}

/* Two adjacent (already tf32) floats: b0, b1 of a B fragment, or a0, a2
 * (a1, a3) of an A fragment. */
static __device__ __forceinline__ void pair(const float *at, uint32_t *x0, uint32_t *x1) {
    const float2 x = *(const float2 *)at;
    *x0 = __float_as_uint(x.x);
    *x1 = __float_as_uint(x.y);
}

static __device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(src_bytes));
}

static __device__ __forceinline__ void cp_async_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::);
}

static __device__ __forceinline__ void cp_async_wait_all(void) {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* ---- loading a chunk --------------------------------------------------------- */

/* This thread's share of a chunk's rows: the same two token rows and
 * 16-byte piece of k, q and g every chunk, and up to two pieces of v. */
typedef struct chunk_loader {
    int row0, piece;      /* k, q, g: rows row0 and row0 + 16 */
    int vrow[2], vcol[2]; /* v: token row and element column (from v0) */
    int nv;
} chunk_loader;

static __device__ chunk_loader loader_of(int tid, int bv) {
    chunk_loader l;
    l.row0 = tid >> 4;
    l.piece = tid & 15;
    const int per_row = bv / 8, pieces = CT * per_row;
    l.nv = (tid < pieces) + (tid + THREADS < pieces); /* pieces <= 2 * THREADS */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        l.vrow[i] = (tid + i * THREADS) / per_row;
        l.vcol[i] = (tid + i * THREADS) % per_row * 8;
    }
    return l;
}

/* Start copying tokens c0 .. c0+31 into dst. Rows past the sequence's end
 * are zero-filled (the copy reads no byte for them). */
static __device__ __forceinline__ void load_chunk(const kda_params &p, const kda_seq &sq,
                                                  int64_t h, int64_t c0, int v0,
                                                  const chunk_loader &l, raw_chunk &dst) {
    const int64_t row = p.H * D, head = h * D;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int t = l.row0 + 16 * i, ok = c0 + t < sq.len;
        const int64_t at = (sq.bos + (ok ? c0 + t : 0)) * row + head + l.piece * 8;
        cp_async16(&dst.k[t][l.piece * 8], p.k + at, ok ? 16 : 0);
        cp_async16(&dst.q[t][l.piece * 8], p.q + at, ok ? 16 : 0);
        cp_async16(&dst.g[t][l.piece * 8], p.g + at, ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (i >= l.nv) break;
        const int t = l.vrow[i], ok = c0 + t < sq.len;
        const int64_t at = (sq.bos + (ok ? c0 + t : 0)) * row + head + v0 + l.vcol[i];
        cp_async16(&dst.v[t][l.vcol[i]], p.v + at, ok ? 16 : 0);
    }
}

/* ---- the K side of a chunk (every warp) ---------------------------------------- */

/* Thread (d, half): channel d's gates over tokens 16 half .. +15 and their
 * running sum from the half's start (operands() adds the first half's total
 * to the second half). Tokens past the end get gate 0 (no decay). Then
 * warp w: the norms of k and q of tokens 4w .. 4w+3, and warp 0 the beta
 * gates (lane t holds token t's logit, loaded a chunk ahead). */
static __device__ void gates_and_norms(const kda_params &p, const raw_chunk &raw, int nt,
                                       int tid, float expA, float bias, float beta_logit,
                                       chunk_smem &s) {
    const int d = tid % D, t0 = (tid / D) * (CT / 2);
    float sum = 0.0f;
#pragma unroll
    for (int t = t0; t < t0 + CT / 2; t++) {
        const float x = sp_bf16_to_f32(raw.g[t][d]) + bias;
        const float g = __fdividef(p.lower_bound, 1.0f + __expf(-expA * x));
        sum += t < nt ? g : 0.0f;
        s.gam[t][d] = sum;
    }
    const int w = tid >> 5, lane = tid & 31;
    float sk[4], sq[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int t = 4 * w + i;
        const uint2 kk = *(const uint2 *)&raw.k[t][4 * lane];
        const uint2 qq = *(const uint2 *)&raw.q[t][4 * lane];
        const float k0 = sp_bf16_to_f32((uint16_t)kk.x), k1 = sp_bf16_to_f32((uint16_t)(kk.x >> 16));
        const float k2 = sp_bf16_to_f32((uint16_t)kk.y), k3 = sp_bf16_to_f32((uint16_t)(kk.y >> 16));
        const float q0 = sp_bf16_to_f32((uint16_t)qq.x), q1 = sp_bf16_to_f32((uint16_t)(qq.x >> 16));
        const float q2 = sp_bf16_to_f32((uint16_t)qq.y), q3 = sp_bf16_to_f32((uint16_t)(qq.y >> 16));
        sk[i] = fmaf(k0, k0, fmaf(k1, k1, fmaf(k2, k2, k3 * k3)));
        sq[i] = fmaf(q0, q0, fmaf(q1, q1, fmaf(q2, q2, q3 * q3)));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            sk[i] += __shfl_xor_sync(SP_KDA_FULL_MASK, sk[i], off);
            sq[i] += __shfl_xor_sync(SP_KDA_FULL_MASK, sq[i], off);
        }
    if (lane < 4) {
        float k = sk[0], q = sq[0];
#pragma unroll
        for (int i = 1; i < 4; i++)
            if (lane == i) k = sk[i], q = sq[i];
        s.rk[4 * w + lane] = rsqrtf(k + (float)SP_KDA_EPS);
        s.rq[4 * w + lane] = p.scale * rsqrtf(q + (float)SP_KDA_EPS);
    }
    if (w == 0) s.b[lane] = lane < nt ? 1.0f / (1.0f + __expf(-beta_logit)) : 0.0f;
}

/* Every thread, channel d: Lk, Lq, R for its tokens (rounded to tf32 once
 * here), and the channel's two state scalings. */
static __device__ void operands(const raw_chunk &raw, int tid, chunk_smem &s) {
    const int d = tid % D;
    const float gmid = s.gam[MID][d], glast = gmid + s.gam[CT - 1][d];
    if (tid < D) {
        s.c[d] = __expf(gmid);
        s.e[d] = __expf(glast - gmid);
    }
#pragma unroll 4
    for (int t = tid / D; t < CT; t += THREADS / D) {
        const float kh = sp_bf16_to_f32(raw.k[t][d]) * s.rk[t];
        const float qh = sp_bf16_to_f32(raw.q[t][d]) * s.rq[t];
        const float gt = s.gam[t][d] + (t > MID ? gmid : 0.0f);
        const float to_mid = __expf(gt - gmid), from_mid = __expf(gmid - gt);
        s.lk[t][d] = tf32_round(kh * to_mid);
        s.lq[t][d] = tf32_round(qh * to_mid);
        s.r[t][d] = tf32_round(kh * from_mid);
    }
}

/* Warp w: two 16x8 tiles of A (warps 0..3) or QK (4..7), masked to the
 * lower triangle (strictly, for A) and A's rows scaled by beta. The two
 * tiles right of the diagonal block of rows 0..15 are zero: the warps that
 * own them write zeros without multiplying. */
static __device__ void intra_products(int w, int lane, chunk_smem &s) {
    const int is_qk = w >> 2, mi = (w >> 1) & 1, nb = (w & 1) * 2;
    const int r = lane >> 2, q = lane & 3;
    float(*dst)[SA] = is_qk ? s.qk : s.a;
    float acc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
    const int zero_only = mi == 0 && nb == 2;
    if (!zero_only) {
        const float(*L)[SO] = is_qk ? s.lq : s.lk;
#pragma unroll 4
        for (int ks = 0; ks < D / 8; ks++) {
            const int dk = ks * 8 + 2 * q;
            uint32_t a[4];
            pair(&L[16 * mi + r][dk], &a[0], &a[2]);
            pair(&L[16 * mi + r + 8][dk], &a[1], &a[3]);
#pragma unroll
            for (int j = 0; j < 2; j++) {
                uint32_t b0, b1;
                pair(&s.r[8 * (nb + j) + r][dk], &b0, &b1);
                mma_tf32(acc[j], a, b0, b1);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int i = 16 * mi + r + 8 * (e >> 1), jj = 8 * (nb + j) + 2 * q + (e & 1);
            float x = 0.0f;
            if (!zero_only && (jj < i || (is_qk && jj == i)))
                x = is_qk ? tf32_round(acc[j][e]) : s.b[i] * acc[j][e];
            dst[i][jj] = x;
        }
}

/* One warp, lane c: column c of T = (I + A)^-1 by forward substitution,
 * in fp32, four partial sums per row for instruction-level parallelism. */
static __device__ void solve_t(int lane, chunk_smem &s) {
    float x[CT];
#pragma unroll
    for (int i = 0; i < CT; i++) {
        float acc[4] = {i == lane ? 1.0f : 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < i; j++) acc[j & 3] = fmaf(-s.a[i][j], x[j], acc[j & 3]);
        x[i] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    }
#pragma unroll
    for (int i = 0; i < CT; i++) s.t[i][lane] = tf32_round(x[i]);
}

/* ---- the V side of a chunk (each V-warp: 16 V rows, registers only) ---------- */

/* This warp's rows of S^T from a pool (V-first: element [j][d] at j*128+d):
 * V rows vrow, vrow + 8, K columns 8nd + 2q, +1 of every n-tile nd. */
static __device__ void state_load(const void *pool, int bf16, int64_t base, int vrow, int q,
                                  float S[D / 8][4]) {
#pragma unroll
    for (int nd = 0; nd < D / 8; nd++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int64_t at = base + (int64_t)(vrow + 8 * hf) * D + 8 * nd + 2 * q;
            if (bf16) {
                const uint32_t u = *(const uint32_t *)((const uint16_t *)pool + at);
                S[nd][2 * hf] = sp_bf16_to_f32((uint16_t)u);
                S[nd][2 * hf + 1] = sp_bf16_to_f32((uint16_t)(u >> 16));
            } else {
                const float2 f = *(const float2 *)((const float *)pool + at);
                S[nd][2 * hf] = f.x;
                S[nd][2 * hf + 1] = f.y;
            }
        }
}

static __device__ void state_store(void *pool, int bf16, int64_t base, int vrow, int q,
                                   const float S[D / 8][4]) {
#pragma unroll
    for (int nd = 0; nd < D / 8; nd++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int64_t at = base + (int64_t)(vrow + 8 * hf) * D + 8 * nd + 2 * q;
            if (bf16) {
                const uint32_t u = (uint32_t)sp_f32_to_bf16(S[nd][2 * hf]) |
                                   ((uint32_t)sp_f32_to_bf16(S[nd][2 * hf + 1]) << 16);
                *(uint32_t *)((uint16_t *)pool + at) = u;
            } else {
                *(float2 *)((float *)pool + at) = make_float2(S[nd][2 * hf], S[nd][2 * hf + 1]);
            }
        }
}

/* S^T's columns times a per-channel factor (c or e). */
static __device__ __forceinline__ void scale_columns(float S[D / 8][4], const float *f, int q) {
#pragma unroll
    for (int nd = 0; nd < D / 8; nd++) {
        const float2 x = *(const float2 *)&f[8 * nd + 2 * q];
        S[nd][0] *= x.x;
        S[nd][1] *= x.y;
        S[nd][2] *= x.x;
        S[nd][3] *= x.y;
    }
}

/* S' = S diag(c) (in place), then P^T = S' Lk^T and the inter-chunk part of
 * o^T, S' Lq^T. */
static __device__ void state_products(float S[D / 8][4], int lane, const chunk_smem &s,
                                      float P[4][4], float O[4][4]) {
    const int r = lane >> 2, q = lane & 3;
    scale_columns(S, s.c, q);
#pragma unroll
    for (int nd = 0; nd < D / 8; nd++) {
        uint32_t a[4];
        acc_as_a(S[nd], a);
#pragma unroll
        for (int nt = 0; nt < CT / 8; nt++) {
            uint32_t b0, b1;
            pair(&s.lk[8 * nt + r][8 * nd + 2 * q], &b0, &b1);
            mma_tf32(P[nt], a, b0, b1);
            pair(&s.lq[8 * nt + r][8 * nd + 2 * q], &b0, &b1);
            mma_tf32(O[nt], a, b0, b1);
        }
    }
}

/* The rest, for this warp's 16 V rows (v_local: the first, relative to the
 * block's columns): X^T = diag(b) (V - P)^T in place of P; W^T = X^T T^T;
 * o^T += W^T QK^T; S = diag(e) (S' + W^T R). */
static __device__ void state_update(float S[D / 8][4], float P[4][4], float O[4][4],
                                    const raw_chunk &raw, int v_local, int lane,
                                    const chunk_smem &s) {
    const int r = lane >> 2, q = lane & 3;
#pragma unroll
    for (int nt = 0; nt < CT / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int t = 8 * nt + 2 * q + (e & 1);
            const float v = sp_bf16_to_f32(raw.v[t][v_local + 8 * (e >> 1)]);
            P[nt][e] = s.b[t] * (v - P[nt][e]);
        }
    float W[4][4] = {};
#pragma unroll
    for (int kt = 0; kt < CT / 8; kt++) {
        uint32_t a[4];
        acc_as_a(P[kt], a);
#pragma unroll
        for (int nt = 0; nt < CT / 8; nt++) {
            uint32_t b0, b1;
            pair(&s.t[8 * nt + r][8 * kt + 2 * q], &b0, &b1);
            mma_tf32(W[nt], a, b0, b1);
        }
    }
#pragma unroll
    for (int kt = 0; kt < CT / 8; kt++) {
        uint32_t a[4];
        acc_as_a(W[kt], a);
#pragma unroll
        for (int nt = 0; nt < CT / 8; nt++) {
            uint32_t b0, b1;
            pair(&s.qk[8 * nt + r][8 * kt + 2 * q], &b0, &b1);
            mma_tf32(O[nt], a, b0, b1);
        }
#pragma unroll
        for (int nd = 0; nd < D / 8; nd++)
            mma_tf32(S[nd], a, __float_as_uint(s.r[8 * kt + 2 * q][8 * nd + r]),
                     __float_as_uint(s.r[8 * kt + 2 * q + 1][8 * nd + r]));
    }
    scale_columns(S, s.e, q);
}

/* ---- the kernel ------------------------------------------------------------ */

static __global__ void __launch_bounds__(THREADS, 1) kda_chunked_kernel(kda_params p, int splits) {
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    chunk_smem &s = *(chunk_smem *)smem_bytes;

    const int split = (int)(blockIdx.x % (unsigned)splits);
    const int64_t nh = blockIdx.x / (unsigned)splits, h = nh % p.H, n = nh / p.H;
    const int bv = D / splits, v0 = split * bv, vwarps = bv / 16;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int r = lane >> 2, q = lane & 3;

    kda_seq sq;
    if (!kda_seq_of(p, n, h, &sq)) return;
    const int64_t L = sq.len;
    const int is_v = w < vwarps;
    const int vrow = v0 + 16 * w + r; /* this lane's first V row (V-warps) */
    const chunk_loader ld = loader_of(tid, bv);

    const float expA = expf(p.A_log[h]);
    const float bias = p.dt_bias[h * D + tid % D];
    float beta_logit = 0.0f;
    if (w == 0 && lane < L) beta_logit = sp_bf16_to_f32(p.beta[(sq.bos + lane) * p.H + h]);

    float S[D / 8][4];
    if (is_v) state_load(p.state, p.state_bf16, sq.slot_base, vrow, q, S);

    if (L > 0) load_chunk(p, sq, h, 0, v0, ld, s.raw[0]);
    cp_async_commit();
    int64_t crow = sq.crow;
    const int64_t chunks_per_ckpt = p.interval / CT;
    for (int64_t c0 = 0, ci = 0; c0 < L; c0 += CT, ci++) {
        const raw_chunk &raw = s.raw[ci & 1];
        const int nt = (int)(L - c0 < CT ? L - c0 : CT);
        cp_async_wait_all();
        __syncthreads(); /* raw landed; every warp is done with the last chunk */
        if (c0 + CT < L) load_chunk(p, sq, h, c0 + CT, v0, ld, s.raw[(ci + 1) & 1]);
        cp_async_commit();

        gates_and_norms(p, raw, nt, tid, expA, bias, beta_logit, s);
        if (w == 0 && c0 + CT + lane < L)
            beta_logit = sp_bf16_to_f32(p.beta[(sq.bos + c0 + CT + lane) * p.H + h]);
        __syncthreads();
        operands(raw, tid, s);
        __syncthreads();
        intra_products(w, lane, s);
        __syncthreads();

        float P[4][4] = {}, O[4][4] = {};
        if (w == T_WARP) solve_t(lane, s);
        if (is_v) state_products(S, lane, s, P, O);
        __syncthreads();
        if (!is_v) continue;

        state_update(S, P, O, raw, 16 * w + r, lane, s);
#pragma unroll
        for (int nt8 = 0; nt8 < CT / 8; nt8++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int t = 8 * nt8 + 2 * q + (e & 1);
                if (t < nt)
                    p.o[((sq.bos + c0 + t) * p.H + h) * D + vrow + 8 * (e >> 1)] =
                        sp_f32_to_bf16(O[nt8][e]);
            }
        if (chunks_per_ckpt > 0 && nt == CT && (ci + 1) % chunks_per_ckpt == 0)
            state_store(p.ckpt, p.state_bf16, kda_ckpt_base(p, crow++, h), vrow, q, S);
    }
    if (is_v) state_store(p.state, p.state_bf16, sq.slot_base, vrow, q, S);
}

extern "C" cudaError_t sp_kda_launch_chunked_(const kda_params *p, int splits,
                                              cudaStream_t stream) {
    const int smem = (int)sizeof(chunk_smem);
    cudaError_t e = cudaFuncSetAttribute((const void *)kda_chunked_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    void *params[] = {(void *)p, &splits};
    return cudaLaunchKernel((const void *)kda_chunked_kernel,
                            dim3((unsigned)(p->N * p->H * splits)), dim3(THREADS), params,
                            (size_t)smem, stream);
}
