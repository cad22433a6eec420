/*
 * cuda_ok.h — CUDA_OK(stmt): a CUDA runtime call that a test makes itself
 * (setup, uploads, downloads). Failing it ends the test with exit status 1
 * and the call's text, never 77: a broken setup is a failure, not a skip.
 */
#ifndef SP_CUDA_OK_H
#define SP_CUDA_OK_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define CUDA_OK(stmt)                                                                \
    do {                                                                             \
        cudaError_t cuda_ok_err_ = (stmt);                                           \
        if (cuda_ok_err_ != cudaSuccess) {                                           \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #stmt,     \
                    cudaGetErrorString(cuda_ok_err_));                               \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#endif /* SP_CUDA_OK_H */
