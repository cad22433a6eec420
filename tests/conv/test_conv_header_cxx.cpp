/* test_conv_header_cxx.cpp — test_conv_header.c compiled as C++11. */
#define SP_CONV_HEADER_TEST_NAME "test_conv_header_cxx"
#include "test_conv_header.c"
