# Pick CMAKE_CUDA_ARCHITECTURES: sm_90 machine code plus compute_90 PTX (so a
# later chip can JIT it), and sm_100 / sm_103 machine code when nvcc lists them.
execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --list-gpu-code
  OUTPUT_VARIABLE sp_nvcc_codes ERROR_QUIET RESULT_VARIABLE sp_nvcc_rc)
set(sp_archs 90-real 90-virtual)
foreach(a 100 103)
  if(sp_nvcc_rc EQUAL 0 AND sp_nvcc_codes MATCHES "sm_${a}[^a-z0-9]")
    list(APPEND sp_archs ${a}-real)
  endif()
endforeach()
set(CMAKE_CUDA_ARCHITECTURES ${sp_archs} CACHE STRING "CUDA architectures")
