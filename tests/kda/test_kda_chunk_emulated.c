/*
 * test_kda_chunk_emulated.c — the chunked kernels' every-gate K side for one
 * chunk on its host emulation (sp_kda_chunk_emulate_, CUDA builds; no GPU
 * needed): the gates of each form (lower bound, softplus, log-decay with
 * -inf), their running sums, the factored and the safe form's A, QK and
 * operands (Lk, Lq, R, the state scalings c, e) against float64, in both
 * operand layouts (the wgmma build's swizzled one too), for chunks of 32,
 * 19 and 1 tokens with mild and steep decays; and the form the kernels
 * choose: factored within the lower-bound gate's bound, safe beyond it; a
 * NaN gate kept in its channel. And the one-pass kernel's longest-first
 * block order.
 */
#include "kda/kda_internal.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>

#define C 32
#define D 128

static uint64_t rng = 88172645463325252ull;
static double unit(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static double gauss(void) { return sqrt(-2.0 * log(unit() + 1e-300)) * cos(6.283185307179586 * unit()); }

typedef struct chunk {
    uint16_t k[C * D], q[C * D];
    float g[C * D], dt_bias[D], b[C]; /* g inputs, of the gate form below */
    int gate;
    float lower_bound, A_log;
    double G[C][D], kn[C][D], qn[C][D]; /* running log2 sums; k, q normalized */
} chunk;

/* A token's log2-decay from its g input x, channel d, by the contract in
 * float64 (sp_kda_gate), floored at -128 as the kernels do. */
static double gate_log2(const chunk *x, double v, int d) {
    const double expA = exp((double)x->A_log), y = v + x->dt_bias[d];
    double g = x->gate == SP_KDA_GATE_LOG_DECAY ? v
               : x->gate == SP_KDA_GATE_SOFTPLUS
                   ? -expA * (y > 20 ? y : log1p(exp(y)))
                   : x->lower_bound / (1.0 + exp(-expA * y));
    g *= 1.4426950408889634;
    return g < -128 ? -128 : g;
}

/* Gate inputs of the form: mild (lower bound -5, or softplus at A_log -1:
 * within the factored form's bound) or steep (softplus at A_log 3 on large
 * inputs; log-decays down to -60 and -inf; steep 2: log-decays near 0 but
 * -45 nats at one token of every 8 on channel 5, past the bound of 40 a
 * segment, and 90 over half a chunk: the factored form's factors would
 * overflow). */
static void make(chunk *x, int nt, int gate, int steep) {
    x->gate = gate;
    x->lower_bound = -5.0f;
    x->A_log = steep ? 3.0f : -1.0f;
    for (int d = 0; d < D; d++) x->dt_bias[d] = (float)(unit() - 0.5);
    for (int t = 0; t < C; t++) {
        double sk = 0, sq = 0;
        for (int d = 0; d < D; d++) {
            const int i = t * D + d;
            x->k[i] = x->q[i] = 0;
            x->g[i] = 0.0f;
            if (t < nt) {
                x->k[i] = sp_f32_to_bf16_((float)gauss());
                x->q[i] = sp_f32_to_bf16_((float)gauss());
                const double u = unit();
                x->g[i] = steep == 2 ? (t % 8 == 3 && d == 5 ? -45.0f : (float)(-1e-3 * u))
                          : gate == SP_KDA_GATE_LOG_DECAY
                              ? (float)(u < 0.03 ? -INFINITY : u < 0.1 ? -60.0 * unit()
                                                             : u < 0.5 ? -1e-3 * unit()
                                                                       : -3.0 * unit())
                              : (float)(steep ? 8.0 * unit() - 2.0 : 5.5 * unit() - 4.0);
            }
            const double kk = sp_bf16_to_f32_(x->k[i]), qq = sp_bf16_to_f32_(x->q[i]);
            sk += kk * kk, sq += qq * qq;
        }
        for (int d = 0; d < D; d++) {
            x->kn[t][d] = sp_bf16_to_f32_(x->k[t * D + d]) / sqrt(sk + SP_KDA_EPS);
            x->qn[t][d] = 0.09 * sp_bf16_to_f32_(x->q[t * D + d]) / sqrt(sq + SP_KDA_EPS);
        }
        x->b[t] = t < nt ? (float)(2.0 * unit()) : 0.0f;
    }
    for (int d = 0; d < D; d++) {
        double s = 0;
        for (int t = 0; t < C; t++) x->G[t][d] = s += t < nt ? gate_log2(x, x->g[t * D + d], d) : 0.0;
    }
}

/* Whether some channel decays by more than the factored form's bound, 5
 * nats a token, over one of the chunk's 8-token segments (float64). */
static int beyond_bound(const chunk *x) {
    for (int d = 0; d < D; d++)
        for (int s = 0; s < C / 8; s++) {
            const double before = s ? x->G[8 * s - 1][d] : 0.0;
            if (x->G[8 * s + 7][d] - before < -8 * 5 * 1.4426950408889634) return 1;
        }
    return 0;
}

/* |got - want| within rel |want| (+ the smallest normal: a flushed value) */
static int near(double got, double want, double rel) {
    return fabs(got - want) <= rel * fabs(want) + 1.2e-38;
}

static float A[C * C], QK[C * C], lk[C * D], lq[C * D], r[C * D], cc[D], ee[D];

static void check(const chunk *x, int nt, int steep, int form, int swz) {
    const int got = sp_kda_chunk_emulate_(x->k, x->q, x->g, nt, x->gate, x->lower_bound, x->A_log,
                                          x->dt_bias, x->b, 0.09f, form, swz, A, QK, lk, lq, r, cc,
                                          ee);
    const int safe = form < 0 ? steep : form;
    CHECKF(got == safe, "gate %d nt %d steep %d form %d: took form %d", x->gate, nt, steep, form,
           got);
    /* A and QK: bf16 operands in the factored form, fp32 element by element
     * (within fp32 running sums) in the safe one */
    const double rel = safe ? 2e-4 : 2e-2, relq = safe ? 1e-3 : 2e-2;
    int bad = 0;
    for (int i = 0; i < C; i++)
        for (int j = 0; j < C; j++) {
            double a = 0, sa = 0, q = 0, sq = 0;
            for (int d = 0; d < D && j <= i; d++) {
                const double f = exp2(x->G[i][d] - x->G[j][d]);
                a += x->kn[i][d] * x->kn[j][d] * f, sa += fabs(x->kn[i][d] * x->kn[j][d] * f);
                q += x->qn[i][d] * x->kn[j][d] * f, sq += fabs(x->qn[i][d] * x->kn[j][d] * f);
            }
            const double wa = j < i ? x->b[i] * a : 0.0, ws = j < i ? x->b[i] * sa : 0.0;
            bad += fabs(A[i * C + j] - wa) > rel * ws + 1e-30;
            bad += fabs(QK[i * C + j] - (j <= i ? q : 0.0)) > relq * sq + 1e-30;
        }
    CHECKF(bad == 0, "nt %d steep %d form %d swz %d: %d elements of A, QK off", nt, steep, safe,
           swz, bad);
    /* the operands: referred to token 15 (factored) or to the chunk's ends (safe) */
    bad = 0;
    for (int t = 0; t < C; t++)
        for (int d = 0; d < D; d++) {
            const double lo = safe ? 0.0 : x->G[15][d], hi = safe ? x->G[C - 1][d] : x->G[15][d];
            const double to = exp2(x->G[t][d] - lo), from = exp2(hi - x->G[t][d]);
            bad += !near(lk[t * D + d], x->kn[t][d] * to, 8e-3);
            bad += !near(lq[t * D + d], x->qn[t][d] * to, 8e-3);
            bad += !near(r[t * D + d], x->kn[t][d] * from, 8e-3);
        }
    for (int d = 0; d < D; d++) {
        const double c = safe ? 1.0 : exp2(x->G[15][d]);
        const double e = safe ? exp2(x->G[C - 1][d]) : exp2(x->G[C - 1][d] - x->G[15][d]);
        bad += !near(cc[d], c, 1e-5) + !near(ee[d], e, 1e-5);
    }
    CHECKF(bad == 0, "nt %d steep %d form %d swz %d: %d operand elements off", nt, steep, safe, swz,
           bad);
}

/* A NaN g input stays NaN in its channel's sums (the chunk's decay of the
 * state) and in no other channel's; a partial chunk, so that tokens past
 * the end are taken as 0 beside it. */
static void nan_gate(chunk *x) {
    make(x, 19, SP_KDA_GATE_LOG_DECAY, 0);
    x->g[5 * D + 7] = NAN;
    (void)sp_kda_chunk_emulate_(x->k, x->q, x->g, 19, x->gate, x->lower_bound, x->A_log, x->dt_bias,
                                x->b, 0.09f, -1, 0, A, QK, lk, lq, r, cc, ee);
    int finite = 1;
    for (int d = 0; d < D; d++)
        if (d != 7) finite &= isfinite(cc[d]) && isfinite(ee[d]);
    CHECKF(isnan(ee[7]) && finite, "a NaN gate: channel 7's decay %g, the others finite %d",
           (double)ee[7], finite);
}

/* The one-pass kernel's longest-first order (kda_length_rank): a
 * permutation, lengths non-increasing along it, ties in index order; with
 * ties, zeros and the negative lengths of bad cu_seqlens. */
static void longest_first_order(void) {
    static const int64_t len[] = {33, 300, 0, 95, 300, 7, -4, 161, 64, 0, 300};
    enum { N = sizeof len / sizeof len[0] };
    int64_t order[N];
    for (int i = 0; i < N; i++) order[i] = -1;
    sp_kda_longest_first_order_(len, N, order);
    int seen[N] = {0};
    for (int r = 0; r < N; r++) {
        CHECKF(order[r] >= 0 && order[r] < N && !seen[order[r]], "rank %d: sequence %lld", r,
               (long long)order[r]);
        if (order[r] >= 0 && order[r] < N) seen[order[r]] = 1;
        if (r > 0 && order[r] >= 0 && order[r - 1] >= 0)
            CHECKF(len[order[r - 1]] > len[order[r]] ||
                       (len[order[r - 1]] == len[order[r]] && order[r - 1] < order[r]),
                   "ranks %d, %d out of order", r - 1, r);
    }
    CHECK(order[0] == 1 && order[1] == 4 && order[2] == 10 && order[N - 1] == 6);
}

int main(void) {
    longest_first_order();
    static const int nts[] = {32, 19, 1};
    /* (gate, steep): steep forms must take the safe form, mild ones the factored */
    static const int forms[][2] = {{SP_KDA_GATE_LOWER_BOUND, 0}, {SP_KDA_GATE_SOFTPLUS, 0},
                                   {SP_KDA_GATE_SOFTPLUS, 1}, {SP_KDA_GATE_LOG_DECAY, 1},
                                   {SP_KDA_GATE_LOG_DECAY, 2}};
    chunk *x = malloc(sizeof *x);
    CHECK(x != NULL);
    if (!x) return sp_test_finish("test_kda_chunk_emulated");
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++)
        for (int i = 0; i < 3; i++) {
            make(x, nts[i], forms[f][0], forms[f][1]);
            const int steep = beyond_bound(x);
            CHECKF(steep == !!forms[f][1] || nts[i] < C, "gate %d: a full chunk %s the bound",
                   forms[f][0], steep ? "beyond" : "within");
            for (int swz = 0; swz < 2; swz++) {
                check(x, nts[i], steep, -1, swz); /* the kernels' choice */
                if (!steep) check(x, nts[i], steep, 1, swz); /* the safe form within the bound too */
            }
        }
    nan_gate(x);
    free(x);
    return sp_test_finish("test_kda_chunk_emulated");
}
