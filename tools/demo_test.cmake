# One run of `stridepack demo` for ctest, checked on its exit status and its
# output (ctest's PASS_REGULAR_EXPRESSION would ignore the exit status).
#   cmake -DEXE=<stridepack> -DARGS="demo;--tokens;1" -DRC=<expected status>
#         -DMATCH="<regex>;<regex>" [-DFLIP=<tensor>] -P demo_test.cmake
# FLIP sets STRIDEPACK_DEMO_FLIP: the demo then corrupts that packed output,
# and must say so.
if(DEFINED FLIP)
  set(ENV{STRIDEPACK_DEMO_FLIP} ${FLIP})
endif()
execute_process(COMMAND ${EXE} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc STREQUAL RC)
  message(FATAL_ERROR "stridepack ${ARGS}: exit status ${rc}, expected ${RC}")
endif()
foreach(re IN LISTS MATCH)
  if(NOT out MATCHES "${re}")
    message(FATAL_ERROR "stridepack ${ARGS}: the output has no line matching '${re}'")
  endif()
endforeach()
