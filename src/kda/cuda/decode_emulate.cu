/*
 * decode_emulate.cu — the decode kernel (decode.cu) on the host, lane by
 * lane: its phases (decode.cuh) run for every lane of a warp in turn, the
 * shuffles as loops over the lanes in the order the device adds, for the
 * tests of machines without a GPU (sp_kda_decode_emulate_).
 */
#include "kda/cuda/decode.cuh"
#include "kda/plan.h"

#include <stdlib.h>
#include <string.h>


/* The butterfly over a warp's lanes of x(l) = field of lane l, in the order
 * the shuffles add: x_l += x_(l ^ off), off = 16, 8, 4, 2, 1. */
template <int RPW, typename F> static void host_butterfly(dec_lane<RPW> *L, F field) {
    for (int off = 16; off > 0; off >>= 1) {
        float next[32];
        for (int i = 0; i < 32; i++) next[i] = *field(L[i]) + *field(L[i ^ off]);
        for (int i = 0; i < 32; i++) *field(L[i]) = next[i];
    }
}

/* xch_rows over the warp's lanes, shuffle by shuffle: lane l's result in
 * m[l]. */
template <int RPW> static void host_xch(const dec_lane<RPW> *L, float m[32]) {
    float k[32][2];
    for (int l = 0; l < 32; l++)
        for (int e = 0; e < 2; e++)
            k[l][e] = xch_keep1(l, L[l].dot, e) + xch_send1(l ^ 16, L[l ^ 16].dot, e);
    for (int l = 0; l < 32; l++) {
        const int b3 = (l >> 3) & 1;
        m[l] = k[l][b3] + k[l ^ 8][(((l ^ 8) >> 3) & 1) ^ 1];
    }
    for (int off = 4; off > 0; off >>= 1) {
        float next[32];
        for (int l = 0; l < 32; l++) next[l] = m[l] + m[l ^ off];
        for (int l = 0; l < 32; l++) m[l] = next[l];
    }
}

/* Token t fetched (v of vrows rows, dec_fetch: R, where given) and read by
 * every lane of the warp, the norms summed as the kernel's butterflies sum
 * them (or taken from norms, where given). */
template <int RPW>
static void host_read(const kda_params &p, const dec_warp &w, int64_t t, dec_lane<RPW> *L,
                      const float *norms, int vrows = 0, dec_raw *R = NULL) {
    typedef dec_lane<RPW> lane_t;
    for (int j = 0; j < 32; j++) {
        dec_raw r;
        dec_fetch<RPW>(p, w, t, j, vrows, r);
        dec_take(p, r, L[j]);
        if (R) R[j] = r;
    }
    if (norms) {
        for (int j = 0; j < 32; j++) L[j].sq = norms[0], L[j].sk = norms[1];
        return;
    }
    host_butterfly(L, [](lane_t &l) { return &l.sq; });
    host_butterfly(L, [](lane_t &l) { return &l.sk; });
}

/* The same, and every lane's token prepared (the kernel's dec_prepare). */
template <int RPW>
static void host_prepare(const kda_params &p, const dec_warp &w, int64_t t, dec_lane<RPW> *L,
                         const float *norms, int vrows = 0, dec_raw *R = NULL) {
    host_read(p, w, t, L, norms, vrows, R);
    for (int j = 0; j < 32; j++) dec_prepare(p, w, L[j]);
}

/* One warp's start: the read slot's rows copied to copy and, groups outer
 * (not outer), for one token that token prepared (L) and its v kept in vf,
 * for several the norms of the first kept. */
template <int RPW>
static void emulate_start(const kda_params &p, const dec_warp &w, int outer, unsigned char *copy,
                          float *norms, float *vf, dec_lane<RPW> *L) {
    for (int j = 0; j < 32; j++) dec_stage(p, w, p.state_k_first, j, copy, (uint64_t *)NULL, L[j]);
    if (!outer && w.sq.len == 1) {
        dec_raw R[32];
        host_prepare(p, w, w.sq.bos, L, (const float *)NULL, 1, R);
        for (int j = 0; j < 32; j++) dec_v_put<RPW>(R[j], j, vf);
        return;
    }
    for (int64_t i = 0; !outer && i < w.sq.len && i < DEC_NORMS; i++) {
        host_read(p, w, w.sq.bos + i, L, (const float *)NULL);
        norms[2 * i] = L[0].sq, norms[2 * i + 1] = L[0].sk;
    }
}

/* dec_token over the warp's lanes. */
template <int RPW>
static void host_token(const kda_params &p, const dec_warp &w, const dec_tok &k, int G,
                       dec_lane<RPW> *L, unsigned char *kf_copy, int stores) {
    float sums[32];
    for (int j = 0; j < 32; j++) {
        dec_group_v(k, G, L[j]);
        dec_decay(L[j]);
    }
    host_xch(L, sums);
    for (int j = 0; j < 32; j++)
        for (int r = 0; r < DEC_GROUP; r++) L[j].dot[r] = sums[8 * r];
    for (int j = 0; j < 32; j++) dec_update(L[j]);
    host_xch(L, sums);
    for (int j = 0; j < 32; j++) L[j].dot[0] = sums[j];
    for (int j = 0; j < 32; j++) {
        dec_out(p, w, k, G, j, L[j]);
        if (stores) dec_group_done(p, w, k, p.state_k_first, G, j, L[j], kf_copy);
    }
}

/* Groups outer: the rest of the warp's run, as the kernel runs it (copy
 * the read slot's copy in its rows). */
template <int RPW>
static void emulate_groups_outer(const kda_params &p, const dec_warp &w, unsigned char *copy,
                                 const float *norms, const float *vf, dec_lane<RPW> *L) {
    const int kf = p.state_k_first, one = w.sq.len == 1; /* one: L prepared (emulate_start) */
    unsigned char *kf_copy = dec_kf_via_copy(p, kf) ? copy : NULL;
    for (int G = 0; G < dec_shape<RPW>::GROUPS; G++) {
        for (int j = 0; j < 32; j++) dec_group_rows(p, w, kf, G, j, copy, L[j]);
        for (int64_t i = 0; i < w.sq.len; i++) {
            if (!one) {
                host_prepare(p, w, w.sq.bos + i, L, i < DEC_NORMS ? norms + 2 * i : NULL);
            }
            dec_tok k = dec_token_at(p, w, i);
            if (one) k.vf = vf;
            host_token(p, w, k, G, L, kf_copy, 1);
        }
    }
    for (int j = 0; kf_copy && w.sq.slot_base >= 0 && j < 32; j++)
        dec_kf_out<RPW>(p, w, w.sq.slot_base, j, kf_copy, 0);
}

/* Tokens outer: token i of the warp's sequence from its slot, through
 * every group (m the warp's rows, copy the read slot's copy in them). */
template <int RPW>
static void emulate_token_outer(const kda_params &p, const dec_warp &w, unsigned char *m,
                                unsigned char *copy, const dec_slot *slot, int64_t i,
                                dec_lane<RPW> *L) {
    const int kf = p.state_k_first;
    for (int j = 0; j < 32; j++) dec_slot_get(slot, j, L[j]);
    dec_tok k = dec_token_at(p, w, i);
    k.vf = slot->v + w.row0;
    for (int G = 0; G < dec_shape<RPW>::GROUPS; G++) {
        for (int j = 0; j < 32; j++) {
            if (i == 0)
                dec_group_rows(p, w, kf, G, j, copy, L[j]);
            else
                dec_group_kept(G, j, m, L[j]);
        }
        host_token(p, w, k, G, L, (unsigned char *)NULL, !kf);
        for (int j = 0; (kf || i + 1 < w.sq.len) && j < 32; j++) dec_group_keep(G, j, m, L[j]);
    }
    if (kf) {
        for (int j = 0; k.to >= 0 && j < 32; j++) dec_kf_out<RPW>(p, w, k.to, j, m, 1);
        for (int j = 0; i + 1 == w.sq.len && w.sq.slot_base >= 0 && j < 32; j++)
            dec_kf_out<RPW>(p, w, w.sq.slot_base, j, m, 1);
    }
}

/* Block b of the grid (one pair) on the host: every warp started first (the
 * kernel's warps may all copy their rows and keep their norms before any
 * runs: a warp's writes into another's would show), then each warp run;
 * tokens outer, a round at a time: its tokens prepared into the slots (warp
 * r token r), then each warp through them. */
template <int RPW>
static void emulate_block(const kda_params &p, int outer, int64_t b, unsigned char *smem,
                          dec_lane<RPW> (*L)[32]) {
    typedef dec_shape<RPW> SH;
    static_assert(DEC_SLOTS <= SH::WARPS, "a warp a token of a round");
    dec_warp w[SH::WARPS];
    const int es = dec_row_es(p, outer);
    /* one pair a block: every warp live or none, of one sequence */
    if (!dec_begin<RPW>(p, b * SH::WARPS, &w[0])) return;
    unsigned char *rows[SH::WARPS], *copy[SH::WARPS]; /* each warp's, and its copy in them */
    for (int wi = 0; wi < SH::WARPS; wi++) {
        dec_begin<RPW>(p, b * SH::WARPS + wi, &w[wi]);
        rows[wi] = dec_warp_rows<RPW>(smem, wi, es);
        copy[wi] = rows[wi] + dec_copy_at<RPW>(p, outer);
        emulate_start(p, w[wi], outer, copy[wi], dec_warp_norms(smem, wi, es),
                      dec_warp_v<RPW>(smem, wi, es), L[wi]);
    }
    if (!outer) {
        for (int wi = 0; wi < SH::WARPS; wi++)
            emulate_groups_outer(p, w[wi], copy[wi], dec_warp_norms(smem, wi, es),
                                 dec_warp_v<RPW>(smem, wi, es), L[wi]);
        return;
    }
    dec_slot *slots = dec_slots(smem, es);
    const int64_t len = w[0].sq.len, bos = w[0].sq.bos;
    for (int64_t i0 = 0; i0 < len; i0 += DEC_SLOTS) {
        for (int r = 0; r < DEC_SLOTS && i0 + r < len; r++) { /* warp r, token i0 + r */
            dec_raw R[32];
            host_prepare(p, w[r], bos + i0 + r, L[r], (const float *)NULL, 4, R);
            for (int j = 0; j < 32; j++) dec_slot_put(R[j], slots + r, j, L[r][j]);
        }
        for (int wi = 0; wi < SH::WARPS; wi++)
            for (int64_t i = i0; i < len && i < i0 + DEC_SLOTS; i++)
                emulate_token_outer(p, w[wi], rows[wi], copy[wi], slots + (i - i0), i, L[wi]);
    }
}

template <int RPW>
static sp_status emulate(const kda_params &p, const sp_kda_dims &d, int outer) {
    unsigned char *smem = (unsigned char *)malloc(dec_smem_bytes(p, outer));
    dec_lane<RPW>(*lanes)[32] =
        (dec_lane<RPW>(*)[32])malloc(dec_shape<RPW>::WARPS * sizeof *lanes);
    if (!smem || !lanes) {
        free(smem);
        free(lanes);
        return sp_set_error_(SP_ERR_OUT_OF_MEMORY, "sp_kda_decode_emulate_: no memory");
    }
    for (int64_t b = 0; b < d.N * d.H; b++) emulate_block<RPW>(p, outer, b, smem, lanes);
    free(smem);
    free(lanes);
    return SP_OK;
}

extern "C" sp_status sp_kda_decode_emulate_(const sp_kda_args *a, int rows_per_warp,
                                            int tokens_outer) {
    SP_REQUIRE(a, SP_ERR_INVALID_ARGUMENT, "args: NULL");
    SP_REQUIRE(rows_per_warp == 16 || rows_per_warp == 32, SP_ERR_INVALID_ARGUMENT,
               "rows_per_warp: %d is not 16 or 32", rows_per_warp);
    SP_REQUIRE(tokens_outer >= -1 && tokens_outer <= 1, SP_ERR_INVALID_ARGUMENT,
               "tokens_outer: %d is not -1, 0 or 1", tokens_outer);
    sp_kda_args call = *a;
    call.kernel = SP_KDA_KERNEL_AUTO; /* the plan's device rule aside: checked below */
    sp_kda_dims d;
    SP_FORWARD(sp_kda_check_(&call, 1, &d));
    SP_REQUIRE(d.dev.type == SP_DEVICE_CPU, SP_ERR_UNSUPPORTED,
               "q: the decode kernel's emulation runs on CPU tensors only");
    const char *no = sp_kda_decode_layout_unsupported_(&call, &d);
    SP_REQUIRE(!no, SP_ERR_UNSUPPORTED, "kernel: the decode kernel cannot serve this call: %s", no);
    if (d.T == 0 || d.N == 0 || d.H == 0) return SP_OK;
    const kda_params p = sp_kda_cuda_params_(&call, &d);
    const int outer = tokens_outer >= 0 ? tokens_outer : sp_kda_decode_tokens_outer_(d.T, d.N);
    return rows_per_warp == 32 ? emulate<32>(p, d, outer) : emulate<16>(p, d, outer);
}
