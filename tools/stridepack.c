/*
 * stridepack — command-line tool.
 *
 *   stridepack demo [--tokens T] [--heads H] [--beta fa|inproj|both]
 *                   [--device auto|cpu|cuda] [--reps N] [--seed S] [--kda-tokens N]
 *   stridepack version
 *   stridepack help
 *
 * `demo` builds the K3 layouts of the KDA input boundary with random bits
 * (q, k, v column slices of a [T, 3P] buffer; beta a column slice of a
 * [T, 128+H] or [T, 4P+128+H] projection; g dense), packs them with one
 * sp_pack, checks every element bit for bit against a naive element-by-element
 * reference, and times the one-pass pack against one copy per tensor and one
 * memcpy of the same bytes. Then it runs the whole input path: the strided
 * views through the KDA input boundary into the prefill, compared bit for bit
 * with the prefill on dense copies. Exit status 0 only if everything matched.
 *
 * Errors are one line, "stridepack: ...", then a pointer to --help; exit 2
 * for a bad command line, 1 for a failed run.
 */
#define _POSIX_C_SOURCE 200809L
#include "demo.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: stridepack demo [options]   pack the K3 KDA inputs (q, k, v, g, beta) in\n"
            "                                   one pass, check them bit for bit, time it\n"
            "       stridepack version          version, and whether CUDA is usable (or why not)\n"
            "       stridepack help             this text (also -h, --help; --version = version)\n"
            "\n"
            "demo options:\n"
            "  -T, --tokens T     tokens, 1..2147483647 (default 2048)\n"
            "  -H, --heads H      heads, 1..1048576; P = 128 * H (default 96)\n"
            "  -b, --beta KIND    beta layout: fa ([T,128+H]), inproj ([T,4P+128+H]),\n"
            "                     or both (default both)\n"
            "  -d, --device DEV   auto, cpu or cuda (default auto: cuda when usable)\n"
            "  -r, --reps N       timed repetitions per arm, 1..100000 (default 20)\n"
            "  -s, --seed S       random seed (default 1)\n"
            "  -k, --kda-tokens N tokens of the end-to-end run (strided inputs ->\n"
            "                     boundary -> KDA prefill); 0 skips it (default: T on\n"
            "                     the GPU, at most 256 on the CPU)\n");
}

/* One line of error, then where to look; @return 2, the exit status. */
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("stridepack: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\ntry 'stridepack --help'\n", stderr);
    return 2;
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

static const struct option longopts[] = {
    {"tokens", required_argument, 0, 'T'}, {"heads", required_argument, 0, 'H'},
    {"beta", required_argument, 0, 'b'},   {"device", required_argument, 0, 'd'},
    {"reps", required_argument, 0, 'r'},   {"seed", required_argument, 0, 's'},
    {"kda-tokens", required_argument, 0, 'k'},
    {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};

/* The option as a user would name it: its long form. */
static const char *option_name(int c) {
    for (const struct option *o = longopts; o->name; o++)
        if (o->val == c) return o->name;
    return "?";
}

/* Integer options: the value's range, and where it goes. */
static int int_option(int c, const char *arg, demo_options *o) {
    int64_t v = 0, lo = 1, hi = INT32_MAX;
    switch (c) {
    case 'H': hi = 1 << 20; break;
    case 'k': lo = 0; break;
    case 'r': hi = 100000; break;
    case 's': lo = 0, hi = INT64_MAX; break;
    default: break;
    }
    if (parse_i64(arg, lo, hi, &v))
        return usage_error("--%s: '%s' is not an integer in %lld..%lld", option_name(c), arg,
                           (long long)lo, (long long)hi);
    switch (c) {
    case 'T': o->T = v; break;
    case 'H': o->H = v; break;
    case 'k': o->kda_tokens = v; break;
    case 'r': o->reps = (int)v; break;
    default: o->seed = (uint64_t)v; break;
    }
    return 0;
}

/* `word` among the names, or -1. */
static int pick(const char *word, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(word, names[i])) return i;
    return -1;
}

static int demo_main(int argc, char **argv) {
    static const char *const betas[] = {"fa", "inproj", "both"};     /* DEMO_BETA_* */
    static const char *const devices[] = {"auto", "cpu", "cuda"}; /* DEMO_DEVICE_* */
    demo_options o = {.T = 2048, .H = 96, .beta = DEMO_BETA_BOTH, .device = DEMO_DEVICE_AUTO,
                      .reps = 20, .seed = 1, .kda_tokens = -1};
    int c, rc;
    optind = 1;
    opterr = 0; /* our own one-line messages */
    while ((c = getopt_long(argc, argv, ":T:H:b:d:r:s:k:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'T': case 'H': case 'k': case 'r': case 's':
            if ((rc = int_option(c, optarg, &o))) return rc;
            break;
        case 'b':
            if ((o.beta = pick(optarg, betas, 3)) < 0)
                return usage_error("--beta: '%s' is not fa, inproj or both", optarg);
            break;
        case 'd':
            if ((o.device = pick(optarg, devices, 3)) < 0)
                return usage_error("--device: '%s' is not auto, cpu or cuda", optarg);
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            return usage_error("option '%s' needs a value", argv[optind - 1]);
        default:
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind != argc) return usage_error("unexpected argument '%s'", argv[optind]);
    return demo_run(&o);
}

static int version_main(void) {
    char cuda[512];
    demo_cuda_describe(cuda, sizeof cuda);
    printf("stridepack %s\nCUDA: %s\n", sp_version(), cuda);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage_error("no command (demo, version or help)");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") || !strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
        if (argc > 2) return usage_error("'%s' takes no arguments", cmd);
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        if (argc > 2) return usage_error("'%s' takes no arguments", cmd);
        return version_main();
    }
    if (!strcmp(cmd, "demo")) return demo_main(argc - 1, argv + 1);
    return usage_error("unknown command '%s' (demo, version or help)", cmd);
}
