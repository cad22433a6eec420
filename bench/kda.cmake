# KDA benchmarks (CUDA builds only): the prefill's throughput and the input
# boundary's share of a layer call, on the shared harness (pack.cmake).
if(SP_HAVE_CUDA)
  foreach(b bench_kda bench_boundary)
    add_executable(${b} ${CMAKE_CURRENT_SOURCE_DIR}/${b}.c)
    target_link_libraries(${b} PRIVATE bench_harness test_support stridepack_static)
    target_compile_options(${b} PRIVATE $<$<COMPILE_LANGUAGE:C>:${SP_WARNINGS}>)
    target_include_directories(${b} PRIVATE ${PROJECT_SOURCE_DIR}/src) # the plan (kda/plan.h)
  endforeach()
  # bench_kda --probe: the one-pass kernel's timing probes, built here only,
  # for Hopper and later (sm_90a, as the library's kernel: cmake/cuda_arch.cmake;
  # on an older GPU a probe's launch fails and bench_kda says so).
  target_sources(bench_kda PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/kda_probe.cu)
  set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/kda_probe.cu PROPERTIES SP_CUDA_SM90A ON
    SP_CUDA_MIN_ARCH 90)
  target_compile_options(bench_kda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>)
  sp_cuda_architectures(bench_kda)
endif()
