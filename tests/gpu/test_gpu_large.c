/*
 * test_gpu_large.c — copies of more than 2^31 elements, where 32-bit index
 * math would wrap: the kernel must switch to 64-bit byte offsets (a bf16
 * row slice of 4.3 GB, 16-byte moves) and to 64-bit unit indices (u8
 * gathers of 2^31 + a few elements, with one and with two outer dims).
 * Every destination byte is checked on the host against the definition,
 * and guard bytes on both sides of each destination must survive.
 * Needs about 10 GB of device memory and 10 GB of host memory.
 */
#include "check.h"
#include "cuda_ok.h"
#include "test_support.h"
#include "ts_mem.h"

#include <stdint.h>

enum { GUARD = 4096 };

typedef struct big {
    unsigned char *dsrc, *ddst; /* device: source buffer; guard + destination + guard */
    unsigned char *hsrc, *hdst;
    size_t src_bytes, dst_bytes;
} big;

static void big_make(big *b, size_t src_bytes, size_t dst_bytes, ts_rng *r) {
    b->src_bytes = src_bytes;
    b->dst_bytes = dst_bytes;
    b->hsrc = (unsigned char *)malloc(src_bytes);
    b->hdst = (unsigned char *)malloc(dst_bytes + 2 * GUARD);
    if (!b->hsrc || !b->hdst) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    ts_fill_random(b->hsrc, src_bytes, r);
    ts_fill_random(b->hdst, dst_bytes + 2 * GUARD, r); /* poison, guards included */
    CUDA_OK(cudaMalloc((void **)&b->dsrc, src_bytes));
    CUDA_OK(cudaMalloc((void **)&b->ddst, dst_bytes + 2 * GUARD));
    CUDA_OK(cudaMemcpy(b->dsrc, b->hsrc, src_bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(b->ddst, b->hdst, dst_bytes + 2 * GUARD, cudaMemcpyHostToDevice));
    CUDA_OK(cudaDeviceSynchronize()); /* pageable uploads may still be in flight */
}

static void big_free(big *b) {
    CUDA_OK(cudaFree(b->dsrc));
    CUDA_OK(cudaFree(b->ddst));
    free(b->hsrc);
    free(b->hdst);
}

/* Run one pair, time it, and bring the destination (with guards) back into
 * a fresh host buffer; the poisoned guards are compared here. */
static unsigned char *big_run(big *b, const sp_copy_pair *p, const char *what) {
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    uint64_t before = sp_copy_pass_count();
    CUDA_OK(cudaEventRecord(e0, NULL));
    sp_status st = sp_copy_batch(p, 1, NULL);
    CUDA_OK(cudaEventRecord(e1, NULL));
    CUDA_OK(cudaEventSynchronize(e1));
    CHECKF(st == SP_OK, "%s: %s (%s)", what, sp_status_string(st), sp_last_error());
    CHECK(sp_copy_pass_count() - before == 1);
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
    printf("%s: %.2f ms, %.0f GB/s (read + written)\n", what, ms,
           2.0 * (double)b->dst_bytes / (ms * 1e-3) / 1e9);
    CUDA_OK(cudaEventDestroy(e0));
    CUDA_OK(cudaEventDestroy(e1));
    unsigned char *got = (unsigned char *)malloc(b->dst_bytes + 2 * GUARD);
    if (!got) exit(1);
    CUDA_OK(cudaMemcpy(got, b->ddst, b->dst_bytes + 2 * GUARD, cudaMemcpyDeviceToHost));
    CHECKF(memcmp(got, b->hdst, GUARD) == 0 &&
               memcmp(got + GUARD + b->dst_bytes, b->hdst + GUARD + b->dst_bytes, GUARD) == 0,
           "%s: a guard byte changed", what);
    return got;
}

/* bf16 [R, C] rows of a [R, C + 64] buffer: 2^31 + 3072 elements, 16-byte
 * moves, byte offsets past 2^32. */
static void test_row_slice(ts_rng *r) {
    const int64_t R = ((int64_t)1 << 21) + 3, C = 1024, LD = C + 64;
    big b;
    big_make(&b, (size_t)(R * LD) * 2, (size_t)(R * C) * 2, r);
    int64_t shape[2] = {R, C}, strides[2] = {LD, 1};
    sp_copy_pair p;
    CHECK_OK(sp_tensor_view(&p.src, b.dsrc, 0, SP_BF16, 2, shape, strides, sp_cuda(0)));
    CHECK_OK(sp_tensor_dense(&p.dst, b.ddst + GUARD, SP_BF16, 2, shape, sp_cuda(0)));
    unsigned char *got = big_run(&b, &p, "bf16 [2^21+3, 1024] row slice");
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < R; i++)
        if (memcmp(got + GUARD + (size_t)(i * C) * 2, b.hsrc + (size_t)(i * LD) * 2,
                   (size_t)C * 2) != 0) {
            if (first < 0) first = i;
            bad++;
        }
    CHECKF(bad == 0, "row slice: %lld wrong rows, first %lld", (long long)bad, (long long)first);
    free(got);
    big_free(&b);
}

/* u8 [N, 2] read transposed from a [2, N] buffer: 2^31 + 2 one-byte moves,
 * unit indices past 2^31. */
static void test_transpose(ts_rng *r) {
    const int64_t N = ((int64_t)1 << 30) + 1;
    big b;
    big_make(&b, (size_t)(2 * N), (size_t)(2 * N), r);
    int64_t shape[2] = {N, 2}, strides[2] = {1, N};
    sp_copy_pair p;
    CHECK_OK(sp_tensor_view(&p.src, b.dsrc, 0, SP_U8, 2, shape, strides, sp_cuda(0)));
    CHECK_OK(sp_tensor_dense(&p.dst, b.ddst + GUARD, SP_U8, 2, shape, sp_cuda(0)));
    unsigned char *got = big_run(&b, &p, "u8 [2^30+1, 2] transposed");
    int64_t bad = 0, first = -1;
    const unsigned char *d = got + GUARD;
    for (int64_t i = 0; i < N; i++)
        if (d[2 * i] != b.hsrc[i] || d[2 * i + 1] != b.hsrc[N + i]) {
            if (first < 0) first = i;
            bad++;
        }
    CHECKF(bad == 0, "transpose: %lld wrong rows, first %lld", (long long)bad, (long long)first);
    free(got);
    big_free(&b);
}

/* u8 [2, M, 4] with source strides (1, 10, 2): no two dims merge, so two
 * outer dims remain (the general index path), 2^31 + 8 elements. */
static void test_three_dims(ts_rng *r) {
    const int64_t M = ((int64_t)1 << 28) + 1;
    big b;
    big_make(&b, (size_t)(10 * M), (size_t)(8 * M), r);
    int64_t shape[3] = {2, M, 4}, strides[3] = {1, 10, 2};
    sp_copy_pair p;
    CHECK_OK(sp_tensor_view(&p.src, b.dsrc, 0, SP_U8, 3, shape, strides, sp_cuda(0)));
    CHECK_OK(sp_tensor_dense(&p.dst, b.ddst + GUARD, SP_U8, 3, shape, sp_cuda(0)));
    unsigned char *got = big_run(&b, &p, "u8 [2, 2^28+1, 4] three dims");
    int64_t bad = 0, first = -1;
    const unsigned char *d = got + GUARD;
    for (int64_t a = 0; a < 2; a++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < 4; j++) {
                int64_t lin = (a * M + i) * 4 + j;
                if (d[lin] != b.hsrc[a + 10 * i + 2 * j]) {
                    if (first < 0) first = lin;
                    bad++;
                }
            }
    CHECKF(bad == 0, "three dims: %lld wrong bytes, first %lld", (long long)bad,
           (long long)first);
    free(got);
    big_free(&b);
}

int main(void) {
    (void)ts_mem_or_skip("cuda");
    size_t free_b = 0, total_b = 0;
    CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
    if (free_b < ((size_t)12 << 30)) SP_SKIP("needs 12 GB of free device memory, %zu free", free_b);
    ts_rng r;
    ts_rng_seed(&r, 0x1a29eull);
    test_row_slice(&r);
    test_transpose(&r);
    test_three_dims(&r);
    return sp_test_finish("test_gpu_large");
}
