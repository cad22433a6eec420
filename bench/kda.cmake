# KDA benchmarks (CUDA builds only): the prefill's throughput and the input
# boundary's share of a layer call. Each compiles the shared harness itself.
if(SP_HAVE_CUDA)
  foreach(b bench_kda bench_boundary)
    add_executable(${b} ${CMAKE_CURRENT_SOURCE_DIR}/${b}.c ${CMAKE_CURRENT_SOURCE_DIR}/harness.c)
    target_include_directories(${b} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
    target_link_libraries(${b} PRIVATE sp_support stridepack_static CUDA::cudart_static m)
    target_compile_options(${b} PRIVATE ${SP_WARNINGS})
  endforeach()
endif()
