/*
 * stridepack — command-line tool.
 *
 *   stridepack demo [--tokens T] [--heads H] [--beta fa|inproj|both]
 *                   [--device auto|cpu|cuda] [--reps N] [--seed S]
 *   stridepack version
 *
 * `demo` builds the K3 layouts of the KDA input boundary with random bits
 * (q, k, v column slices of a [T, 3P] buffer; beta a column slice of a
 * [T, 128+H] or [T, 4P+128+H] projection; g dense), packs them with one
 * sp_pack, checks every element bit for bit against a naive element-by-element
 * reference, and times the one-pass pack against one copy per tensor and one
 * memcpy of the same bytes. Then it runs the whole input path: the strided
 * views through the KDA input boundary into the prefill, compared bit for bit
 * with the prefill on dense copies. Exit status 0 only if everything matched.
 */
#define _POSIX_C_SOURCE 200809L
#include "demo.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: stridepack demo [options]\n"
            "       stridepack version\n"
            "\n"
            "demo: pack the K3 KDA boundary inputs (q, k, v, g, beta) in one pass,\n"
            "verify them bit for bit and time the pack against per-tensor copies.\n"
            "\n"
            "options:\n"
            "  -T, --tokens T     tokens (default 2048)\n"
            "  -H, --heads H      heads; P = 128 * H (default 96)\n"
            "  -b, --beta KIND    beta layout: fa ([T,128+H]), inproj ([T,4P+128+H]),\n"
            "                     or both (default both)\n"
            "  -d, --device DEV   auto, cpu or cuda (default auto: cuda when usable)\n"
            "  -r, --reps N       timed repetitions per arm, 1..100000 (default 20)\n"
            "  -s, --seed S       random seed (default 1)\n"
            "  -k, --kda-tokens N tokens of the end-to-end run (strided inputs ->\n"
            "                     boundary -> KDA prefill); 0 skips it (default: T on\n"
            "                     the GPU, at most 256 on the CPU)\n"
            "  -h, --help         this text\n");
}

/* A decimal integer in [lo, hi]; -1 for anything else (overflow included). */
static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno == ERANGE || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int demo_main(int argc, char **argv) {
    demo_options o = {.T = 2048, .H = 96, .beta = DEMO_BETA_BOTH, .device = DEMO_DEVICE_AUTO,
                      .reps = 20, .seed = 1, .kda_tokens = -1};
    static const struct option longopts[] = {
        {"tokens", required_argument, 0, 'T'}, {"heads", required_argument, 0, 'H'},
        {"beta", required_argument, 0, 'b'},   {"device", required_argument, 0, 'd'},
        {"reps", required_argument, 0, 'r'},   {"seed", required_argument, 0, 's'},
        {"kda-tokens", required_argument, 0, 'k'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    int c;
    int64_t v;
    optind = 1;
    while ((c = getopt_long(argc, argv, "T:H:b:d:r:s:k:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'T':
            if (parse_i64(optarg, 0, INT32_MAX, &o.T)) goto bad;
            break;
        case 'H':
            if (parse_i64(optarg, 1, 1 << 20, &o.H)) goto bad;
            break;
        case 'k':
            if (parse_i64(optarg, 0, INT32_MAX, &o.kda_tokens)) goto bad;
            break;
        case 'r':
            if (parse_i64(optarg, 1, 100000, &v)) goto bad;
            o.reps = (int)v;
            break;
        case 's':
            if (parse_i64(optarg, 0, INT64_MAX, &v)) goto bad;
            o.seed = (uint64_t)v;
            break;
        case 'b':
            if (!strcmp(optarg, "fa")) o.beta = DEMO_BETA_FA;
            else if (!strcmp(optarg, "inproj")) o.beta = DEMO_BETA_INPROJ;
            else if (!strcmp(optarg, "both")) o.beta = DEMO_BETA_BOTH;
            else goto bad;
            break;
        case 'd':
            if (!strcmp(optarg, "auto")) o.device = DEMO_DEVICE_AUTO;
            else if (!strcmp(optarg, "cpu")) o.device = DEMO_DEVICE_CPU;
            else if (!strcmp(optarg, "cuda")) o.device = DEMO_DEVICE_CUDA;
            else goto bad;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "stridepack demo: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    return demo_run(&o);
bad:
    fprintf(stderr, "stridepack demo: bad value '%s' for -%c\n", optarg, c);
    usage(stderr);
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        printf("stridepack %s (CUDA %s)\n", sp_version(),
               sp_cuda_available() ? "available" : "not available");
        return 0;
    }
    if (!strcmp(argv[1], "demo")) return demo_main(argc - 1, argv + 1);
    fprintf(stderr, "stridepack: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
