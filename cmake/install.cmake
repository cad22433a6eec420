# Install rules: libraries, public headers, the README, CHANGELOG and
# license (share/doc/stridepack), a CMake package (find_package(stridepack)
# -> stridepack::stridepack; with COMPONENTS static, also
# stridepack::stridepack_static) and two pkg-config files
# (pkg-config --cflags --libs stridepack: the shared library;
# stridepack-static: the static one).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Two export sets: the static library's private dependencies become its
# consumers' link dependencies, the shared library's do not.
install(TARGETS stridepack EXPORT stridepackTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS stridepack_static EXPORT stridepackStaticTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "stridepack*.h")
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/CHANGELOG.md
  ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})

set(SP_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/stridepack)
install(EXPORT stridepackTargets NAMESPACE stridepack:: DESTINATION ${SP_CMAKE_DIR})
install(EXPORT stridepackStaticTargets NAMESPACE stridepack:: DESTINATION ${SP_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/stridepackConfig.cmake.in
  ${PROJECT_BINARY_DIR}/stridepackConfig.cmake INSTALL_DESTINATION ${SP_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/stridepackConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/stridepackConfig.cmake
  ${PROJECT_BINARY_DIR}/stridepackConfigVersion.cmake DESTINATION ${SP_CMAKE_DIR})

# pkg-config: the static link needs what the library uses privately.
set(SP_PC_PRIVATE "-fopenmp -lpthread -lm")
if(SP_HAVE_CUDA)
  string(APPEND SP_PC_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt -lstdc++")
endif()
# Relocatable: the prefix is found from where the .pc file lies.
string(REGEX REPLACE "[^/]+" ".." SP_PC_UP "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
set(SP_PC_ARCHIVE ${CMAKE_STATIC_LIBRARY_PREFIX}stridepack${CMAKE_STATIC_LIBRARY_SUFFIX})
foreach(pc stridepack stridepack-static)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
