/* demo_none.c — a build without CUDA has no device memory for the demo. */
#include "demo.h"

#include <stdio.h>

int demo_cuda_mem(demo_mem *m) {
    (void)m;
    return -1;
}

void demo_cuda_describe(char *buf, size_t n) {
    snprintf(buf, n, "not built (this build of stridepack has no CUDA backend)");
}
