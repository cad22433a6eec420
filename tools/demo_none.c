/* demo_none.c — a build without CUDA has no device memory for the demo. */
#include "demo.h"

int demo_cuda_mem(demo_mem *m) {
    (void)m;
    return -1;
}
