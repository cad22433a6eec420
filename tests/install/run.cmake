# Install the build into a fresh prefix, then build and run a consumer
# through CMake's find_package (shared and static targets) and through
# pkg-config (stridepack.pc: the shared library; stridepack-static.pc: the
# static one, with the shared one installed beside it).
# Variables: BUILD (the build tree), SRC (this folder), WORK (scratch), CC.
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
foreach(f include/stridepack.h include/stridepack_kda.h lib/pkgconfig/stridepack.pc
          lib/pkgconfig/stridepack-static.pc lib/libstridepack.a lib/libstridepack.so
          lib/cmake/stridepack/stridepackConfig.cmake share/doc/stridepack/LICENSE
          share/doc/stridepack/README.md share/doc/stridepack/CHANGELOG.md)
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

# pkg-config. Each consumer is compiled with the flags alone, and run with
# the environment's library path removed.
find_program(PKG_CONFIG pkg-config)
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "pkg-config not found (Debian: pkg-config); the .pc files are untested")
endif()
set(ENV{PKG_CONFIG_PATH} ${WORK}/prefix/lib/pkgconfig)
unset(ENV{LD_LIBRARY_PATH})

# sp_pc_consumer(NAME PACKAGE [extra link args]): compile consumer.c with
# `pkg-config --cflags --libs PACKAGE`, run it; its path in ${NAME}_exe.
function(sp_pc_consumer name package)
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs ${package}
                  OUTPUT_VARIABLE flags RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config --cflags --libs ${package} failed")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(exe ${WORK}/${name})
  execute_process(COMMAND ${CC} -std=c11 ${SRC}/consumer/consumer.c -o ${exe} ${flags} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "compiling with `pkg-config --cflags --libs ${package}` (${flags}) failed:\n${out}")
  endif()
  execute_process(COMMAND ${exe} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}, linked with `pkg-config --libs ${package}` (${flags}), failed (${rc}):\n${out}")
  endif()
  message(STATUS "${name} (pkg-config ${package}): ${out}")
  set(${name}_exe ${exe} PARENT_SCOPE)
endfunction()

# Whether the executable asks the loader for libstridepack.so (its dynamic
# string table names it), into <out>.
function(sp_needs_shared exe out)
  file(STRINGS ${exe} names REGEX "libstridepack\\.so")
  if(names)
    set(${out} ON PARENT_SCOPE)
  else()
    set(${out} OFF PARENT_SCOPE)
  endif()
endfunction()

# The shared library, found at run time through the rpath the README names.
execute_process(COMMAND ${PKG_CONFIG} --variable=libdir stridepack
                OUTPUT_VARIABLE libdir OUTPUT_STRIP_TRAILING_WHITESPACE)
sp_pc_consumer(consumer_pc stridepack -Wl,-rpath,${libdir})
sp_needs_shared(${consumer_pc_exe} needs)
if(NOT needs)
  message(FATAL_ERROR "consumer_pc (pkg-config stridepack) does not use libstridepack.so")
endif()

# The static library, with libstridepack.so installed beside it and no rpath:
# the program runs only if it needs no shared stridepack.
sp_pc_consumer(consumer_pc_static stridepack-static)
sp_needs_shared(${consumer_pc_static_exe} needs)
if(needs)
  message(FATAL_ERROR "consumer_pc_static (pkg-config stridepack-static) asks for libstridepack.so")
endif()
