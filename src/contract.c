/*
 * contract.c — the table form of an entry's contract: each tensor argument
 * named once with its rules (dtype, shape, density, whether the call writes
 * it), and the checks that walk such a table in the one order the entries
 * share — alignment and device, then dtypes, then shapes and density, then
 * overlap — with one message format. The KDA prefill (kda/check.c) and the
 * convolution (conv/check.c) describe their arguments this way.
 */
#include "internal.h"

#include <stdio.h>

static sp_status spec_dtype(const sp_spec_ *s, int like, const char *like_name) {
    const int got = s->t->dtype;
    int ok = got == s->dtype;
    if (s->dtype == SP_SPEC_FLOATS) ok = got == SP_F32 || got == SP_BF16;
    if (s->dtype == SP_SPEC_LIKE) ok = got == like;
    if (s->dtype == SP_SPEC_INDEX) ok = got == SP_I32 || got == SP_I64;
    if (ok) return SP_OK;
    if (s->dtype == SP_SPEC_LIKE)
        return sp_set_error_(SP_ERR_DTYPE_MISMATCH, "%s: dtype %s differs from %s's %s", s->name,
                            sp_dtype_name((sp_dtype)got), like_name, sp_dtype_name((sp_dtype)like));
    return sp_set_error_(SP_ERR_DTYPE_MISMATCH, "%s: dtype %s, expected %s", s->name,
                        sp_dtype_name((sp_dtype)got),
                        s->dtype == SP_SPEC_FLOATS  ? "f32 or bf16"
                        : s->dtype == SP_SPEC_INDEX ? "i32 or i64"
                                                    : sp_dtype_name((sp_dtype)s->dtype));
}

sp_status sp_specs_placed_(const sp_spec_ *s, int n, int like, const char *like_name) {
    for (int i = 0; i < n; i++) SP_FORWARD(sp_tensor_check_aligned_(s[i].t, s[i].name));
    if (n == 0) return SP_OK;
    const sp_device dev = s[0].t->device;
    SP_REQUIRE(dev.type == SP_DEVICE_CPU || dev.type == SP_DEVICE_CUDA, SP_ERR_INVALID_ARGUMENT,
               "%s: device type %d is neither CPU nor CUDA", s[0].name, (int)dev.type);
    char where[64];
    snprintf(where, sizeof where, "%s is on", s[0].name);
    for (int i = 1; i < n; i++) SP_FORWARD(sp_check_device_(s[i].t, dev, s[i].name, where));
    for (int i = 0; i < n; i++) SP_FORWARD(spec_dtype(&s[i], like, like_name));
    return SP_OK;
}

sp_status sp_specs_layout_(const sp_spec_ *s, int n) {
    for (int i = 0; i < n; i++) {
        int ok = s[i].t->ndim == s[i].ndim;
        for (int d = 0; ok && d < s[i].ndim; d++)
            ok = s[i].size[d] == SP_SPEC_ANY || s[i].t->shape[d] == s[i].size[d];
        SP_REQUIRE(s[i].ndim == 0 || ok, SP_ERR_SHAPE_MISMATCH, "%s: shape %s, expected %s",
                   s[i].name, sp_shape_text_(s[i].t).s, s[i].shape);
    }
    for (int i = 0; i < n; i++)
        SP_REQUIRE(!s[i].dense || sp_tensor_is_dense(s[i].t), SP_ERR_INVALID_ARGUMENT,
                   "%s: not dense (C-contiguous)", s[i].name);
    return SP_OK;
}

sp_status sp_specs_disjoint_(const sp_spec_ *s, int n) {
    sp_view_ref_ views[SP_SPECS_MAX];
    const char *names[SP_SPECS_MAX];
    SP_REQUIRE(n <= SP_SPECS_MAX, SP_ERR_INVALID_ARGUMENT, "%d tensor arguments", n);
    for (int i = 0; i < n; i++) {
        views[i] = (sp_view_ref_){s[i].t, s[i].output};
        names[i] = s[i].name;
    }
    return sp_check_disjoint_(views, names, (size_t)n);
}
