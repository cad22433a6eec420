# The CUDA architectures: one list, CMAKE_CUDA_ARCHITECTURES, for every CUDA
# source of the library. Nothing in the kernels needs more than sm_80 (the
# pack kernel moves integer words; the KDA kernels use bf16 mma.sync), so the
# default is machine code for each data-centre and desktop chip from Ampere
# on that this nvcc knows (A100 sm_80, RTX 30xx/A10/A40 sm_86, L4/L40S/RTX
# 40xx sm_89, H100/H200 sm_90, B200 sm_100, B300 sm_103, RTX 50xx sm_120),
# plus compute_80 PTX so that any later chip can JIT it. Pass
# -DCMAKE_CUDA_ARCHITECTURES=... (e.g. 90 or native) for a faster build.
#
# Included before enable_language(CUDA): it needs CMAKE_CUDA_COMPILER only.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --list-gpu-code
    OUTPUT_VARIABLE sp_nvcc_codes ERROR_QUIET RESULT_VARIABLE sp_nvcc_rc)
  set(sp_archs)
  foreach(a 80 86 89 90 100 103 120)
    if(sp_nvcc_rc EQUAL 0 AND sp_nvcc_codes MATCHES "sm_${a}[^a-z0-9]")
      list(APPEND sp_archs ${a}-real)
    endif()
  endforeach()
  list(APPEND sp_archs 80-virtual)
  set(CMAKE_CUDA_ARCHITECTURES ${sp_archs} CACHE STRING "CUDA architectures")
endif()

# SP_CUDA_MIN_ARCH: the lowest architecture in the list (0 when the list
# names none, e.g. "native"). sp_cuda_available() reports a device below it
# as unusable, rather than failing at the first launch.
set(SP_CUDA_MIN_ARCH 0)
foreach(a IN LISTS CMAKE_CUDA_ARCHITECTURES)
  if(a MATCHES "^([0-9]+)" AND (SP_CUDA_MIN_ARCH EQUAL 0 OR CMAKE_MATCH_1 LESS SP_CUDA_MIN_ARCH))
    set(SP_CUDA_MIN_ARCH ${CMAKE_MATCH_1})
  endif()
endforeach()

# sp_cuda_architectures(<target>): build the target's CUDA sources for the
# list. A source that needs a newer chip than the rest may say so with the
# source property SP_CUDA_MIN_ARCH, set in the directory that defines the
# target:
#   set_source_files_properties(kda/prefill_sm90.cu PROPERTIES SP_CUDA_MIN_ARCH 90)
# It is then built only for the entries of the list at or above 90, and the
# code that launches its kernels must check the device's compute capability.
# Without such a source the target simply uses CMAKE_CUDA_ARCHITECTURES.
function(sp_cuda_architectures target)
  get_target_property(srcs ${target} SOURCES)
  list(FILTER srcs INCLUDE REGEX "\\.cu$")
  set(any_restricted OFF)
  foreach(src IN LISTS srcs)
    get_source_file_property(min ${src} SP_CUDA_MIN_ARCH)
    if(min)
      set(any_restricted ON)
    endif()
  endforeach()
  if(NOT any_restricted)
    return()
  endif()
  # Per-source lists: CUDA_ARCHITECTURES is a target property, so the
  # --generate-code options are written here, source by source.
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES OFF)
  foreach(src IN LISTS srcs)
    get_source_file_property(min ${src} SP_CUDA_MIN_ARCH)
    if(NOT min)
      set(min 0)
    endif()
    set(flags)
    foreach(a IN LISTS CMAKE_CUDA_ARCHITECTURES)
      if(NOT a MATCHES "^([0-9]+[af]?)(-real|-virtual)?$")
        message(FATAL_ERROR "${src} has SP_CUDA_MIN_ARCH ${min}: CMAKE_CUDA_ARCHITECTURES must "
                            "list numbered architectures, not '${a}'")
      endif()
      set(arch ${CMAKE_MATCH_1})
      set(kind ${CMAKE_MATCH_2})
      string(REGEX MATCH "^[0-9]+" num ${arch})
      if(num LESS min)
        continue()
      endif()
      if(kind STREQUAL "-real")
        list(APPEND flags "--generate-code=arch=compute_${arch},code=sm_${arch}")
      elseif(kind STREQUAL "-virtual")
        list(APPEND flags "--generate-code=arch=compute_${arch},code=compute_${arch}")
      else()
        list(APPEND flags "--generate-code=arch=compute_${arch},code=[compute_${arch},sm_${arch}]")
      endif()
    endforeach()
    if(NOT flags)
      message(FATAL_ERROR "${src}: no architecture of CMAKE_CUDA_ARCHITECTURES is at or above "
                          "its SP_CUDA_MIN_ARCH ${min}")
    endif()
    set_property(SOURCE ${src} APPEND PROPERTY COMPILE_OPTIONS ${flags})
  endforeach()
endfunction()
