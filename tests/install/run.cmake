# Install the build into a fresh prefix, then build and run a consumer two
# ways: CMake's find_package (shared and static targets) and pkg-config.
# Variables: BUILD (the build tree), SRC (this folder), WORK (scratch), CC.
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
foreach(f include/stridepack.h include/stridepack_kda.h lib/pkgconfig/stridepack.pc
          lib/cmake/stridepack/stridepackConfig.cmake share/doc/stridepack/LICENSE)
  if(NOT EXISTS ${WORK}/prefix/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()

# sp_consumer(NAME static_on EXE... [cmake args]): configure, build and run.
function(sp_consumer name static exes)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC}/consumer -B ${WORK}/${name} -G Ninja
                          -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_C_COMPILER=${CC}
                          -DCONSUMER_STATIC=${static} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "configuring the consumer (${name}) failed:\n${out}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/${name}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "building the consumer (${name}) failed:\n${out}")
  endif()
  foreach(exe IN LISTS exes)
    execute_process(COMMAND ${WORK}/${name}/${exe} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                    ERROR_VARIABLE out)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${exe} (${name}) failed (${rc}):\n${out}")
    endif()
    message(STATUS "${name}/${exe}: ${out}")
  endforeach()
endfunction()

# The shared library asks nothing of its consumer: the package must configure
# with OpenMP, Threads and the CUDA toolkit made unfindable.
sp_consumer(shared OFF consumer_shared -DCMAKE_DISABLE_FIND_PACKAGE_OpenMP=ON
            -DCMAKE_DISABLE_FIND_PACKAGE_Threads=ON -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
sp_consumer(static ON "consumer_shared;consumer_static")

# pkg-config, static link (Libs.private) so the private dependencies are exercised.
find_program(PKG_CONFIG pkg-config)
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "pkg-config not found (Debian: pkg-config); the .pc file is untested")
endif()
if(PKG_CONFIG)
  set(ENV{PKG_CONFIG_PATH} ${WORK}/prefix/lib/pkgconfig)
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs --static stridepack
                  OUTPUT_VARIABLE flags RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config --cflags --libs stridepack failed")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  execute_process(COMMAND ${CC} -std=c11 ${SRC}/consumer/consumer.c -o ${WORK}/consumer_pc
                          -Wl,-rpath,${WORK}/prefix/lib ${flags}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "compiling with pkg-config flags failed:\n${out}")
  endif()
  execute_process(COMMAND ${WORK}/consumer_pc RESULT_VARIABLE rc OUTPUT_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer_pc failed (${rc}):\n${out}")
  endif()
  message(STATUS "pkg-config consumer: ${out}")
endif()
