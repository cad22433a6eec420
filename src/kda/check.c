/*
 * check.c — the KDA prefill contract, checked once for the prefill itself
 * and for the input boundary (which lets q, k, v, g be any strided views
 * because it packs those the prefill cannot read in place). Every
 * violation is its own error naming the argument; nothing but the result
 * struct is written.
 */
#include "kda/kda_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Tensor arguments of one call: q .. state_indices, num_accepted_tokens,
 * has_initial_state, checkpoint_cu_starts, o, state, checkpoints. */
enum { MAX_ARGS = 15 };

int sp_kda_reads_in_place(const sp_tensor *x) {
    if (!x) return 0;
    if (sp_tensor_is_dense(x)) return 1;
    if (x->ndim != 4 || (x->shape[3] > 1 && x->strides[3] != 1)) return 0;
    for (int i = 1; i <= 2; i++)
        if (x->shape[i] > 1 && x->strides[i] % 8 != 0) return 0;
    return (uintptr_t)x->data % 16 == 0;
}

static sp_status require_direct(const sp_tensor *t, const char *name) {
    SP_REQUIRE(sp_kda_reads_in_place(t), SP_ERR_INVALID_ARGUMENT,
               "%s: strides %s at %p are not read in place: the prefill takes dense inputs, or "
               "rows of 128 contiguous channels at 16-byte aligned addresses (token and head "
               "strides multiples of 8 elements); sp_kda_boundary_run packs other views",
               name, sp_strides_text_(t).s, t->data);
    return SP_OK;
}

static sp_status check_scalars(const sp_kda_args *a, int has_ckpt) {
    SP_REQUIRE(a->gate == SP_KDA_GATE_LOWER_BOUND || a->gate == SP_KDA_GATE_SOFTPLUS ||
                   a->gate == SP_KDA_GATE_LOG_DECAY,
               SP_ERR_INVALID_ARGUMENT, "gate: %d is not an sp_kda_gate", (int)a->gate);
    SP_REQUIRE(a->beta_form == SP_KDA_BETA_LOGITS || a->beta_form == SP_KDA_BETA_LOGITS_X2 ||
                   a->beta_form == SP_KDA_BETA_ACTIVATED,
               SP_ERR_INVALID_ARGUMENT, "beta_form: %d is not an sp_kda_beta",
               (int)a->beta_form);
    if (a->gate == SP_KDA_GATE_LOWER_BOUND)
        SP_REQUIRE(a->lower_bound >= -5.0f && a->lower_bound < 0.0f, SP_ERR_INVALID_ARGUMENT,
                   "lower_bound: %g is outside [-5, 0)", (double)a->lower_bound);
    SP_REQUIRE(isfinite(a->scale), SP_ERR_INVALID_ARGUMENT,
               "scale: %g is not finite (0 selects the default 128^-0.5)", (double)a->scale);
    SP_REQUIRE(a->checkpoint_interval >= 0, SP_ERR_INVALID_ARGUMENT,
               "checkpoint_interval: %lld is negative", (long long)a->checkpoint_interval);
    if (a->state_indices.ndim == 2 && a->checkpoint_interval > 0)
        return sp_set_error_(SP_ERR_INVALID_ARGUMENT,
                             "checkpoint_interval: %lld with a verify table (2-D state_indices), "
                             "which writes the state after every token: no checkpoints with it",
                             (long long)a->checkpoint_interval);
    SP_REQUIRE(sp_tensor_set_(&a->num_accepted_tokens) ? a->state_indices.ndim == 2 : 1,
               SP_ERR_INVALID_ARGUMENT,
               "num_accepted_tokens: given with a %d-D state_indices (it picks each sequence's "
               "initial state from a verify table, state_indices [N, W])",
               (int)a->state_indices.ndim);
    if (a->checkpoint_interval == 0) {
        SP_REQUIRE(!has_ckpt, SP_ERR_INVALID_ARGUMENT,
                   "checkpoint_interval: 0 but checkpoints or checkpoint_cu_starts given "
                   "(the interval must be > 0 with checkpoints)");
    } else {
        SP_REQUIRE(sp_tensor_set_(&a->checkpoints), SP_ERR_INVALID_ARGUMENT,
                   "checkpoints: missing with checkpoint_interval %lld",
                   (long long)a->checkpoint_interval);
        SP_REQUIRE(sp_tensor_set_(&a->checkpoint_cu_starts), SP_ERR_INVALID_ARGUMENT,
                   "checkpoint_cu_starts: missing with checkpoint_interval %lld",
                   (long long)a->checkpoint_interval);
    }
    return SP_OK;
}

/* t has q's shape, [1, T, H, 128]. */
static sp_status same_as_q(const sp_tensor *t, const char *name, const sp_tensor *q) {
    int ok = t->ndim == 4;
    for (int i = 0; ok && i < 4; i++) ok = t->shape[i] == q->shape[i];
    if (!ok)
        return sp_set_error_(SP_ERR_SHAPE_MISMATCH, "%s: shape %s differs from q %s", name,
                            sp_shape_text_(t).s, sp_shape_text_(q).s);
    return SP_OK;
}

sp_status sp_kda_check_inputs_(const sp_tensor *const in[5], int64_t *T, int64_t *H) {
    static const char *const names[5] = {"q", "k", "v", "g", "beta"};
    const sp_tensor *q = in[0];
    SP_REQUIRE(q->ndim == 4 && q->shape[0] == 1, SP_ERR_SHAPE_MISMATCH,
               "q: shape %s, expected [1, T, H, 128] (batch 1, varlen)", sp_shape_text_(q).s);
    SP_REQUIRE(q->shape[3] == SP_KDA_D, SP_ERR_UNSUPPORTED,
               "q: head dim %lld is not supported (only 128)", (long long)q->shape[3]);
    *T = q->shape[1];
    *H = q->shape[2];
    /* With T = 0 q holds no element and its H is unchecked so far. */
    SP_REQUIRE(*H <= INT64_MAX / (SP_KDA_D * SP_KDA_D), SP_ERR_OVERFLOW,
               "q: H = %lld heads overflow H * 128 * 128 (int64)", (long long)*H);
    for (int i = 1; i < 4; i++) SP_FORWARD(same_as_q(in[i], names[i], q));
    const sp_tensor *beta = in[4];
    const int ok = beta->ndim == 3 && beta->shape[0] == 1 && beta->shape[1] == *T &&
                   beta->shape[2] == *H;
    SP_REQUIRE(ok, SP_ERR_SHAPE_MISMATCH, "beta: shape %s, expected [1, %lld, %lld] (q's T, H)",
               sp_shape_text_(beta).s, (long long)*T, (long long)*H);
    return SP_OK;
}

/* The dims every other shape rule is stated in: T, H from the inputs
 * (sp_kda_check_inputs_, o as q), N from cu_seqlens, slots and C from the
 * pools (their own shapes are rows of the table, checked after this). */
static sp_status read_dims(const sp_kda_args *a, sp_kda_dims *d) {
    const sp_tensor *const in[5] = {&a->q, &a->k, &a->v, &a->g, &a->beta};
    SP_FORWARD(sp_kda_check_inputs_(in, &d->T, &d->H));
    SP_FORWARD(same_as_q(&a->o, "o", &a->q));
    SP_REQUIRE(a->cu_seqlens.ndim == 1 && a->cu_seqlens.shape[0] >= 1, SP_ERR_SHAPE_MISMATCH,
               "cu_seqlens: shape %s, expected [N + 1] with N >= 0",
               sp_shape_text_(&a->cu_seqlens).s);
    d->N = a->cu_seqlens.shape[0] - 1;
    d->slots = a->state.ndim == 4 ? a->state.shape[0] : 0;
    d->C = d->interval > 0 && a->checkpoints.ndim == 4 ? a->checkpoints.shape[0] : 0;
    return SP_OK;
}

/* Dims 1..3 of the pool dense, or (the state pool only) dims 2 and 3
 * swapped: a K-first pool [slots, H, K, V] seen through its transpose; the
 * slot pitch may be padded but not short. */
static sp_status check_state_layout(const sp_tensor *s, const char *name, sp_kda_dims *d,
                                    int pool) {
    const int64_t slot = d->H * SP_KDA_D * SP_KDA_D;
    const int heads_dense = d->H <= 1 || s->strides[1] == SP_KDA_D * SP_KDA_D;
    const int k_first = pool && s->strides[2] == 1 && s->strides[3] == SP_KDA_D;
    SP_REQUIRE(heads_dense && ((s->strides[3] == 1 && s->strides[2] == SP_KDA_D) || k_first),
               SP_ERR_INVALID_ARGUMENT,
               "%s: strides of dims 1..3 are (%lld, %lld, %lld), expected dense (%lld, 128, 1)%s",
               name, (long long)s->strides[1], (long long)s->strides[2], (long long)s->strides[3],
               (long long)(SP_KDA_D * SP_KDA_D),
               pool ? ", or (16384, 1, 128): a K-first pool's transpose" : "");
    if (pool) {
        int64_t pitch = s->shape[0] > 1 ? s->strides[0] : slot;
        SP_REQUIRE(pitch >= slot, SP_ERR_INVALID_ARGUMENT,
                   "%s: slot pitch %lld elements is below H*128*128 = %lld", name,
                   (long long)pitch, (long long)slot);
        d->pitch = pitch;
        d->state_k_first = k_first;
    } else {
        SP_REQUIRE(sp_tensor_is_dense(s), SP_ERR_INVALID_ARGUMENT, "%s: not dense (C-contiguous)",
                   name);
    }
    return SP_OK;
}

/* The optional workspace: present exactly when it has a size, 16-byte
 * aligned, sharing no byte with any tensor argument. */
static sp_status check_workspace(const sp_kda_args *a, const sp_spec_ *all, int n) {
    if (a->workspace_bytes == 0) {
        SP_REQUIRE(a->workspace == NULL, SP_ERR_INVALID_ARGUMENT,
                   "workspace: given with workspace_bytes 0");
        return SP_OK;
    }
    SP_REQUIRE(a->workspace != NULL, SP_ERR_INVALID_ARGUMENT,
               "workspace: NULL with workspace_bytes %zu", a->workspace_bytes);
    const uintptr_t lo = (uintptr_t)a->workspace;
    SP_REQUIRE(lo % 16 == 0, SP_ERR_MISALIGNED, "workspace: address %p is not 16-byte aligned",
               a->workspace);
    SP_REQUIRE(a->workspace_bytes <= UINTPTR_MAX - lo, SP_ERR_OVERFLOW,
               "workspace: %zu bytes from %p pass the end of the address space",
               a->workspace_bytes, a->workspace);
    /* The workspace as a byte view, written, against every tensor as read:
     * only the pairs (workspace, tensor) are tested. */
    SP_REQUIRE((uint64_t)a->workspace_bytes <= (uint64_t)INT64_MAX, SP_ERR_OVERFLOW,
               "workspace: %zu bytes exceed the int64 size of a view", a->workspace_bytes);
    const int64_t bytes = (int64_t)a->workspace_bytes, one = 1;
    sp_tensor ws;
    SP_FORWARD(sp_tensor_view(&ws, a->workspace, 0, SP_U8, 1, &bytes, &one, a->q.device));
    sp_view_ref_ views[MAX_ARGS + 1];
    const char *names[MAX_ARGS + 1];
    views[0] = (sp_view_ref_){&ws, 1};
    names[0] = "workspace";
    for (int i = 0; i < n; i++) {
        views[i + 1] = (sp_view_ref_){all[i].t, 0};
        names[i + 1] = all[i].name;
    }
    return sp_check_disjoint_(views, names, (size_t)n + 1);
}

/* A slot the call writes, and the sequence that writes it. */
typedef struct slot_use {
    int64_t slot, n;
} slot_use;

static int cmp_use(const void *x, const void *y) {
    const slot_use *a = x, *b = y;
    if (a->slot != b->slot) return (a->slot > b->slot) - (a->slot < b->slot);
    return (a->n > b->n) - (a->n < b->n);
}

/* The sequence writing `slot` other than n, or -1 (uses sorted, u of them). */
static int64_t writer_other_than(const slot_use *uses, int64_t u, int64_t slot, int64_t n) {
    int64_t lo = 0, hi = u;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (uses[mid].slot < slot) lo = mid + 1;
        else hi = mid;
    }
    for (; lo < u && uses[lo].slot == slot; lo++)
        if (uses[lo].n != n) return uses[lo].n;
    return -1;
}

/* A verify table's row n (not padded): its length, accepted count and
 * entries within their bounds. */
static sp_status check_table_row(const sp_kda_index_ *x, int64_t n, int64_t len) {
    const int64_t W = x->width, row = n * W;
    SP_REQUIRE(len <= W, SP_ERR_INVALID_ARGUMENT,
               "state_indices: sequence %lld has %lld tokens, more than the verify table's %lld "
               "columns",
               (long long)n, (long long)len, (long long)W);
    const int64_t acc = x->accepted.at ? sp_index_at_(x->accepted, n) : 1;
    SP_REQUIRE(acc >= 1 && acc <= W, SP_ERR_INVALID_ARGUMENT,
               "num_accepted_tokens: [%lld] = %lld is outside [1, %lld] (the verify table's width)",
               (long long)n, (long long)acc, (long long)W);
    const int64_t read = sp_index_at_(x->slot, row + acc - 1);
    SP_REQUIRE(read >= 0 && read < x->slots, SP_ERR_INVALID_ARGUMENT,
               "state_indices: [%lld, %lld] = %lld, the slot of sequence %lld's initial state "
               "(column num_accepted_tokens - 1), is outside [0, %lld)",
               (long long)n, (long long)(acc - 1), (long long)read, (long long)n,
               (long long)x->slots);
    for (int64_t t = 0; t < len; t++) {
        const int64_t e = sp_index_at_(x->slot, row + t);
        SP_REQUIRE(e < x->slots, SP_ERR_INVALID_ARGUMENT,
                   "state_indices: [%lld, %lld] = %lld is outside [0, %lld) (state slots; a "
                   "negative entry leaves that token's state unwritten)",
                   (long long)n, (long long)t, (long long)e, (long long)x->slots);
    }
    return SP_OK;
}

/* Every slot the call writes is written once, and no sequence reads a slot
 * another one writes. One slot a sequence: the entries that are not
 * negative (padded) are distinct. A verify table: over the rows that are
 * not padded, the entries of the tokens' columns that are not negative. */
static sp_status check_slots_disjoint(const sp_kda_index_ *x, int64_t N) {
    const int64_t per = x->width > 0 ? x->width : 1;
    if (N == 0) return SP_OK;
    slot_use *uses = malloc((size_t)(N * per) * sizeof *uses);
    SP_REQUIRE(uses, SP_ERR_OUT_OF_MEMORY, "state_indices: no memory to check distinctness");
    int64_t u = 0;
    for (int64_t n = 0; n < N; n++) {
        if (sp_index_at_(x->slot, n * per) < 0) continue; /* padded */
        const int64_t len = sp_index_at_(x->cu, n + 1) - sp_index_at_(x->cu, n);
        const int64_t cols = x->width > 0 ? len : 1;
        for (int64_t t = 0; t < cols; t++) {
            const int64_t e = sp_index_at_(x->slot, n * per + t);
            if (e >= 0) uses[u++] = (slot_use){e, n};
        }
    }
    qsort(uses, (size_t)u, sizeof *uses, cmp_use);
    sp_status st = SP_OK;
    for (int64_t i = 1; i < u && st == SP_OK; i++)
        if (uses[i].slot == uses[i - 1].slot)
            st = uses[i].n == uses[i - 1].n
                     ? sp_set_error_(SP_ERR_INVALID_ARGUMENT,
                                     "state_indices: slot %lld is written twice by sequence %lld",
                                     (long long)uses[i].slot, (long long)uses[i].n)
                     : sp_set_error_(SP_ERR_INVALID_ARGUMENT,
                                     "state_indices: slot %lld is used by sequences %lld and %lld",
                                     (long long)uses[i].slot, (long long)uses[i - 1].n,
                                     (long long)uses[i].n);
    /* With a table a sequence may read a slot that is not its own column. */
    for (int64_t n = 0; n < N && st == SP_OK && x->width > 0; n++) {
        sp_kda_seq_ sq;
        if (!sp_kda_sequence_(x, n, &sq) || sq.read < 0 || sq.len == 0) continue;
        const int64_t other = writer_other_than(uses, u, sq.read, n);
        if (other >= 0)
            st = sp_set_error_(SP_ERR_INVALID_ARGUMENT,
                               "state_indices: slot %lld holds sequence %lld's initial state and "
                               "is written by sequence %lld",
                               (long long)sq.read, (long long)n, (long long)other);
    }
    free(uses);
    return st;
}

/* Contents of the index arrays, readable here because they are host memory. */
static sp_status check_host_indices(const sp_kda_args *a, const sp_kda_dims *d) {
    const sp_kda_index_ x = sp_kda_index_of_(a, d);
    const int64_t cu0 = sp_index_at_(x.cu, 0);
    SP_REQUIRE(cu0 >= 0, SP_ERR_INVALID_ARGUMENT, "cu_seqlens: [0] = %lld is negative",
               (long long)cu0);
    for (int64_t n = 0; n < d->N; n++) {
        const int64_t lo = sp_index_at_(x.cu, n), hi = sp_index_at_(x.cu, n + 1);
        SP_REQUIRE(hi >= lo, SP_ERR_INVALID_ARGUMENT,
                   "cu_seqlens: decreases at [%lld] (%lld < %lld)", (long long)(n + 1),
                   (long long)hi, (long long)lo);
    }
    const int64_t cuN = sp_index_at_(x.cu, d->N);
    SP_REQUIRE(cuN <= d->T, SP_ERR_INVALID_ARGUMENT, "cu_seqlens: [N] = %lld exceeds T = %lld",
               (long long)cuN, (long long)d->T);
    /* A negative entry (the first of a table's row) marks a padded sequence,
     * skipped; the others name slots of the pool. */
    for (int64_t n = 0; n < d->N; n++) {
        if (d->width > 0) {
            if (sp_index_at_(x.slot, n * d->width) < 0) continue;
            const int64_t len = sp_index_at_(x.cu, n + 1) - sp_index_at_(x.cu, n);
            SP_FORWARD(check_table_row(&x, n, len));
        } else {
            const int64_t e = sp_index_at_(x.slot, n);
            SP_REQUIRE(e < d->slots, SP_ERR_INVALID_ARGUMENT,
                       "state_indices: [%lld] = %lld is outside [0, %lld) (state slots; a "
                       "negative entry marks a padded sequence)",
                       (long long)n, (long long)e, (long long)d->slots);
        }
    }
    SP_FORWARD(check_slots_disjoint(&x, d->N));
    if (d->interval > 0) {
        const int64_t cs0 = sp_index_at_(x.cu_starts, 0);
        SP_REQUIRE(cs0 >= 0, SP_ERR_INVALID_ARGUMENT,
                   "checkpoint_cu_starts: [0] = %lld is negative", (long long)cs0);
        for (int64_t n = 0; n < d->N; n++) {
            const int64_t len = sp_index_at_(x.cu, n + 1) - sp_index_at_(x.cu, n);
            const int64_t need = len / d->interval;
            const int64_t lo = sp_index_at_(x.cu_starts, n), hi = sp_index_at_(x.cu_starts, n + 1);
            SP_REQUIRE(hi >= lo, SP_ERR_INVALID_ARGUMENT,
                       "checkpoint_cu_starts: decreases at [%lld] (%lld < %lld)",
                       (long long)(n + 1), (long long)hi, (long long)lo);
            /* lo >= cs0 >= 0 here, so the difference fits. */
            SP_REQUIRE(hi - lo >= need, SP_ERR_INVALID_ARGUMENT,
                       "checkpoint_cu_starts: sequence %lld needs %lld rows, [%lld..%lld) "
                       "gives %lld",
                       (long long)n, (long long)need, (long long)lo, (long long)hi,
                       (long long)(hi - lo));
        }
        const int64_t csN = sp_index_at_(x.cu_starts, d->N);
        SP_REQUIRE(csN <= d->C, SP_ERR_INVALID_ARGUMENT,
                   "checkpoint_cu_starts: [N] = %lld exceeds the %lld checkpoint rows",
                   (long long)csN, (long long)d->C);
    }
    return SP_OK;
}

sp_kda_index_ sp_kda_index_of_(const sp_kda_args *a, const sp_kda_dims *d) {
    sp_kda_index_ x;
    memset(&x, 0, sizeof x);
    x.cu = sp_index_of_(&a->cu_seqlens);
    x.slot = sp_index_of_(&a->state_indices);
    if (sp_tensor_set_(&a->num_accepted_tokens)) x.accepted = sp_index_of_(&a->num_accepted_tokens);
    if (d->interval > 0) x.cu_starts = sp_index_of_(&a->checkpoint_cu_starts);
    if (sp_tensor_set_(&a->has_initial_state))
        x.has_init = (const uint8_t *)a->has_initial_state.data;
    x.width = d->width;
    x.T = d->T;
    x.slots = d->slots;
    x.C = d->C;
    x.interval = d->interval;
    return x;
}

sp_status sp_kda_check_(const sp_kda_args *a, int inputs_direct, sp_kda_dims *dims) {
    SP_REQUIRE(a, SP_ERR_INVALID_ARGUMENT, "args: NULL");
    SP_REQUIRE(dims, SP_ERR_INVALID_ARGUMENT, "dims: NULL");
    sp_kda_dims d;
    memset(&d, 0, sizeof d);
    const int has_ckpt =
        sp_tensor_set_(&a->checkpoints) || sp_tensor_set_(&a->checkpoint_cu_starts);
    SP_FORWARD(check_scalars(a, has_ckpt));
    d.interval = a->checkpoint_interval;
    d.scale = a->scale != 0.0f ? a->scale : (float)(1.0 / sqrt((double)SP_KDA_D));

    /* The arguments as named specs: dtype, shape (the inputs', o's and
     * cu_seqlens': read_dims, which the other rows are stated in), density,
     * whether the call writes them. q first (every device is q's). */
    sp_spec_ all[MAX_ARGS];
    int n = 0;
    const sp_tensor *bf16_in[5] = {&a->q, &a->k, &a->v, &a->g, &a->beta};
    static const char *const in_names[5] = {"q", "k", "v", "g", "beta"};
    for (int i = 0; i < 5; i++)
        all[n++] = (sp_spec_){bf16_in[i], in_names[i], SP_BF16, 0, {0}, NULL, 0, 0};
    if (a->gate == SP_KDA_GATE_LOG_DECAY) all[3].dtype = SP_SPEC_FLOATS; /* g: bf16 or f32 */
    all[4].dtype = SP_SPEC_FLOATS;                                        /* beta: bf16 or f32 */
    const int i_alog = n;
    all[n++] = (sp_spec_){&a->A_log, "A_log", SP_F32, 1, {0}, "[H] as q", 1, 0};
    all[n++] = (sp_spec_){&a->dt_bias, "dt_bias", SP_F32, 1, {0}, "[H * 128] as q", 1, 0};
    all[n++] = (sp_spec_){&a->cu_seqlens, "cu_seqlens", SP_SPEC_INDEX, 0, {0}, NULL, 1, 0};
    const int table = a->state_indices.ndim == 2; /* a verify table [N, W] */
    const int i_idx = n;
    all[n++] = (sp_spec_){&a->state_indices, "state_indices", SP_SPEC_INDEX, table ? 2 : 1, {0},
                          "[N] or a verify table [N, W] (N + 1 = cu_seqlens' size)", 1, 0};
    const int i_acc = sp_tensor_set_(&a->num_accepted_tokens) ? n : -1;
    if (i_acc >= 0)
        all[n++] = (sp_spec_){&a->num_accepted_tokens, "num_accepted_tokens", SP_SPEC_INDEX, 1,
                              {0}, "[N] (N + 1 = cu_seqlens' size)", 1, 0};
    const int i_init = sp_tensor_set_(&a->has_initial_state) ? n : -1;
    if (i_init >= 0)
        all[n++] = (sp_spec_){&a->has_initial_state, "has_initial_state", SP_BOOL, 1, {0},
                              "[N] (N + 1 = cu_seqlens' size)", 1, 0};
    const int i_starts = d.interval > 0 ? n : -1;
    if (i_starts >= 0)
        all[n++] = (sp_spec_){&a->checkpoint_cu_starts, "checkpoint_cu_starts", SP_SPEC_INDEX, 1,
                              {0}, "[N + 1] as cu_seqlens", 1, 0};
    all[n++] = (sp_spec_){&a->o, "o", SP_BF16, 0, {0}, NULL, 1, 1};
    /* The pools: their strides are check_state_layout's (a padded slot pitch). */
    char state_rule[64], ckpt_rule[64];
    const int i_state = n;
    all[n++] = (sp_spec_){&a->state, "state", SP_SPEC_FLOATS, 4, {0}, state_rule, 0, 1};
    if (d.interval > 0)
        all[n++] = (sp_spec_){&a->checkpoints, "checkpoints", SP_SPEC_LIKE, 4, {0}, ckpt_rule,
                              0, 1};
    SP_FORWARD(sp_specs_placed_(all, n, a->state.dtype, "state"));
    d.dev = a->q.device;
    d.state_bf16 = a->state.dtype == SP_BF16;

    SP_FORWARD(read_dims(a, &d));
    const int64_t H = d.H, pool[4] = {SP_SPEC_ANY, H, SP_KDA_D, SP_KDA_D};
    all[i_alog].size[0] = H;                /* A_log */
    all[i_alog + 1].size[0] = H * SP_KDA_D; /* dt_bias; no overflow: read_dims bounds H */
    all[i_idx].size[0] = d.N; /* state_indices; a verify table's width is free */
    all[i_idx].size[1] = SP_SPEC_ANY;
    if (i_acc >= 0) all[i_acc].size[0] = d.N;
    if (i_init >= 0) all[i_init].size[0] = d.N;
    if (i_starts >= 0) all[i_starts].size[0] = d.N + 1;
    snprintf(state_rule, sizeof state_rule, "[slots, H, 128, 128] with H %lld", (long long)H);
    snprintf(ckpt_rule, sizeof ckpt_rule, "[C, H, 128, 128] with H %lld", (long long)H);
    for (int i = i_state; i < n; i++) memcpy(all[i].size, pool, sizeof pool);

    if (inputs_direct)
        for (int i = 0; i < 4; i++) SP_FORWARD(require_direct(all[i].t, all[i].name));
    SP_FORWARD(sp_specs_layout_(all, n));
    d.width = table ? a->state_indices.shape[1] : 0;
    SP_REQUIRE(!table || d.width > 0, SP_ERR_SHAPE_MISMATCH,
               "state_indices: a verify table %s has no column (W >= 1)",
               sp_shape_text_(&a->state_indices).s);
    SP_FORWARD(check_state_layout(&a->state, "state", &d, 1));
    if (d.interval > 0) SP_FORWARD(check_state_layout(&a->checkpoints, "checkpoints", &d, 0));

    SP_FORWARD(sp_specs_disjoint_(all, n));
    SP_FORWARD(check_workspace(a, all, n));

    if (d.dev.type == SP_DEVICE_CUDA) {
        /* Here rather than at the launch: the boundary packs between the two. */
        SP_FORWARD(sp_check_device_usable_(d.dev));
        SP_REQUIRE(d.H == 0 || d.N <= INT32_MAX / d.H, SP_ERR_UNSUPPORTED,
                   "cu_seqlens: N * H = %lld * %lld blocks exceed one launch (2^31 - 1)",
                   (long long)d.N, (long long)d.H);
    }
    if (d.dev.type == SP_DEVICE_CPU) SP_FORWARD(check_host_indices(a, &d));
    SP_FORWARD(sp_kda_plan_(a, &d, &d.plan));
    *dims = d;
    return SP_OK;
}
