/*
 * stridepack_kda.h — the KDA (Kimi Delta Attention) prefill that consumes
 * packed inputs, and the input boundary that packs them first.
 *
 * Usage (one varlen batch, dense inputs, fp32 state pool on the GPU):
 *
 *     sp_kda_args a;
 *     sp_kda_args_init(&a);                      // defaults: K3 gate, lb -5
 *     int64_t x4[4] = {1, T, H, 128}, x3[3] = {1, T, H};
 *     sp_tensor_dense(&a.q, q_dev, SP_BF16, 4, x4, sp_cuda(0));
 *     ...                                        // k, v, g, beta, A_log, ...
 *     if (sp_kda_prefill(&a, stream) != SP_OK)
 *         fprintf(stderr, "%s\n", sp_last_error());
 *
 *     // Strided producers (the K3 layout): let the boundary pack them.
 *     sp_kda_boundary *b;
 *     sp_kda_boundary_create(&b, sp_cuda(0), max_T, H);   // owns a workspace
 *     sp_kda_boundary_run(b, &a_with_strided_views, stream);
 *     sp_kda_boundary_destroy(b);
 *
 * The recurrence, per sequence n (tokens cu_seqlens[n] .. cu_seqlens[n+1])
 * and head h, with state S[K=128][V=128] in fp32 (float64 in the reference):
 *
 *   gate:  g_t = lower_bound * sigmoid(exp(A_log[h]) * (g_raw_t + dt_bias[h,:]))
 *          or, Kimi-Linear: g_t = -exp(A_log[h]) * softplus(g_raw_t + dt_bias[h,:])
 *          or g_t = g_raw_t, a precomputed log-decay (sp_kda_gate)
 *   beta:  b_t = sigmoid(beta_t), 2 sigmoid(beta_t) or beta_t (sp_kda_beta_form)
 *   norm:  q^ = scale * q_t / sqrt(sum q_t^2 + 1e-6),  k^ = k_t / sqrt(sum k_t^2 + 1e-6)
 *   step:  S <- diag(exp(g_t)) S;  u = v_t - S^T k^;  S <- S + b_t k^ u^T;
 *          o_t = S^T q^ (with the updated S)
 *
 * The conventions of stridepack.h hold: every function returns sp_status,
 * sp_last_error() names the argument and the rule, everything is validated
 * before anything is written, nothing exits or prints.
 */
#ifndef STRIDEPACK_KDA_H
#define STRIDEPACK_KDA_H

#include "stridepack.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Head dimension (K and V); the only one supported. */
#define SP_KDA_HEAD_DIM 128

/* Gate variants: how the per-channel log-decay g_t of a token comes from
 * the g input (x = g + dt_bias). Values are fixed; new ones are appended.
 * LOG_DECAY takes g as the log-decay itself (fla's use_gate_in_kernel=False,
 * after an engine's own gate kernel): bf16 or f32, every value <= 0, -inf
 * meaning "forget the channel" (the chunked kernels take a decay below
 * 2^-128 a token as total). A value above 0 is outside the contract and
 * not checked (g lies on the device): the result then depends on the
 * kernel; A_log and dt_bias then do not enter the result
 * (still required, of their shapes). The CPU backend, the reference and the
 * RECURRENT, DECODE and chunked kernels serve every gate (sp_kda_kernel). */
typedef enum sp_kda_gate {
    SP_KDA_GATE_LOWER_BOUND = 0, /* K3: lower_bound * sigmoid(exp(A_log) * x) */
    SP_KDA_GATE_SOFTPLUS = 1,    /* Kimi-Linear: -exp(A_log) * softplus(x) */
    SP_KDA_GATE_LOG_DECAY = 2    /* g itself, precomputed */
} sp_kda_gate;

/* How beta_t comes from the beta input. Values are fixed; new ones are
 * appended. LOGITS_X2 is fla's allow_neg_eigval (b in [0, 2): negative
 * eigenvalues of the state's transition); ACTIVATED takes beta as computed
 * elsewhere, used as given. Every kernel and backend serves all three, beta
 * bf16 or f32. */
typedef enum sp_kda_beta {
    SP_KDA_BETA_LOGITS = 0,    /* b = sigmoid(beta) (the default) */
    SP_KDA_BETA_LOGITS_X2 = 1, /* b = 2 sigmoid(beta) */
    SP_KDA_BETA_ACTIVATED = 2  /* b = beta */
} sp_kda_beta;

/* Which kernel computes a CUDA prefill. Values are fixed; new ones are
 * appended.
 *   RECURRENT: one block per (sequence, head) steps through the tokens one
 *     at a time; fp32 throughout (relative error of o about 2e-5 against
 *     the float64 reference, final state about 1e-7). Serves every call.
 *   CHUNKED: 32 tokens at a time as matrix products on tensor cores (bf16
 *     operands for the products with the 128 channels, tf32 for the 32 x 32
 *     ones, fp32 accumulation, fp32 state; o about 3e-3, final state about
 *     2.4e-3 on K3-contract inputs), one pass: in each block two
 *     warpgroups prepare the operands up to two chunks ahead while two walk
 *     the state; several blocks per (sequence, head) when there are few
 *     pairs. Built for sm_90a and run on one, where a block owns all 128 V
 *     columns, the state's products are warpgroup (wgmma) products; else
 *     mma.sync, same results within the error above. The fastest kernel
 *     from about 33 (sequence, head) pairs on (K3 with 48 to 96 heads a GPU).
 *   CHUNKED_TWO_PASS: the same arithmetic in two kernels: first the
 *     chunk-local products of every chunk in parallel, into a workspace,
 *     then the pass over the chunks. Faster up to about 32
 *     (sequence, head) pairs (one sequence at 4- or 8-way tensor
 *     parallelism: 12 or 24 heads); needs args->workspace
 *     (sp_kda_prefill_workspace_bytes). From about 17 to 28 pairs (on an
 *     H200) the pass leaves room on the GPU, and the second kernel
 *     prepares the last chunks' products beside the pass (a cooperative
 *     launch); the results are the same bits either way.
 *   Both chunked kernels serve CUDA calls with one slot a sequence
 *   (no verify table), a checkpoint interval that is 0 or a multiple of 32,
 *   and q, k, v, g and o 16-byte aligned (strided inputs are by the rule in
 *   sp_kda_args; the boundary's packed copies always are). Every gate and
 *   beta form: K3's (the lower-bound gate, beta bf16 logits) in the builds
 *   measured above; the others in every-gate builds, which compute a chunk
 *   whose decays exceed 5 nats a token on average over 8 tokens
 *   element by element (exact exponents <= 0) instead of factored: the
 *   chunked kernels' bounds above hold (checked on an H200); their time is
 *   docs/TUNING.md's "CHUNKED_EVERY_GATE" (above K3's builds').
 *   DECODE: for few tokens a sequence (decode, speculative verify), laid
 *     out for bandwidth: each state row (the 128 K channels of a V column)
 *     is read once into registers, run through the sequence's tokens and
 *     written once (and after each token a verify table keeps); fp32, o
 *     and the state within fp32 rounding of RECURRENT (the order of the
 *     sums differs). Serves every call of the recurrent kernel but those
 *     with checkpoints, with the pool 16-byte aligned and its slot pitch
 *     a multiple of 16 bytes. Faster than RECURRENT there
 *     (docs/PERFORMANCE.md).
 *   AUTO (the default): DECODE where the sequences average under 8
 *     tokens or the call has a verify table (RECURRENT where DECODE does
 *     not serve it), RECURRENT where the chunked kernels cannot serve the
 *     call; else
 *     CHUNKED_TWO_PASS for at most 32 (sequence, head) pairs when the
 *     workspace given is large enough; else CHUNKED. CPU tensors have one
 *     implementation (the recurrent form); AUTO and RECURRENT select it. */
typedef enum sp_kda_kernel {
    SP_KDA_KERNEL_AUTO = 0,
    SP_KDA_KERNEL_RECURRENT = 1,
    SP_KDA_KERNEL_CHUNKED = 2,
    SP_KDA_KERNEL_CHUNKED_TWO_PASS = 3,
    SP_KDA_KERNEL_DECODE = 4
} sp_kda_kernel;

/* "auto", "recurrent", "chunked", "chunked_two_pass", "decode"; "unknown"
 * otherwise. */
SP_API const char *sp_kda_kernel_name(sp_kda_kernel k);

/* The arguments of one prefill call. T tokens, H heads, N sequences.
 * "Dense" means C-contiguous (sp_tensor_is_dense). All tensors live on one
 * device. */
typedef struct sp_kda_args {
    /* Inputs, bf16. sp_kda_prefill reads q, k, v, g in place when each is
     * dense, or when each (token, head) row of 128 channels is contiguous
     * and 16-byte aligned: innermost stride 1, token and head strides
     * multiples of 8 elements (any sign), data 16-byte aligned — so the
     * column slices of a fused [T, 3 H*128] producer buffer, and the first T
     * rows of a longer one, are read where they lie. beta may have any
     * strides. The boundary takes any strided view and packs only the
     * inputs that break this rule. */
    sp_tensor q;    /* [1, T, H, 128] */
    sp_tensor k;    /* [1, T, H, 128] */
    sp_tensor v;    /* [1, T, H, 128] */
    sp_tensor g;    /* [1, T, H, 128] raw gate input (g_raw); with
                       SP_KDA_GATE_LOG_DECAY the log-decay, bf16 or f32 */
    sp_tensor beta; /* [1, T, H] logits, b_t = sigmoid(beta_t) (see beta_form);
                       bf16, or f32 */

    /* Gate parameters, f32, dense. */
    sp_tensor A_log;   /* [H] */
    sp_tensor dt_bias; /* [H * 128], element [h*128 + d] */
    int32_t gate;      /* sp_kda_gate */
    float lower_bound; /* SP_KDA_GATE_LOWER_BOUND only: in [-5, 0) */
    float scale;       /* multiplies q^; 0 means the default 128^-0.5;
                          otherwise it must be finite */

    /* Sequences: cu_seqlens [N + 1], i64 or i32 (fla's cu_seqlens, vLLM's
     * query_start_loc), dense, non-decreasing, with cu_seqlens[0] >= 0 and
     * cu_seqlens[N] <= T. Rows of o outside every sequence are not
     * written. Every index array below takes either width as well. */
    sp_tensor cu_seqlens;

    /* State pool [slots, H, 128, 128], f32 or bf16, V-first: element
     * [slot, h, j, d] holds S[d][j]. Dims 1..3 dense; the slot pitch
     * strides[0] may be padded (>= H*128*128). A K-first pool (fla's
     * default layout: [slots, H, K, V], element [slot, h, d, j] holds
     * S[d][j]) is passed as its transpose, the same shape with strides
     * (pitch, 128*128, 1, 128): every kernel reads and writes it where it
     * lies, with the same results. state_indices i32 or i64
     * [N], dense: sequence n reads its initial state from slot
     * state_indices[n], in [0, slots), and writes its final state back
     * there; entries in [0, slots) are distinct. A negative entry marks a
     * padded sequence (an engine's CUDA-graph batch padded to its captured
     * size, vLLM's and SGLang's PAD_SLOT_ID -1): it is skipped on every
     * backend, nothing read or written for it (its o rows and checkpoint
     * rows are not written, no slot is touched). A bf16 pool is read to
     * fp32 once and rounded (to nearest even) once when written.
     *
     * Speculative verify (fla's and vLLM's convention): state_indices a
     * table [N, W], dense, i32 or i64. Sequence n (at most W tokens) reads
     * its initial state from slot [n, num_accepted_tokens[n] - 1] (column 0
     * without num_accepted_tokens), and the state after its token t
     * (0-based) goes to slot [n, t]; a negative [n, t] leaves that state
     * unwritten, and a negative [n, 0] marks a padded sequence, skipped as
     * above (its num_accepted_tokens entry is not read). Nothing else is
     * written to the pool. The states are those of running the tokens one
     * call at a time (bit for bit with an f32 pool; with a bf16 pool each
     * written state is the f32 state rounded once). Served by the CPU
     * prefill and the recurrent and decode kernels (not the chunked ones);
     * no checkpoints with a table. Over the sequences not
     * padded, the slots written are distinct and no sequence reads a slot
     * another writes. */
    sp_tensor state;
    sp_tensor state_indices;

    /* Optional checkpoints. With checkpoint_interval = n > 0, sequence i of
     * length L writes floor(L / n) states, the state after each complete
     * interval, to rows checkpoint_cu_starts[i], +1, ... of `checkpoints`
     * [C, H, 128, 128] (dense, the state's dtype, V-first whatever the
     * pool's layout).
     * checkpoint_cu_starts i64 or i32 [N + 1], dense: cu_starts[0] >= 0,
     * cu_starts[i+1] - cu_starts[i] >= floor(L_i / n), cu_starts[N] <= C.
     * With interval 0 both tensors must be left unset (all zero, as
     * sp_kda_args_init leaves them). */
    int64_t checkpoint_interval;
    sp_tensor checkpoint_cu_starts;
    sp_tensor checkpoints;

    /* Output o [1, T, H, 128] bf16, dense. Must not overlap any other
     * argument; nor may the state pool or the checkpoints. */
    sp_tensor o;

    /* sp_kda_kernel; AUTO (0) lets the library choose. Forcing a kernel
     * that cannot serve the call is SP_ERR_UNSUPPORTED. */
    int32_t kernel;

    /* Optional scratch on the tensors' device, for CHUNKED_TWO_PASS (see
     * sp_kda_prefill_workspace_bytes); NULL and 0 without. 16-byte aligned,
     * overlapping no tensor argument; its contents need not be kept
     * between calls. Read and written by the call's kernels only. */
    void *workspace;
    size_t workspace_bytes;

    /* sp_kda_beta: how b_t comes from beta (0, the default: sigmoid). */
    int32_t beta_form;

    /* Optional (unset: every sequence reads its slot): bool [N], dense, as
     * engines mark requests that start fresh. has_initial_state[n] false:
     * sequence n starts from a zero state, its slot not read, only written
     * (a sequence without tokens writes nothing either way). */
    sp_tensor has_initial_state;

    /* Optional, with a verify table only: i32 or i64 [N], dense, each in
     * [1, W] for the sequences not padded (see state_indices). */
    sp_tensor num_accepted_tokens;
} sp_kda_args;

/* 1 when sp_kda_prefill reads the input view x (q, k, v or g) where it
 * lies: x is dense, or each (token, head) row of 128 channels is
 * contiguous and starts 16-byte aligned (innermost stride 1, the token and
 * head strides multiples of 8 elements, data 16-byte aligned; strides of
 * size-1 dims do not matter). 0 otherwise, and for NULL. Only the layout is
 * looked at (the rest of the contract is sp_kda_prefill's). beta is read in
 * place whatever its strides. sp_kda_boundary_run packs exactly the q, k,
 * v, g for which this is 0. */
SP_API int sp_kda_reads_in_place(const sp_tensor *x);

/* Zero every field, then set the defaults: gate SP_KDA_GATE_LOWER_BOUND,
 * lower_bound -5, scale 0 (= 128^-0.5), checkpoint_interval 0 (none),
 * kernel SP_KDA_KERNEL_AUTO, no workspace.
 * @return SP_OK; SP_ERR_INVALID_ARGUMENT for a NULL args. */
SP_API sp_status sp_kda_args_init(sp_kda_args *args);

/* Run the prefill on the tensors' device: one parallel CPU pass over
 * (sequence, head) for CPU tensors; for CUDA tensors, the kernel that
 * args->kernel names or AUTO chooses (see sp_kda_kernel), enqueued on
 * `stream` (one launch; two for CHUNKED_TWO_PASS). Every sum has a fixed
 * order: reruns are bit-identical. Nothing is allocated on the device and
 * nothing is synchronized, so the call can be captured in a CUDA graph.
 *
 * Checked before anything is written, for every tensor (each error names it):
 *   - structure and alignment of `data` to the element size
 *     (SP_ERR_INVALID_ARGUMENT, SP_ERR_OVERFLOW, SP_ERR_MISALIGNED);
 *   - dtypes as above (SP_ERR_DTYPE_MISMATCH);
 *   - ranks and sizes: T, H and N agree everywhere (SP_ERR_SHAPE_MISMATCH);
 *     head dim other than 128 is SP_ERR_UNSUPPORTED;
 *   - layout: q, k, v, g dense or row-strided as described in sp_kda_args,
 *     every other tensor dense (the state pool's slot pitch aside); else
 *     SP_ERR_INVALID_ARGUMENT — packing other views is the boundary's job;
 *     state dims 1..3 dense, pitch >= H*128*128 (SP_ERR_INVALID_ARGUMENT);
 *   - gate, lower_bound in [-5, 0), scale finite, checkpoint_interval >= 0,
 *     checkpoints present exactly when the interval is > 0
 *     (SP_ERR_INVALID_ARGUMENT);
 *   - one device for all (SP_ERR_DEVICE_MISMATCH); a CUDA build and device
 *     for CUDA tensors (SP_ERR_NO_DEVICE);
 *   - o, the state pool and the checkpoints overlap nothing else
 *     (SP_ERR_OVERLAP);
 *   - the index arrays' contents (cu_seqlens monotone and within [0, T],
 *     state_indices below slots and, where not negative (padded), distinct;
 *     with a verify table the rules given at state_indices; checkpoint
 *     rows within C) (SP_ERR_INVALID_ARGUMENT): for CPU tensors only. For
 *     CUDA tensors these arrays live on the device and are not read on the
 *     host; the kernel instead skips (writes nothing for) a sequence whose
 *     token range, slots, num_accepted_tokens entry or checkpoint rows are
 *     out of bounds, a padded one as on the CPU. Distinct slots on CUDA are
 *     the caller's duty (two sequences on one slot race).
 *   - CUDA: N * H (sequence, head) pairs at most 2^31 - 1, else
 *     SP_ERR_UNSUPPORTED; checkpoint rows of different sequences must not
 *     overlap (like distinct slots, the caller's duty: not read on the host).
 * T = 0 or N = 0 is SP_OK with nothing done.
 * @return SP_OK, or the error above; SP_ERR_CUDA for a failed launch;
 *         SP_ERR_OUT_OF_MEMORY if the CPU path cannot get its scratch. */
SP_API sp_status sp_kda_prefill(const sp_kda_args *args, struct CUstream_st *stream);

/* The workspace bytes with which AUTO may choose, and CHUNKED_TWO_PASS
 * can run, for these arguments (their workspace and kernel fields are
 * ignored here); 0 when no kernel that needs one can serve the call. The
 * size grows with T, N and H: (T / 32 + N) * H records of 37508 bytes.
 * @return SP_OK and *bytes; the errors of sp_kda_prefill's checks;
 *         SP_ERR_INVALID_ARGUMENT for a NULL bytes. */
SP_API sp_status sp_kda_prefill_workspace_bytes(const sp_kda_args *args, size_t *bytes);

/* Which kernel sp_kda_prefill would run for `args` (never AUTO): after the
 * same checks as sp_kda_prefill, with the same errors, nothing run.
 * @return SP_OK and *chosen; the errors of sp_kda_prefill; SP_ERR_INVALID_
 *         ARGUMENT for a NULL chosen. */
SP_API sp_status sp_kda_prefill_kernel(const sp_kda_args *args, sp_kda_kernel *chosen);

/* The float64 reference: the recurrence above followed literally, one
 * (sequence, head) at a time, on CPU tensors only (SP_ERR_UNSUPPORTED for
 * CUDA tensors). Same arguments and checks as sp_kda_prefill; results are
 * rounded to their dtypes once, at the end. args->kernel is ignored.
 * Slow: for tests. */
SP_API sp_status sp_kda_prefill_reference(const sp_kda_args *args);

/* ---------------------------------------------------------------------- */
/* The input boundary                                                       */

/* Owns one workspace on one device, sized at creation for the largest call
 * it will serve. Not thread-safe: one boundary per stream of work. */
typedef struct sp_kda_boundary sp_kda_boundary;

/* Create a boundary for `dev` serving calls with T <= max_tokens and
 * H <= max_heads. Allocates, once, the sp_pack workspace for the worst case
 * (q, k, v, g and beta all strided at max_tokens x max_heads): cudaMalloc on
 * a CUDA device, host memory on the CPU. On a CUDA device with max_heads
 * <= 32 it also allocates the CHUNKED_TWO_PASS kernel's workspace,
 * (max_tokens / 32 + 32) * max_heads records of 37508 bytes (about 245 MB
 * for 16384 tokens and 12 heads), used by calls that give none.
 * @return SP_OK and *out; SP_ERR_INVALID_ARGUMENT for a NULL out or negative
 *         capacity; SP_ERR_NO_DEVICE; SP_ERR_OVERFLOW; SP_ERR_OUT_OF_MEMORY;
 *         SP_ERR_CUDA when the device allocation fails otherwise. With a
 *         capacity of 0 nothing is allocated (and the ordinal not tried).
 *         On error *out is set to NULL. */
SP_API sp_status sp_kda_boundary_create(sp_kda_boundary **out, sp_device dev,
                                        int64_t max_tokens, int64_t max_heads);

/* Check the whole contract of sp_kda_prefill on `args` — with q, k, v, g
 * and beta allowed to be any strided views — then pack those of q, k, v, g
 * that sp_kda_prefill cannot read in place (see sp_kda_args) with ONE
 * sp_pack into the owned workspace (no copy at all when it reads every one
 * in place, as for the K3 producer layouts) and run sp_kda_prefill, both on
 * `stream`.
 * When args has no workspace and the boundary owns one for the two-pass
 * kernel (see sp_kda_boundary_create), that one is given to the prefill.
 * The KDA arithmetic is that of sp_kda_prefill: results are bit-identical to
 * sp_kda_prefill on dense copies of the same inputs with the same workspace
 * size (so that AUTO picks the same kernel) or the same forced kernel.
 *
 * Errors, before anything is written: those of sp_kda_prefill (its layout
 * rule for q, k, v, g aside) with the same statuses; SP_ERR_DEVICE_MISMATCH
 * when the tensors are not on the boundary's device; SP_ERR_CAPACITY when
 * T or H exceeds the capacity given at creation; SP_ERR_UNSUPPORTED for
 * an f32 g (a log-decay) that is not read in place (the workspace holds
 * bf16 copies). Only a failed CUDA launch
 * (SP_ERR_CUDA) or, on the CPU, no memory for the prefill's scratch
 * (SP_ERR_OUT_OF_MEMORY) can come after the pack, which by then has written
 * the boundary's own workspace and nothing of the caller's.
 *
 * CUDA graphs. The same function serves the eager and the graph path:
 *   1. warm up: run once eagerly on stream s (not capturing);
 *   2. capture: cudaStreamBeginCapture(s), sp_kda_boundary_run with the same
 *      stream, the same T and the same input views (addresses and strides
 *      of q, k, v, g, beta) as the warm-up, cudaStreamEndCapture. The graph
 *      holds one pack kernel (none when no input needs packing) and the
 *      prefill's kernel (two for CHUNKED_TWO_PASS);
 *   3. replay: write new contents at the same addresses, launch the graph.
 * Enforced during capture (SP_ERR_INVALID_ARGUMENT, nothing recorded): a
 * prior warm-up, the warm-up's stream, T and input views. What cannot be
 * checked is the caller's: keep every captured address alive and unmoved.
 * @return SP_OK or the error above. */
SP_API sp_status sp_kda_boundary_run(sp_kda_boundary *b, const sp_kda_args *args,
                                     struct CUstream_st *stream);

/* Free the workspace and the object. NULL is SP_OK. Call it when no work
 * using the boundary is pending on any stream.
 * @return SP_OK; SP_ERR_CUDA if freeing the device workspace fails (the
 *         object is freed regardless). */
SP_API sp_status sp_kda_boundary_destroy(sp_kda_boundary *b);

/* ---------------------------------------------------------------------- */
/* The inputs boundary: the pack in front of any KDA kernel                 */

/* The input side of the boundary alone, for a KDA prefill that is not
 * stridepack's (FlashKDA, its fork, fla's chunk_kda: kernels that want q,
 * k, v, g [1, T, H, 128] and beta [1, T, H], bf16, dense). Owns or borrows
 * one workspace on one device, sized at creation for the largest call.
 * Not thread-safe: one object per stream of work.
 *
 *     sp_kda_inputs *in;
 *     sp_kda_inputs_create(&in, sp_cuda(0), max_T, H, NULL, 0);  // allocates
 *     sp_tensor views[5] = {q, k, v, g, beta}, dense[5];          // any strides
 *     sp_kda_inputs_pack(in, views, dense, NULL, stream);         // one launch
 *     // ... the other kernel on dense[0..4], on `stream` ...
 *     sp_kda_inputs_destroy(in);
 */
typedef struct sp_kda_inputs sp_kda_inputs;

/* Workspace bytes for q, k, v, g, beta all strided at max_tokens x
 * max_heads (what sp_kda_inputs_create allocates).
 * @return SP_OK and *bytes; SP_ERR_INVALID_ARGUMENT for a NULL bytes or a
 *         negative capacity; SP_ERR_OVERFLOW. */
SP_API sp_status sp_kda_inputs_workspace_bytes(int64_t max_tokens, int64_t max_heads,
                                               size_t *bytes);

/* An inputs boundary for `dev`, serving T <= max_tokens and H <= max_heads.
 * workspace NULL (and workspace_bytes 0): the object allocates its own,
 * once (cudaMalloc on CUDA, host memory on the CPU). Otherwise the caller's
 * memory on `dev` of at least sp_kda_inputs_workspace_bytes bytes, which
 * must outlive the object (a framework's allocation, so that its tensors
 * can view the packed copies). Either way the addresses never change.
 * @return SP_OK and *out; SP_ERR_INVALID_ARGUMENT (NULL out, negative
 *         capacity, a workspace NULL with bytes or bytes 0 with a pointer);
 *         SP_ERR_WORKSPACE_TOO_SMALL; SP_ERR_NO_DEVICE; SP_ERR_OVERFLOW;
 *         SP_ERR_OUT_OF_MEMORY; SP_ERR_CUDA. On error *out is NULL. */
SP_API sp_status sp_kda_inputs_create(sp_kda_inputs **out, sp_device dev, int64_t max_tokens,
                                      int64_t max_heads, void *workspace, size_t workspace_bytes);

/* Check q, k, v, g, beta (in[0..4]) against the KDA input contract — bf16;
 * q, k, v, g of shape [1, T, H, 128] and beta [1, T, H], T and H those of
 * q; every view valid (sizes, strides, element-aligned address) and on the
 * object's device; T <= max_tokens, H <= max_heads — then pack the ones
 * that are not dense with ONE sp_pack into the workspace, on `stream`.
 * out[i] is in[i] itself when that is dense, else a dense view in the
 * workspace (256-byte aligned). No launch when all five are dense, exactly
 * one otherwise. Graph-capturable: the same views give the same out[] on
 * every call, so a captured pack replays with new input contents.
 * @return SP_OK, out[] and *n_copied (may be NULL); on error nothing is
 *         written: SP_ERR_INVALID_ARGUMENT (NULL, bad view),
 *         SP_ERR_DTYPE_MISMATCH, SP_ERR_SHAPE_MISMATCH, SP_ERR_UNSUPPORTED
 *         (a head dim other than 128: the same shape rule and messages as
 *         sp_kda_prefill's), SP_ERR_MISALIGNED, SP_ERR_DEVICE_MISMATCH,
 *         SP_ERR_CAPACITY, SP_ERR_OVERLAP (an input inside the workspace);
 *         SP_ERR_CUDA for a failed launch. */
SP_API sp_status sp_kda_inputs_pack(sp_kda_inputs *p, const sp_tensor in[5], sp_tensor out[5],
                                    size_t *n_copied, struct CUstream_st *stream);

/* Free the object and the workspace it allocated (not a borrowed one). NULL
 * is SP_OK. Call it when no work using the workspace is pending.
 * @return SP_OK; SP_ERR_CUDA if freeing the device workspace fails (the
 *         object is freed regardless). */
SP_API sp_status sp_kda_inputs_destroy(sp_kda_inputs *p);

#ifdef __cplusplus
}
#endif

#endif /* STRIDEPACK_KDA_H */

/* ======================================================================
 * Experimental and testing API: not stable, declared only where
 * SP_EXPERIMENTAL is defined before the include (see stridepack.h).
 * ====================================================================== */
#if defined(SP_EXPERIMENTAL) && !defined(STRIDEPACK_KDA_H_EXPERIMENTAL)
#define STRIDEPACK_KDA_H_EXPERIMENTAL

#ifdef __cplusplus
extern "C" {
#endif

/* How many of q, k, v, g, beta the last successful sp_kda_boundary_run
 * copied (0 when the prefill read every one in place, 0 before any run).
 * @return SP_OK; SP_ERR_INVALID_ARGUMENT for a NULL argument. */
SP_API sp_status sp_kda_boundary_last_copied(const sp_kda_boundary *b, size_t *n_copied);

#ifdef __cplusplus
}
#endif

#endif /* SP_EXPERIMENTAL */
