/* example.c — the README's example: make dense copies of two strided views
 * (column slices of one [T, 3P] buffer, as a fused convolution leaves q and
 * k) with one sp_pack. Built and run by the tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stridepack.h"

int main(void) {
    enum { T = 64, H = 4, P = H * 128 };
    uint16_t *qkv = malloc(sizeof *qkv * T * 3 * P); /* bf16 bits */
    for (size_t i = 0; i < (size_t)T * 3 * P; i++) qkv[i] = (uint16_t)(i * 2654435761u >> 7);

    /* q = qkv[:, 0:P], k = qkv[:, P:2P], as [1, T, H, 128] views */
    const int64_t shape[4] = {1, T, H, 128};
    const int64_t strides[4] = {(int64_t)T * 3 * P, 3 * P, 128, 1};
    sp_tensor in[2], out[2];
    for (int i = 0; i < 2; i++)
        if (sp_tensor_view(&in[i], qkv, (int64_t)i * P, SP_BF16, 4, shape, strides, sp_cpu()) != SP_OK)
            return fprintf(stderr, "%s\n", sp_last_error()), 1;

    size_t bytes = 0, copied = 0;
    sp_pack_workspace_bytes(in, 2, &bytes);
    void *workspace = malloc(bytes);
    sp_status s = sp_pack(in, 2, workspace, bytes, out, &copied, NULL /* stream */);
    if (s != SP_OK) {
        fprintf(stderr, "sp_pack: %s: %s\n", sp_status_string(s), sp_last_error());
        return 1;
    }
    /* out[1] is dense: element [0, t, h, d] is at t*P + h*128 + d. */
    const uint16_t *k = out[1].data;
    int ok = sp_tensor_is_dense(&out[1]) && copied == 2 &&
             k[5 * P + 3 * 128 + 7] == qkv[5 * 3 * P + P + 3 * 128 + 7];
    printf("packed %zu views into %zu workspace bytes: %s\n", copied, bytes, ok ? "ok" : "WRONG");
    free(workspace);
    free(qkv);
    return ok ? 0 : 1;
}
