# Fails unless python/pyproject.toml carries the version of include/stridepack.h.
file(STRINGS ${ROOT}/python/pyproject.toml line REGEX "^version *= *\"")
string(REGEX MATCH "\"([^\"]+)\"" _ "${line}")
if(NOT CMAKE_MATCH_1 STREQUAL VERSION)
  message(FATAL_ERROR "python/pyproject.toml has version '${CMAKE_MATCH_1}', the header ${VERSION}")
endif()
