/* status.c — status strings, the thread-local last error, version, dtypes,
 * and the pass counter. */
#include "internal.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#define SP_STR_(x) #x
#define SP_XSTR_(x) SP_STR_(x)

unsigned sp_version_number(void) { return SP_VERSION_NUMBER; }

const char *sp_version(void) {
    return SP_XSTR_(SP_VERSION_MAJOR) "." SP_XSTR_(SP_VERSION_MINOR) "." SP_XSTR_(SP_VERSION_PATCH);
}

const char *sp_status_string(sp_status s) {
    switch (s) {
#define SP_STATUS_CASE_(name, value, text) \
    case name: return #name ": " text;
        SP_STATUS_MAP(SP_STATUS_CASE_)
#undef SP_STATUS_CASE_
    }
    return "SP_ERR_UNKNOWN";
}

static _Thread_local char sp_error_text[512];

const char *sp_last_error(void) { return sp_error_text; }

sp_status sp_set_error_(sp_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sp_error_text, sizeof sp_error_text, fmt, ap);
    va_end(ap);
    return s;
}

static const struct {
    size_t size;
    const char *name;
} sp_dtypes[SP_DTYPE_COUNT_] = {
    [SP_BOOL] = {1, "bool"}, [SP_U8] = {1, "u8"},    [SP_I8] = {1, "i8"},
    [SP_U16] = {2, "u16"},   [SP_I16] = {2, "i16"},  [SP_U32] = {4, "u32"},
    [SP_I32] = {4, "i32"},   [SP_U64] = {8, "u64"},  [SP_I64] = {8, "i64"},
    [SP_F16] = {2, "f16"},   [SP_BF16] = {2, "bf16"}, [SP_F32] = {4, "f32"},
    [SP_F64] = {8, "f64"},
};

size_t sp_dtype_size(sp_dtype t) {
    return ((unsigned)t < SP_DTYPE_COUNT_) ? sp_dtypes[t].size : 0;
}

const char *sp_dtype_name(sp_dtype t) {
    return ((unsigned)t < SP_DTYPE_COUNT_) ? sp_dtypes[t].name : "unknown";
}

static atomic_uint_least64_t sp_passes;

void sp_count_pass_(void) { atomic_fetch_add_explicit(&sp_passes, 1, memory_order_relaxed); }

uint64_t sp_copy_pass_count(void) {
    return (uint64_t)atomic_load_explicit(&sp_passes, memory_order_relaxed);
}
