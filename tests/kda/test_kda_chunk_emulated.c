/*
 * test_kda_chunk_emulated.c — the chunked kernels' K side for one chunk on
 * its host emulation (sp_kda_chunk_emulate_, CUDA builds; no GPU needed):
 * the factored and the safe form's A, QK and operands (Lk, Lq, R, the state
 * scalings c, e) against float64, in both operand layouts (the wgmma
 * build's swizzled one too), for chunks of 32, 19 and 1 tokens with mild
 * and steep decays (down to the floor, 2^-128 a token); and the form the
 * kernels choose: factored within the lower-bound gate's bound, safe
 * beyond it.
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
    float g[C * D], b[C];
    double G[C][D], kn[C][D], qn[C][D]; /* running log2 sums; k, q normalized */
} chunk;

/* steep: log2-decays a twentieth at the floor (-128), some to -86, the rest
 * small; mild: within -0.7 (far inside the factored form's bound). */
static void make(chunk *x, int nt, int steep) {
    for (int t = 0; t < C; t++) {
        double sk = 0, sq = 0;
        for (int d = 0; d < D; d++) {
            const int i = t * D + d;
            float g = 0.0f;
            x->k[i] = x->q[i] = 0;
            if (t < nt) {
                x->k[i] = sp_f32_to_bf16_((float)gauss());
                x->q[i] = sp_f32_to_bf16_((float)gauss());
                const double u = unit();
                g = steep ? (float)(u < 0.05 ? -128.0 : u < 0.2 ? -86.0 * unit()
                                                      : u < 0.6 ? -1e-3 * unit() : -8.0 * unit())
                          : (float)(-0.7 * unit());
            }
            x->g[i] = g;
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
        for (int t = 0; t < C; t++) x->G[t][d] = s += x->g[t * D + d];
    }
}

/* |got - want| within rel |want| (+ the smallest normal: a flushed value) */
static int near(double got, double want, double rel) {
    return fabs(got - want) <= rel * fabs(want) + 1.2e-38;
}

static float A[C * C], QK[C * C], lk[C * D], lq[C * D], r[C * D], cc[D], ee[D];

static void check(const chunk *x, int nt, int steep, int form, int swz) {
    const int got = sp_kda_chunk_emulate_(x->k, x->q, x->g, x->b, 0.09f, form, swz, A, QK, lk, lq,
                                          r, cc, ee);
    const int safe = form < 0 ? steep : form;
    CHECKF(got == safe, "nt %d steep %d form %d: took form %d", nt, steep, form, got);
    /* A and QK: bf16 operands in the factored form, fp32 element by element
     * (within fp32 running sums) in the safe one */
    const double rel = safe ? 1e-4 : 2e-2, relq = safe ? 1e-3 : 2e-2;
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

int main(void) {
    static const int nts[] = {32, 19, 1};
    chunk *x = malloc(sizeof *x);
    CHECK(x != NULL);
    if (!x) return sp_test_finish("test_kda_chunk_emulated");
    for (int i = 0; i < 3; i++)
        for (int steep = 0; steep < 2; steep++) {
            make(x, nts[i], steep);
            for (int swz = 0; swz < 2; swz++) {
                check(x, nts[i], steep, -1, swz); /* the kernels' choice */
                if (!steep) check(x, nts[i], steep, 1, swz); /* the safe form within the bound too */
            }
        }
    free(x);
    return sp_test_finish("test_kda_chunk_emulated");
}
