/* consumer.c — links against an installed stridepack and packs one strided
 * view; exit status 0 only if the copy is right and the versions agree. */
#include <stdio.h>
#include <stridepack.h>

int main(void) {
    static uint16_t buf[4 * 6], ws[256];
    for (int i = 0; i < 24; i++) buf[i] = (uint16_t)(i * 37 + 1);
    const int64_t shape[2] = {4, 3}, strides[2] = {6, 2}; /* every other column */
    sp_tensor in, out;
    size_t copied = 0;
    if (sp_tensor_view(&in, buf, 1, SP_BF16, 2, shape, strides, sp_cpu()) != SP_OK ||
        sp_pack(&in, 1, ws, sizeof ws, &out, &copied, NULL) != SP_OK) {
        fprintf(stderr, "%s\n", sp_last_error());
        return 1;
    }
    const uint16_t *o = out.data;
    int ok = copied == 1 && sp_version_number() == SP_VERSION_NUMBER;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++) ok &= o[r * 3 + c] == buf[1 + r * 6 + c * 2];
    printf("stridepack %s: %s\n", sp_version(), ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
}
