# What the CUDA backend is built for: one list, CMAKE_CUDA_ARCHITECTURES, for
# every CUDA source of the library, chosen by SP_CUDA_ARCHS (README,
# "Choosing what to build"):
#
#   (empty)  CMAKE_CUDA_ARCHITECTURES when given, else `all`: the default of
#            plain cmake and of `make test`
#   all      machine code for each data-centre and desktop chip from Ampere
#            on that this nvcc knows (A100 sm_80, RTX 30xx/A10/A40 sm_86,
#            L4/L40S/RTX 40xx sm_89, H100/H200 sm_90, B200 sm_100, B300
#            sm_103, RTX 50xx sm_120), plus compute_80 PTX so that any later
#            chip can JIT it. Nothing in the kernels needs more than sm_80 (the
#            pack kernel moves integer words; the KDA kernels use bf16
#            mma.sync); the one-pass KDA kernel's H100/H200 code is sm_90a
#            (SP_CUDA_SM90A, below).
#   auto     the architectures of the GPUs this machine shows (nvidia-smi),
#            machine code for those only; no CUDA backend at all when it shows
#            none (no driver, no device, or only chips older than sm_80). The
#            default of `make demo` and of `pip install ./python`.
#   none     no CUDA backend (the same as SP_ENABLE_CUDA=OFF)
#   a list   used as CMAKE_CUDA_ARCHITECTURES, e.g. 90, "90;100", native
#
# The top-level CMakeLists.txt calls sp_cuda_choice() before it looks for
# a CUDA compiler (a CPU-only choice skips that search), then
# sp_cuda_set_architectures() once the compiler is known and before
# enable_language(CUDA).

set(SP_CUDA_ARCHS "" CACHE STRING
  "CUDA architectures: all, auto (this machine's GPUs; none visible: no CUDA), none, or a CMAKE_CUDA_ARCHITECTURES list; empty: CMAKE_CUDA_ARCHITECTURES, else all")

# Numbered compute capabilities (e.g. 90, 86) of the GPUs nvidia-smi lists,
# into <out>; empty when there is no nvidia-smi, no driver or no device.
function(sp_visible_gpu_archs out)
  set(ccs)
  find_program(SP_NVIDIA_SMI nvidia-smi)
  if(SP_NVIDIA_SMI)
    execute_process(COMMAND ${SP_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
      OUTPUT_VARIABLE smi ERROR_QUIET RESULT_VARIABLE rc TIMEOUT 30)
    if(rc EQUAL 0)
      # One "9.0" per device; anything else (an error printed on stdout) is not one.
      string(REGEX MATCHALL "[0-9]+\\.[0-9]+" found "${smi}")
      foreach(cc IN LISTS found)
        string(REPLACE "." "" cc ${cc})
        list(APPEND ccs ${cc})
      endforeach()
      list(REMOVE_DUPLICATES ccs)
    endif()
  endif()
  set(${out} ${ccs} PARENT_SCOPE)
endfunction()

# sp_cuda_choice(<wanted> <why>): whether SP_CUDA_ARCHS leaves the CUDA
# backend to be built (ON/OFF) and, when it does not, why, for the configure
# summary. For `auto` it also records the GPUs found in SP_CUDA_AUTO_ARCHS.
function(sp_cuda_choice wanted why)
  set(${wanted} ON PARENT_SCOPE)
  set(${why} "" PARENT_SCOPE)
  if(SP_CUDA_ARCHS STREQUAL "none")
    set(${wanted} OFF PARENT_SCOPE)
    set(${why} "SP_CUDA_ARCHS=none" PARENT_SCOPE)
  elseif(SP_CUDA_ARCHS STREQUAL "auto")
    sp_visible_gpu_archs(ccs)
    set(usable)
    foreach(cc IN LISTS ccs)
      if(cc GREATER_EQUAL 80)
        list(APPEND usable ${cc})
      endif()
    endforeach()
    set(SP_CUDA_AUTO_ARCHS ${usable} PARENT_SCOPE)
    if(NOT usable)
      set(${wanted} OFF PARENT_SCOPE)
      if(ccs)
        set(${why} "SP_CUDA_ARCHS=auto: the GPUs shown (compute capability ${ccs}) are older than sm_80" PARENT_SCOPE)
      else()
        set(${why} "SP_CUDA_ARCHS=auto: nvidia-smi shows no GPU" PARENT_SCOPE)
      endif()
    endif()
  endif()
endfunction()

# The full list (`all`) for CMAKE_CUDA_COMPILER, into <out>.
function(sp_cuda_all_archs out)
  execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --list-gpu-code
    OUTPUT_VARIABLE codes ERROR_QUIET RESULT_VARIABLE rc)
  set(archs)
  foreach(a 80 86 89 90 100 103 120)
    if(rc EQUAL 0 AND codes MATCHES "sm_${a}[^a-z0-9]")
      list(APPEND archs ${a}-real)
    endif()
  endforeach()
  list(APPEND archs 80-virtual)
  set(${out} ${archs} PARENT_SCOPE)
endfunction()

# Sets CMAKE_CUDA_ARCHITECTURES (cache) from SP_CUDA_ARCHS; needs
# CMAKE_CUDA_COMPILER only.
macro(sp_cuda_set_architectures)
  if(SP_CUDA_ARCHS STREQUAL "all" OR (SP_CUDA_ARCHS STREQUAL "" AND NOT DEFINED CMAKE_CUDA_ARCHITECTURES))
    sp_cuda_all_archs(sp_archs)
    set(CMAKE_CUDA_ARCHITECTURES ${sp_archs} CACHE STRING "CUDA architectures" FORCE)
  elseif(SP_CUDA_ARCHS STREQUAL "auto")
    # Machine code for each GPU shown; a chip newer than this nvcc knows
    # runs compute_80 PTX, compiled for it when first loaded.
    execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --list-gpu-code
      OUTPUT_VARIABLE sp_codes ERROR_QUIET)
    set(sp_archs)
    foreach(a IN LISTS SP_CUDA_AUTO_ARCHS)
      if(sp_codes MATCHES "sm_${a}[^a-z0-9]")
        list(APPEND sp_archs ${a}-real)
      else()
        list(APPEND sp_archs 80-virtual)
      endif()
    endforeach()
    list(REMOVE_DUPLICATES sp_archs)
    set(CMAKE_CUDA_ARCHITECTURES ${sp_archs} CACHE STRING "CUDA architectures" FORCE)
  elseif(NOT SP_CUDA_ARCHS STREQUAL "")
    set(CMAKE_CUDA_ARCHITECTURES ${SP_CUDA_ARCHS} CACHE STRING "CUDA architectures" FORCE)
  endif()
endmacro()

# SP_CUDA_MIN_ARCH: the lowest architecture in the list (0 when the list
# names none, e.g. "native"). sp_cuda_available() reports a device below it
# as unusable, rather than failing at the first launch. Computed by
# sp_cuda_min_arch() once CMAKE_CUDA_ARCHITECTURES is set.
macro(sp_cuda_min_arch)
  set(SP_CUDA_MIN_ARCH 0)
  foreach(a IN LISTS CMAKE_CUDA_ARCHITECTURES)
    if(a MATCHES "^([0-9]+)" AND (SP_CUDA_MIN_ARCH EQUAL 0 OR CMAKE_MATCH_1 LESS SP_CUDA_MIN_ARCH))
      set(SP_CUDA_MIN_ARCH ${CMAKE_MATCH_1})
    endif()
  endforeach()
endmacro()

# sp_cuda_architectures(<target>): build the target's CUDA sources for the
# list. A source that needs a newer chip than the rest may say so with the
# source property SP_CUDA_MIN_ARCH, set in the directory that defines the
# target:
#   set_source_files_properties(kda/prefill_sm90.cu PROPERTIES SP_CUDA_MIN_ARCH 90)
# It is then built only for the entries of the list at or above 90, and the
# code that launches its kernels must check the device's compute capability.
# A source whose Hopper code uses the architecture-specific instructions of
# sm_90a (setmaxnreg) says so with SP_CUDA_SM90A ON: where the list has 90
# it is built as 90a (sm_90a code runs on compute capability 9.0 only, the
# chips sm_90 code serves: H100, H200, GH200).
# Without such a source the target simply uses CMAKE_CUDA_ARCHITECTURES.
function(sp_cuda_architectures target)
  # A numbered entry of the list: the architecture, then -real or -virtual.
  set(numbered_re "^([0-9]+[af]?)(-real|-virtual)?$")
  get_target_property(srcs ${target} SOURCES)
  list(FILTER srcs INCLUDE REGEX "\\.cu$")
  set(any_min OFF)
  set(any_sm90a OFF)
  foreach(src IN LISTS srcs)
    get_source_file_property(min ${src} SP_CUDA_MIN_ARCH)
    get_source_file_property(sm90a ${src} SP_CUDA_SM90A)
    if(min)
      set(any_min ON)
    endif()
    if(sm90a)
      set(any_sm90a ON)
    endif()
  endforeach()
  # sm_90a is a refinement: with a list of other words (e.g. native) such a
  # source is built like the rest (plain sm_90 code, without setmaxnreg).
  set(numbered ON)
  foreach(a IN LISTS CMAKE_CUDA_ARCHITECTURES)
    if(NOT a MATCHES "${numbered_re}")
      set(numbered OFF)
    endif()
  endforeach()
  if(NOT any_min AND NOT (any_sm90a AND numbered))
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
    get_source_file_property(sm90a ${src} SP_CUDA_SM90A)
    set(flags)
    foreach(a IN LISTS CMAKE_CUDA_ARCHITECTURES)
      if(NOT a MATCHES "${numbered_re}")
        message(FATAL_ERROR "${src} has SP_CUDA_MIN_ARCH ${min}: CMAKE_CUDA_ARCHITECTURES must "
                            "list numbered architectures, not '${a}'")
      endif()
      set(arch ${CMAKE_MATCH_1})
      set(kind ${CMAKE_MATCH_2})
      string(REGEX MATCH "^[0-9]+" num ${arch})
      if(num LESS min)
        continue()
      endif()
      if(sm90a AND arch STREQUAL "90")
        set(arch 90a)
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
