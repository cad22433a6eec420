# Fails unless README.md quotes docs/example.c verbatim, so the README's
# example is the one the tests compile and run.
file(READ ${ROOT}/README.md readme)
file(READ ${ROOT}/docs/example.c example)
string(FIND "${readme}" "${example}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md does not contain docs/example.c verbatim")
endif()
