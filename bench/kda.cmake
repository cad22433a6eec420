# KDA benchmarks (CUDA builds only): the prefill's throughput and the input
# boundary's share of a layer call, on the shared harness (pack.cmake).
if(SP_HAVE_CUDA)
  foreach(b bench_kda bench_boundary)
    add_executable(${b} ${CMAKE_CURRENT_SOURCE_DIR}/${b}.c)
    target_link_libraries(${b} PRIVATE bench_harness test_support stridepack_static)
    target_compile_options(${b} PRIVATE ${SP_WARNINGS})
    target_include_directories(${b} PRIVATE ${PROJECT_SOURCE_DIR}/src) # sp_kda_chunked_probe_
  endforeach()
endif()
