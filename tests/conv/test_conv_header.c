/*
 * test_conv_header.c — stridepack_conv.h compiles as strict C11 (and, as
 * test_conv_header_cxx, as C++11) under -Wall -Wextra -Werror -pedantic,
 * twice over (include guards), and an empty argument set is refused by name.
 */
#include "check.h"
#include "stridepack_conv.h"

#include <string.h>

#ifndef SP_CONV_HEADER_TEST_NAME
#define SP_CONV_HEADER_TEST_NAME "test_conv_header"
#endif

int main(void) {
    sp_conv_args a;
    CHECK_OK(sp_conv_args_init(&a));
    CHECK(a.silu == 0 && a.x.data == NULL && a.out.ndim == 0);
    CHECK_STATUS(sp_conv_prefill(&a, NULL), SP_ERR_SHAPE_MISMATCH); /* x: 0 dims */
    CHECK(strstr(sp_last_error(), "x:") != NULL);
    CHECK(SP_CONV_MIN_WIDTH == 2 && SP_CONV_MAX_WIDTH == 4);
    return sp_test_finish(SP_CONV_HEADER_TEST_NAME);
}
