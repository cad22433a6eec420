/*
 * test_header_cxx.cpp — the public headers compile as strict C++11 under
 * -Wall -Wextra -Werror -pedantic (see CMakeLists.txt), twice over (include
 * guards), and the few things used here link and behave.
 */
#include "stridepack.h"
#include "stridepack.h"
#ifdef SP_TEST_KDA_HEADER
#include "stridepack_kda.h"
#include "stridepack_kda.h"
#endif
#include "check.h"

#include <cstring>
using std::memcmp;
using std::strcmp;

int main(void) {
    /* A 2x3 transposed view of a 3x2 matrix, copied into a dense 2x3. */
    float a[6] = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f}, b[6] = {-1, -1, -1, -1, -1, -1};
    const float want[6] = {0.5f, 2.5f, 4.5f, 1.5f, 3.5f, 5.5f};
    int64_t shape[2] = {2, 3}, strides[2] = {1, 2};
    sp_copy_pair p;
    CHECK_OK(sp_tensor_view(&p.src, a, 0, SP_F32, 2, shape, strides, sp_cpu()));
    CHECK_OK(sp_tensor_dense(&p.dst, b, SP_F32, 2, shape, sp_cpu()));
    CHECK(sp_tensor_is_dense(&p.dst) && !sp_tensor_is_dense(&p.src));
    CHECK_OK(sp_copy_batch(&p, 1, nullptr));
    CHECK(memcmp(b, want, sizeof b) == 0);

    CUstream_st *stream = nullptr; /* the opaque stream type is usable */
    size_t bytes = 0;
    CHECK_OK(sp_pack_workspace_bytes(&p.src, 1, &bytes));
    CHECK(bytes == SP_PACK_ALIGN + SP_PACK_ALIGN - 1);
    CHECK_STATUS(sp_pack(&p.src, 1, NULL, bytes, &p.dst, NULL, stream), SP_ERR_INVALID_ARGUMENT);
    CHECK(sp_last_error()[0] != '\0');
    CHECK(sp_version_number() == SP_VERSION_NUMBER);
    CHECK(strcmp(sp_status_string(SP_OK), "SP_OK: success") == 0);
    CHECK(sp_dtype_size(SP_BF16) == 2 && sp_cuda(3).ordinal == 3);
    CHECK(sp_cuda_available() == 0 || sp_cuda_available() == 1);
    return sp_test_finish("test_header_cxx");
}
