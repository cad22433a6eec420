/*
 * check.h — the assertions every test uses. A failed CHECK prints where and
 * what, counts, and the test goes on; sp_test_finish() turns the count into
 * the exit status. SP_SKIP exits 77, which ctest reports as "Not Run".
 */
#ifndef SP_CHECK_H
#define SP_CHECK_H

#include "stridepack.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long sp_checks_run_;
static long sp_checks_failed_;

#define CHECK(cond)                                                                 \
    do {                                                                            \
        sp_checks_run_++;                                                           \
        if (!(cond)) {                                                              \
            sp_checks_failed_++;                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                           \
    } while (0)

/* Like CHECK, with a printf-style explanation on failure. */
#define CHECKF(cond, ...)                                                           \
    do {                                                                            \
        sp_checks_run_++;                                                           \
        if (!(cond)) {                                                              \
            sp_checks_failed_++;                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                           \
            fputc('\n', stderr);                                                    \
        }                                                                           \
    } while (0)

/* The call returns `want`; on a mismatch print both and sp_last_error(). */
#define CHECK_STATUS(expr, want)                                                    \
    do {                                                                            \
        sp_status got_ = (expr);                                                    \
        sp_checks_run_++;                                                           \
        if (got_ != (want)) {                                                       \
            sp_checks_failed_++;                                                    \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (last error: %s)\n", \
                    __FILE__, __LINE__, #expr, sp_status_string(got_),               \
                    sp_status_string(want), sp_last_error());                        \
        }                                                                           \
    } while (0)

#define CHECK_OK(expr) CHECK_STATUS(expr, SP_OK)

/* Stop here: this test cannot run on this machine (exit 77). */
#define SP_SKIP(...)                                \
    do {                                            \
        fprintf(stderr, "SKIP: ");                  \
        fprintf(stderr, __VA_ARGS__);               \
        fputc('\n', stderr);                        \
        exit(77);                                   \
    } while (0)

/* Print the tally; return the process exit status (0 only if all passed
 * and at least one check ran). */
/* Overwrite this thread's sp_last_error() with something unrelated, so
 * that a message checked afterwards must come from the call under test. */
static inline void reset_last_error(void) {
    int64_t n;
    (void)sp_tensor_numel(NULL, &n);
}

/* sp_last_error() is set and names `needle` (when given). */
static inline void check_message(const char *what, const char *needle) {
    const char *e = sp_last_error();
    CHECKF(e && e[0], "%s: empty sp_last_error()", what);
    if (needle && e)
        CHECKF(strstr(e, needle) != NULL, "%s: message \"%s\" lacks \"%s\"", what, e, needle);
}

static inline int sp_test_finish(const char *name) {
    if (sp_checks_run_ == 0) {
        fprintf(stderr, "%s: no check ran\n", name);
        return 1;
    }
    printf("%s: %ld checks, %ld failed\n", name, sp_checks_run_, sp_checks_failed_);
    return sp_checks_failed_ ? 1 : 0;
}

#endif /* SP_CHECK_H */
