# bench_conv (CUDA builds only): the causal convolution writing q, k, v split
# against token-major plus the boundary's pack, on the shared harness
# (pack.cmake); with --floor, against the yardstick kernels of conv_floor.cu.
if(SP_HAVE_CUDA)
  add_executable(bench_conv ${CMAKE_CURRENT_LIST_DIR}/bench_conv.c
                            ${CMAKE_CURRENT_LIST_DIR}/conv_floor.cu)
  target_link_libraries(bench_conv PRIVATE bench_harness test_support stridepack_static)
  target_compile_options(bench_conv PRIVATE
    $<$<COMPILE_LANGUAGE:C>:${SP_WARNINGS}>
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra --Werror=all-warnings>)
  target_include_directories(bench_conv PRIVATE ${PROJECT_SOURCE_DIR}/src) # sp_conv_cuda_planned_
endif()
