# bench_pack: sp_pack of the K3 inputs against a plain device copy, one
# launch per tensor and cudaMemcpy2DAsync (see bench_pack.c). CUDA builds
# only. bench_harness (events, medians, JSON lines) is shared with the other
# benchmarks: link it rather than compiling harness.c again.
if(NOT SP_HAVE_CUDA)
  return()
endif()

if(NOT TARGET bench_harness)
  add_library(bench_harness STATIC ${CMAKE_CURRENT_LIST_DIR}/harness.c)
  target_include_directories(bench_harness PUBLIC ${CMAKE_CURRENT_LIST_DIR})
  target_link_libraries(bench_harness PUBLIC test_support CUDA::cudart_static m)
  target_compile_options(bench_harness PRIVATE ${SP_WARNINGS})
endif()

add_executable(bench_pack ${CMAKE_CURRENT_LIST_DIR}/bench_pack.c)
target_link_libraries(bench_pack PRIVATE bench_harness test_support stridepack_static Threads::Threads)
target_compile_options(bench_pack PRIVATE ${SP_WARNINGS})
