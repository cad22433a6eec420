# The package version; equal to SP_VERSION_* in include/stridepack.h (the
# wheel build and the tests check it), and to the linked library's
# sp_version() (checked at import).
__version__ = "0.1.0"
