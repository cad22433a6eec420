/*
 * decode.cuh — the decode kernel's layout and arithmetic (decode.cu has the
 * design): the shared memory a block takes, the per-lane phases (dec_*)
 * the kernel runs with shuffles between them and the emulation
 * (decode_emulate.cu) runs for every lane of a warp in turn, and the
 * per-lane halves of the exchange that sums a group's dot products.
 */
#ifndef SP_KDA_CUDA_DECODE_CUH
#define SP_KDA_CUDA_DECODE_CUH

#include "cuda/ptx.cuh"
#include "kda/cuda/common.cuh"


#define DEC_GROUP 4 /* rows a warp holds in registers at a time */
#define DEC_NORMS 8 /* tokens whose q . q and k . k a warp keeps for every group */
#define DEC_MAX_WARPS 8 /* warps a block at the fewest rows a warp (16) */
#define FULL SP_KDA_FULL_MASK
/* Bulk copies into shared memory (sm_90 and later: dec_stage). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DEC_BULK 1
#else
#define DEC_BULK 0
#endif

/* RPW: V rows a warp (the plan's decode_rows_per_warp: 16 or 32). A block
 * is one (sequence, head) pair; its shared memory the pair's rows as the
 * pool holds them (dec_smem_bytes). */
template <int RPW> struct dec_shape {
    static constexpr int WARPS = SP_KDA_D / RPW;  /* warps a pair: a block */
    static constexpr int GROUPS = RPW / DEC_GROUP; /* register groups a warp */
    static_assert(SP_KDA_D == 32 * 4, "a lane's 4 channels of a row");
    static_assert(SP_KDA_D % RPW == 0 && RPW % (2 * DEC_GROUP) == 0,
                  "rows (a bf16 K-first piece is two groups' rows)");
};

/* The two orders, the plan's decode_tokens_outer (OUTER, an instance
 * each): tokens outer (1: the call has more tokens than sequences), a
 * sequence's tokens each prepared once a block (dec_slots) and the rows kept
 * in fp32 in shared memory between them ("fp32 room": a bf16 pool's too);
 * groups outer (0), each group's rows through every token in registers, the
 * rows in shared memory as the pool holds them (a bf16 pool's as bf16, half
 * the bytes). Bytes an element of the rows in shared memory. */
static SP_HD inline int dec_row_es(const kda_params &p, int outer) {
    return outer || !p.state_bf16 ? 4 : 2;
}

/* Tokens outer, the block prepares up to DEC_SLOTS tokens a
 * round, warp r token r, into shared slots that every warp reads: each
 * token's q^, k^, exp(g) and b are made once a block, not once a warp, and
 * its v is read from memory once (a group's four values one shared load,
 * where they were four global ones a group). A slot: the 128 channels' q^,
 * k^, exp(g), the 128 rows' v, then b. */
#define DEC_SLOTS 4
typedef struct dec_slot {
    float q[SP_KDA_D], k[SP_KDA_D], g[SP_KDA_D], v[SP_KDA_D];
    float beta, pad[3];
} dec_slot;

/* A block's shared memory: the pair's rows (a warp's RPW rows at RPW * 128
 * * es bytes apart, es = dec_row_es), then each warp's norms of its first
 * DEC_NORMS tokens (dec_warp_norms), the mbarriers of the bulk copies of
 * its groups' rows (dec_warp_bars), then, tokens outer, the token slots
 * (dec_slots), groups outer, each warp's v of its rows for a sequence of
 * one token (dec_warp_v). */
#define DEC_NORMS_BYTES (DEC_MAX_WARPS * DEC_NORMS * 2 * sizeof(float))
#define DEC_BARS_BYTES (SP_KDA_D / DEC_GROUP * sizeof(uint64_t)) /* one a group of rows */
#define DEC_V_BYTES (SP_KDA_D * sizeof(float)) /* every warp's rows' v */
static SP_HD inline size_t dec_rows_bytes(int es) { return (size_t)SP_KDA_D * SP_KDA_D * es; }
static SP_HD inline size_t dec_smem_bytes_es(int es, int outer) {
    return dec_rows_bytes(es) + DEC_NORMS_BYTES + DEC_BARS_BYTES +
           (outer ? DEC_SLOTS * sizeof(dec_slot) : DEC_V_BYTES);
}
static SP_HD inline size_t dec_smem_bytes(const kda_params &p, int outer) {
    return dec_smem_bytes_es(dec_row_es(p, outer), outer);
}

/* Warp wi's rows in the block's shared memory. */
template <int RPW> static SP_HD unsigned char *dec_warp_rows(unsigned char *smem, int wi, int es) {
    static_assert(SP_KDA_D / RPW <= DEC_MAX_WARPS, "warps a block");
    return smem + (size_t)wi * RPW * SP_KDA_D * es;
}

/* Warp wi's sums q . q and k . k of token i (< DEC_NORMS) at [2 i], [2 i + 1]. */
static SP_HD inline float *dec_warp_norms(unsigned char *smem, int wi, int es) {
    return (float *)(smem + dec_rows_bytes(es)) + wi * DEC_NORMS * 2;
}

/* Warp wi's mbarriers, group G's at [G] (dec_stage). */
template <int RPW> static SP_HD uint64_t *dec_warp_bars(unsigned char *smem, int wi, int es) {
    return (uint64_t *)(smem + dec_rows_bytes(es) + DEC_NORMS_BYTES) + wi * (RPW / DEC_GROUP);
}

/* The block's token slots (tokens outer). */
static SP_HD inline dec_slot *dec_slots(unsigned char *smem, int es) {
    return (dec_slot *)(smem + dec_rows_bytes(es) + DEC_NORMS_BYTES + DEC_BARS_BYTES);
}

/* Groups outer, warp wi's v of its RPW rows (one token: dec_v_put). */
template <int RPW> static SP_HD float *dec_warp_v(unsigned char *smem, int wi, int es) {
    return (float *)(smem + dec_rows_bytes(es) + DEC_NORMS_BYTES + DEC_BARS_BYTES) + wi * RPW;
}

/* Where the read slot's copy lies in a warp's rows: a bf16 pool's in the
 * second half of fp32 room, so that group G's fp32 rows, kept after a
 * token, overwrite only the copy's rows of groups up to G, read already. */
template <int RPW> static SP_HD size_t dec_copy_at(const kda_params &p, int outer) {
    return p.state_bf16 && outer ? (size_t)RPW * SP_KDA_D * 2 : 0;
}

/* What a warp works on: uniform over its lanes. */
typedef struct dec_warp {
    kda_seq sq;
    int64_t n, h;
    int row0; /* its first V row */
    float expA;
} dec_warp;

/* One lane's registers (the group loop is not unrolled: v of the group's
 * rows is read with it). */
template <int RPW> struct dec_lane {
    float S[DEC_GROUP][4];    /* its channels of the group's rows */
    float q[4], k[4], g[4];   /* the token's: as read, then q^, k^, exp(g) */
    float bias[4];            /* dt_bias of its channels (softplus and lower-bound gates) */
    float v[DEC_GROUP];       /* the token's v of the group's rows */
    float beta;               /* as read, then b */
    float dot[DEC_GROUP];     /* this lane's share of a row's dot product */
    float sq, sk;             /* its share of q . q and k . k */
};

/* ---- the phases: the arithmetic of the kernel and of the emulation ------- */

/* Warp x of the grid; 0 when it has nothing to do (a padded or skipped
 * sequence, or one without tokens). */
template <int RPW> static SP_HD int dec_begin(const kda_params &p, int64_t x, dec_warp *w) {
    typedef dec_shape<RPW> SH;
    const int64_t pair = x / SH::WARPS;
    w->h = pair % p.H;
    w->n = pair / p.H;
    w->row0 = (int)(x % SH::WARPS) * RPW;
    if (!kda_seq_of(p, w->n, w->h, &w->sq) || w->sq.len == 0) return 0;
    w->expA = p.gate == SP_KDA_GATE_LOG_DECAY ? 0.0f : expf(p.A_log[w->h]);
    return 1;
}

/* Where the copy of a K-first pool puts channel d's piece k (per pieces a
 * channel, 2, 4 or 8; a 16-byte unit's index): block k, at place
 * 32 (d % 4) + d / 4, so that lane l's four channels 4l + x lie at
 * 32 x + l (four conflict-free reads), with the place's low three bits
 * XORed by the piece and the channel (the same for every lane's read, a
 * different one for each of the copy's eight lanes of a phase: their
 * writes meet no bank twice). */
static SP_HD inline int64_t dec_kf_unit(int d, int k, int per) {
    const int swz = (k + per * (d % (8 / per))) & 7;
    return (int64_t)k * SP_KDA_D + ((32 * (d % 4) + d / 4) ^ swz);
}

/* dt_bias of the lane's channels. */
template <int RPW>
static SP_HD void dec_bias(const kda_params &p, const dec_warp &w, int lane, dec_lane<RPW> &l) {
    const int c = 4 * lane;
    SP_HD_UNROLL
    for (int i = 0; i < 4; i++)
        l.bias[i] = p.gate == SP_KDA_GATE_LOG_DECAY ? 0.0f : p.dt_bias[w.h * SP_KDA_D + c + i];
}

#if DEC_BULK
/* By one lane: the warp's mbarriers, one a group of its rows, each for one
 * arrival (the lane issuing the group's bulk copy); a __syncwarp after it
 * before any lane waits on them. */
template <int RPW> static __device__ __forceinline__ void dec_bars_init(uint64_t *bars) {
    for (int G = 0; G < RPW / DEC_GROUP; G++) sp_mbarrier_init_(sp_smem_addr_(bars + G), 1);
    sp_mbarrier_init_fence_();
}

/* By one lane: group G's rows (DEC_GROUP rows of a V-first pool, 1 or 2 KB)
 * of the read slot at `read_base`, the warp's rows from row0, into m's
 * place for them by one bulk copy completing on bars[G] (dec_rows_wait). */
static __device__ __forceinline__ void dec_group_copy(const kda_params &p, int64_t read_base,
                                                      int row0, int G, unsigned char *m,
                                                      uint64_t *bars) {
    const unsigned es = p.state_bf16 ? 2 : 4, bytes = DEC_GROUP * SP_KDA_D * es;
    const char *from = (const char *)p.state + (read_base + sp_kda_state_at_(0, 0, row0)) * es;
    const unsigned bar = sp_smem_addr_(bars + G);
    sp_mbarrier_expect_tx_(bar, bytes);
    sp_bulk_copy_g2s_(sp_smem_addr_(m + G * bytes), from + G * bytes, bytes, bar);
}
#endif

/* Start copying the warp's rows of the read slot into its shared memory m
 * (RPW rows as the pool holds them; nothing for a fresh sequence); dt_bias
 * of the lane's channels. Given bars (the kernel's BULK: a V-first pool,
 * whose rows lie whole), lane 0 copies each group's rows by one bulk copy
 * (dec_group_copy): the warp goes on at once and takes each group as it
 * lands, where the lanes' copies hold it until the last of its pieces is
 * issued. Else each lane copies its 16-byte pieces; from a K-first pool
 * (kf) each channel's piece k (its rows 4k .. 4k + 3 in fp32, 8k .. 8k + 7
 * in bf16) goes to block k (dec_kf_unit): a group's rows (a pair of
 * groups' in bf16) fill one block. */
template <int RPW>
static SP_HD void dec_stage(const kda_params &p, const dec_warp &w, int kf, int lane,
                            unsigned char *m, uint64_t *bars, dec_lane<RPW> &l) {
    dec_bias(p, w, lane, l);
    if (w.sq.read_base < 0) return;
#if DEC_BULK
    if (bars) {
        if (lane == 0) {
            dec_bars_init<RPW>(bars);
            for (int G = 0; G < RPW / DEC_GROUP; G++)
                dec_group_copy(p, w.sq.read_base, w.row0, G, m, bars);
        }
        __syncwarp(); /* the mbarriers made before any lane waits on them */
        return;
    }
#else
    (void)bars;
#endif
    const int64_t es = p.state_bf16 ? 2 : 4; /* bytes an element */
    const char *from = (const char *)p.state +
                       (w.sq.read_base + sp_kda_state_at_(kf, 0, w.row0)) * es;
    const int pieces = (int)(RPW * SP_KDA_D * es / 16), per = (int)(RPW * es / 16);
    for (int i = lane; i < pieces; i += 32) {
        const int d = i / per, k = i % per; /* K-first: piece k of channel d */
        const int64_t src = kf ? (int64_t)d * SP_KDA_D * es + 16 * k : 16 * i,
                      dst = kf ? dec_kf_unit(d, k, per) * 16 : 16 * i;
#ifdef __CUDA_ARCH__
        sp_cp_async16_(m + dst, from + src);
#else
        memcpy(m + dst, from + src, 16);
#endif
    }
}

/* Token t's inputs as loaded and not yet used (bits as stored: bf16 in the
 * low half, or f32), and v of rows (vrows) 1: row0 + lane (lane < RPW), 4:
 * 4 lane .. 4 lane + 3, 0: none. A warp's first token is fetched ahead of its
 * rows' copy (dec_stage): behind the copy, the loads came back with it and
 * the token's preparation, then its v, waited on them in turn (journal,
 * 2026-12-06, "The token fetched ahead"). */
typedef struct dec_raw {
    uint32_t q[4], k[4], g[4], beta, v[4];
} dec_raw;
template <int RPW>
static SP_HD void dec_fetch(const kda_params &p, const dec_warp &w, int64_t t, int lane, int vrows,
                            dec_raw &r) {
    const int c = 4 * lane;
    SP_HD_UNROLL
    for (int i = 0; i < 4; i++) {
        r.q[i] = kda_in_bits(p.q, 0, t, w.h, c + i);
        r.k[i] = kda_in_bits(p.k, 0, t, w.h, c + i);
        r.g[i] = kda_in_bits(p.g, p.g_f32, t, w.h, c + i);
    }
    r.beta = kda_in_bits(p.beta, p.beta_f32, t, w.h, 0);
    if (vrows == 1 && lane < RPW) r.v[0] = kda_in_bits(p.v, 0, t, w.h, w.row0 + lane);
    SP_HD_UNROLL
    for (int i = 0; vrows == 4 && i < 4; i++) r.v[i] = kda_in_bits(p.v, 0, t, w.h, c + i);
}

/* The fetched token read: q, k, g of the lane's channels and beta (the same
 * in every lane) as floats; the lane's shares of q . q and k . k. */
template <int RPW>
static SP_HD void dec_take(const kda_params &p, const dec_raw &r, dec_lane<RPW> &l) {
    SP_HD_UNROLL
    for (int i = 0; i < 4; i++) {
        l.q[i] = sp_kda_bits_f32_(r.q[i], 0);
        l.k[i] = sp_kda_bits_f32_(r.k[i], 0);
        l.g[i] = sp_kda_bits_f32_(r.g[i], p.g_f32);
    }
    l.beta = sp_kda_bits_f32_(r.beta, p.beta_f32);
    l.sq = (l.q[0] * l.q[0] + l.q[1] * l.q[1]) + (l.q[2] * l.q[2] + l.q[3] * l.q[3]);
    l.sk = (l.k[0] * l.k[0] + l.k[1] * l.k[1]) + (l.k[2] * l.k[2] + l.k[3] * l.k[3]);
}

/* Token t fetched and read at once (a token after a warp's first). */
template <int RPW>
static SP_HD void dec_read(const kda_params &p, const dec_warp &w, int64_t t, int lane,
                           dec_lane<RPW> &l) {
    dec_raw r;
    dec_fetch<RPW>(p, w, t, lane, 0, r);
    dec_take(p, r, l);
}

/* With the full sums of squares: q^, k^, exp(g) of the lane's channels, b. */
template <int RPW>
static SP_HD void dec_prepare(const kda_params &p, const dec_warp &w, dec_lane<RPW> &l) {
    const float rq = p.scale / sqrtf(l.sq + (float)SP_KDA_EPS);
    const float rk = 1.0f / sqrtf(l.sk + (float)SP_KDA_EPS);
    SP_HD_UNROLL
    for (int i = 0; i < 4; i++) {
        l.q[i] *= rq;
        l.k[i] *= rk;
        l.g[i] = expf(sp_kda_log_decay_f32_(p.gate, p.lower_bound, w.expA, l.g[i], l.bias[i]));
    }
    l.beta = sp_kda_beta_f32_(p.beta_form, l.beta);
}

/* Groups outer, a sequence of one token: its v of the warp's rows (fetched,
 * vrows 1) into the warp's vf (dec_warp_v), lane r row r, read by every group
 * from there (a shared load a group, where they were four global ones:
 * dec_group_v). */
template <int RPW> static SP_HD void dec_v_put(const dec_raw &r, int lane, float *vf) {
    if (lane < RPW) vf[lane] = sp_kda_bits_f32_(r.v[0], 0);
}

/* The lane's channels of a prepared token into a slot, with v of rows 4
 * lane .. 4 lane + 3 (fetched, vrows 4); and back (every lane: the same b). */
template <int RPW>
static SP_HD void dec_slot_put(const dec_raw &r, dec_slot *s, int lane, const dec_lane<RPW> &l) {
    const int c = 4 * lane;
    *(float4 *)(s->v + c) =
        make_float4(sp_kda_bits_f32_(r.v[0], 0), sp_kda_bits_f32_(r.v[1], 0),
                    sp_kda_bits_f32_(r.v[2], 0), sp_kda_bits_f32_(r.v[3], 0));
    *(float4 *)(s->q + c) = make_float4(l.q[0], l.q[1], l.q[2], l.q[3]);
    *(float4 *)(s->k + c) = make_float4(l.k[0], l.k[1], l.k[2], l.k[3]);
    *(float4 *)(s->g + c) = make_float4(l.g[0], l.g[1], l.g[2], l.g[3]);
    if (lane == 0) s->beta = l.beta;
}
template <int RPW> static SP_HD void dec_slot_get(const dec_slot *s, int lane, dec_lane<RPW> &l) {
    const int c = 4 * lane;
    const float4 q = *(const float4 *)(s->q + c), k = *(const float4 *)(s->k + c),
                 g = *(const float4 *)(s->g + c);
    l.q[0] = q.x, l.q[1] = q.y, l.q[2] = q.z, l.q[3] = q.w;
    l.k[0] = k.x, l.k[1] = k.y, l.k[2] = k.z, l.k[3] = k.w;
    l.g[0] = g.x, l.g[1] = g.y, l.g[2] = g.z, l.g[3] = g.w;
    l.beta = s->beta;
}

/* Group G's rows into registers from the read slot's copy m (dec_stage;
 * zeros for a fresh sequence). */
template <int RPW>
static SP_HD void dec_group_rows(const kda_params &p, const dec_warp &w, int kf, int G, int lane,
                                 const unsigned char *m, dec_lane<RPW> &l) {
    if (w.sq.read_base < 0) {
        SP_HD_UNROLL
        for (int r = 0; r < DEC_GROUP; r++) l.S[r][0] = l.S[r][1] = l.S[r][2] = l.S[r][3] = 0.0f;
        return;
    }
    SP_HD_UNROLL
    for (int x = 0; x < 4; x++) {
        /* K-first: channel 4 lane + x's 4 rows of group G (dec_kf_unit: the
         * piece of a pair of groups in bf16); V-first: row G * 4 + x's 4
         * channels of the lane */
        const int d = 4 * lane + x, per = RPW * (p.state_bf16 ? 2 : 4) / 16;
        const int64_t row = (G * DEC_GROUP + x) * SP_KDA_D + 4 * lane;
        float *y = kf ? NULL : l.S[x];
        float f[4];
        if (p.state_bf16) {
            const uint2 u = *(const uint2 *)(m + (kf ? dec_kf_unit(d, G / 2, per) * 16 + (G % 2) * 8
                                                     : row * 2));
            f[0] = sp_bf16_to_f32_((uint16_t)u.x), f[1] = sp_bf16_to_f32_((uint16_t)(u.x >> 16));
            f[2] = sp_bf16_to_f32_((uint16_t)u.y), f[3] = sp_bf16_to_f32_((uint16_t)(u.y >> 16));
        } else {
            const float4 v =
                *(const float4 *)(m + (kf ? dec_kf_unit(d, G, per) * 16 : row * 4));
            f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
        }
        SP_HD_UNROLL
        for (int r = 0; r < 4; r++) {
            if (kf) l.S[r][x] = f[r];
            else y[r] = f[r];
        }
    }
}

/* Group G's rows kept in fp32 after the previous token (dec_group_keep). */
template <int RPW>
static SP_HD void dec_group_kept(int G, int lane, const unsigned char *m, dec_lane<RPW> &l) {
    SP_HD_UNROLL
    for (int r = 0; r < DEC_GROUP; r++) {
        const float4 f = *(const float4 *)(m + ((G * DEC_GROUP + r) * SP_KDA_D + 4 * lane) * 4);
        l.S[r][0] = f.x, l.S[r][1] = f.y, l.S[r][2] = f.z, l.S[r][3] = f.w;
    }
}

/* Group G's rows kept in fp32 (V-first, whatever the pool's layout) for the
 * next token. */
template <int RPW>
static SP_HD void dec_group_keep(int G, int lane, unsigned char *m, const dec_lane<RPW> &l) {
    SP_HD_UNROLL
    for (int r = 0; r < DEC_GROUP; r++)
        *(float4 *)(m + ((G * DEC_GROUP + r) * SP_KDA_D + 4 * lane) * 4) =
            make_float4(l.S[r][0], l.S[r][1], l.S[r][2], l.S[r][3]);
}

/* A token of the warp's sequence, what each group of it uses (made once a
 * token, dec_token_at): its index in the batch, its v of the warp's rows,
 * and where the rows after it go besides the final slot (the [slot, h]
 * offset of its verify-table slot; -1: none). */
typedef struct dec_tok {
    int64_t t, to;
    const uint16_t *v;
    const float *vf; /* its v of the warp's rows: tokens outer in its slot, groups outer
                      * in the warp's dec_warp_v for one token (else NULL) */
} dec_tok;

/* Token i (0-based in the sequence). */
static SP_HD inline dec_tok dec_token_at(const kda_params &p, const dec_warp &w, int64_t i) {
    dec_tok k;
    k.t = w.sq.bos + i;
    k.v = kda_row(p.v, k.t, w.h) + w.row0;
    k.vf = NULL;
    const int64_t to = p.ix.width > 0 ? sp_kda_token_slot_(&p.ix, w.n, i) : -1;
    k.to = to >= 0 ? kda_slot_base(p, to, w.h) : -1;
    return k;
}

/* The token's v of group G's rows: from its slot (tokens outer) or the
 * input. */
template <int RPW> static SP_HD void dec_group_v(const dec_tok &k, int G, dec_lane<RPW> &l) {
    if (k.vf) {
        const float4 f = *(const float4 *)(k.vf + G * DEC_GROUP);
        l.v[0] = f.x, l.v[1] = f.y, l.v[2] = f.z, l.v[3] = f.w;
        return;
    }
    SP_HD_UNROLL
    for (int r = 0; r < DEC_GROUP; r++) l.v[r] = sp_bf16_to_f32_(k.v[G * DEC_GROUP + r]);
}

/* Step, 1: the group's rows decayed; their share of S[:, j] . k^. */
template <int RPW> static SP_HD void dec_decay(dec_lane<RPW> &l) {
    SP_HD_UNROLL
    for (int r = 0; r < DEC_GROUP; r++) {
        float d = 0.0f;
        SP_HD_UNROLL
        for (int i = 0; i < 4; i++) {
            l.S[r][i] *= l.g[i];
            d = fmaf(l.S[r][i], l.k[i], d);
        }
        l.dot[r] = d;
    }
}

/* Step, 2: with the full S . k^ of each row (dot[]), the rank-1 update;
 * the lane's share of S[:, j] . q^. */
template <int RPW> static SP_HD void dec_update(dec_lane<RPW> &l) {
    SP_HD_UNROLL
    for (int r = 0; r < DEC_GROUP; r++) {
        const float bu = l.beta * (l.v[r] - l.dot[r]);
        float d = 0.0f;
        SP_HD_UNROLL
        for (int i = 0; i < 4; i++) {
            l.S[r][i] = fmaf(l.k[i], bu, l.S[r][i]);
            d = fmaf(l.S[r][i], l.q[i], d);
        }
        l.dot[r] = d;
    }
}

/* Step, 3: o of the group's rows: after the exchange (xch_rows) lane l
 * holds row 2 b4 + b3's full dot in dot[0]; lanes 0, 8, 16, 24 store rows
 * 0 .. 3. */
template <int RPW>
static SP_HD void dec_out(const kda_params &p, const dec_warp &w, const dec_tok &k, int G,
                          int lane, const dec_lane<RPW> &l) {
    if (lane % 8 != 0) return;
    p.o[(k.t * p.H + w.h) * SP_KDA_D + w.row0 + G * DEC_GROUP + lane / 8] =
        (uint16_t)sp_bf16x2_(l.dot[0], 0.0f);
}

/* The group's four dot products summed over the warp by exchanging halves
 * (16 shuffles a group for both products, where four butterflies each take
 * 40): lane l first keeps rows 2 b4 .. 2 b4 + 1 and adds its xor-16
 * partner's share of them, then keeps row 2 b4 + b3 and adds
 * its xor-8 partner's, then a butterfly over lanes 4, 2, 1 apart (b3, b4:
 * bits 3 and 4 of l). These are the per-lane halves of it. */
static_assert(DEC_GROUP == 4, "the exchange sums four rows");
/* What lane l sends at step 1 (value e of 2) and keeps. */
static SP_HD __forceinline__ float xch_send1(int lane, const float d[4], int e) {
    return (lane >> 4) & 1 ? d[e] : d[2 + e];
}
static SP_HD __forceinline__ float xch_keep1(int lane, const float d[4], int e) {
    return (lane >> 4) & 1 ? d[2 + e] : d[e];
}

/* The group's rows to the slot at `base` ([slot, h]), streamed: V-first,
 * each row's 4 channels of the lane; K-first (kf), each channel's 4 rows.
 * Piece r is SP_KDA_D elements after piece r - 1 in either layout: one
 * address a group, the pieces at fixed offsets from it. */
template <int RPW>
static SP_HD void dec_store(const kda_params &p, const dec_warp &w, int64_t base, int kf, int G,
                            int lane, const dec_lane<RPW> &l) {
    const int64_t at = base + sp_kda_state_at_(kf, 4 * lane, w.row0 + G * DEC_GROUP);
    uint16_t *const to16 = (uint16_t *)p.state + at;
    float *const to32 = (float *)p.state + at;
    SP_HD_UNROLL
    for (int r = 0; r < DEC_GROUP; r++) {
        float x[4];
        SP_HD_UNROLL
        for (int e = 0; e < 4; e++) x[e] = kf ? l.S[e][r] : l.S[r][e];
        if (p.state_bf16) {
            const uint2 u = make_uint2(sp_bf16x2_(x[0], x[1]), sp_bf16x2_(x[2], x[3]));
#ifdef __CUDA_ARCH__
            __stcs((uint2 *)(to16 + r * SP_KDA_D), u);
#else
            *(uint2 *)(to16 + r * SP_KDA_D) = u;
#endif
        } else {
            const float4 f = make_float4(x[0], x[1], x[2], x[3]);
#ifdef __CUDA_ARCH__
            __stcs((float4 *)(to32 + r * SP_KDA_D), f);
#else
            *(float4 *)(to32 + r * SP_KDA_D) = f;
#endif
        }
    }
}

/* A K-first pool's final rows go out through the warp's shared memory
 * where the groups run outer (each group's rows in registers through every
 * token) and no verify table is written: stored from registers, a lane's
 * 16-byte pieces (a group's 4 rows of one channel) lie 2 KB apart, half a
 * sector each; kept in the read slot's copy as it was staged (dec_kf_keep,
 * in the places the group was read from) and copied out as dec_stage
 * copied in (dec_kf_out), each channel's rows go out whole. */
static SP_HD inline int dec_kf_via_copy(const kda_params &p, int kf) {
    return kf && p.ix.width == 0;
}

/* Group G's rows (registers) into the copy m in the places dec_group_rows
 * read them from (the pool's dtype, dec_kf_unit): only the lane's own
 * channels, whose places no other lane reads before dec_kf_out. */
template <int RPW>
static SP_HD void dec_kf_keep(const kda_params &p, int G, int lane, unsigned char *m,
                              const dec_lane<RPW> &l) {
    const int per = RPW * (p.state_bf16 ? 2 : 4) / 16;
    SP_HD_UNROLL
    for (int x = 0; x < 4; x++) {
        const int d = 4 * lane + x;
        if (p.state_bf16) {
            *(uint2 *)(m + dec_kf_unit(d, G / 2, per) * 16 + (G % 2) * 8) =
                make_uint2(sp_bf16x2_(l.S[0][x], l.S[1][x]),
                           sp_bf16x2_(l.S[2][x], l.S[3][x]));
        } else {
            *(float4 *)(m + dec_kf_unit(d, G, per) * 16) =
                make_float4(l.S[0][x], l.S[1][x], l.S[2][x], l.S[3][x]);
        }
    }
}

/* A K-first pool's rows of the warp to the slot at base, each channel's
 * rows whole, the lane's 16-byte pieces as dec_stage took them (4 rows of a
 * channel in fp32, 8 in bf16), streamed; after a __syncwarp, from
 *   - (kept 0) the copy m, where dec_kf_keep put every group's rows
 *     (groups outer: dec_kf_via_copy);
 *   - (kept 1) the fp32 rows dec_group_keep keeps in m (V-first, every
 *     group's; tokens outer, after each token: the groups' own stores wrote
 *     a lane's pieces 2 KB apart after each token). The lanes of a read
 *     share a channel: 4-way bank conflicts (fp32; 2-way in bf16), for
 *     whole sectors written. */
template <int RPW>
static SP_HD void dec_kf_out(const kda_params &p, const dec_warp &w, int64_t base, int lane,
                             const unsigned char *m, int kept) {
    const int bf = p.state_bf16, es = bf ? 2 : 4, rows = 16 / es, per = RPW / rows;
    char *to = (char *)p.state + (base + sp_kda_state_at_(1, 0, w.row0)) * es;
    for (int i = lane; i < RPW * SP_KDA_D / rows; i += 32) {
        const int d = i / per, k = i % per; /* piece k of channel d */
        uint4 u;
        if (!kept) {
            u = *(const uint4 *)(m + dec_kf_unit(d, k, per) * 16);
        } else {
            const float *f = (const float *)m + (k * rows) * SP_KDA_D + d;
            if (bf) {
                uint32_t h[4];
                SP_HD_UNROLL
                for (int e = 0; e < 4; e++)
                    h[e] = sp_bf16x2_(f[(2 * e) * SP_KDA_D], f[(2 * e + 1) * SP_KDA_D]);
                u = make_uint4(h[0], h[1], h[2], h[3]);
            } else {
                u = make_uint4(sp_f32_bits_(f[0]), sp_f32_bits_(f[SP_KDA_D]),
                               sp_f32_bits_(f[2 * SP_KDA_D]), sp_f32_bits_(f[3 * SP_KDA_D]));
            }
        }
        char *at = to + (int64_t)d * SP_KDA_D * es + 16 * k;
#ifdef __CUDA_ARCH__
        __stcs((uint4 *)at, u);
#else
        memcpy(at, &u, 16);
#endif
    }
}

/* After token k the group's rows go to its verify table slot, if any;
 * after the last token to the final slot, if any, or, given kf_copy
 * (dec_kf_via_copy), to the copy for dec_kf_out. */
template <int RPW>
static SP_HD void dec_group_done(const kda_params &p, const dec_warp &w, const dec_tok &k, int kf,
                                 int G, int lane, const dec_lane<RPW> &l, unsigned char *kf_copy) {
    if (k.to >= 0) dec_store(p, w, k.to, kf, G, lane, l);
    if (k.t + 1 == w.sq.bos + w.sq.len && w.sq.slot_base >= 0) {
        if (kf_copy)
            dec_kf_keep(p, G, lane, kf_copy, l);
        else
            dec_store(p, w, w.sq.slot_base, kf, G, lane, l);
    }
}

#endif
