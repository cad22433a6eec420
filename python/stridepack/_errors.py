"""StridepackError and FallbackWarning: the two things the binding raises or
warns with besides TypeError / ValueError for calls that are not arrays."""


class StridepackError(Exception):
    """A stridepack call failed.

    .status  the status name, e.g. "SP_ERR_SHAPE_MISMATCH"
    .code    its integer value
    .message what went wrong (sp_last_error() for a library call)
    """

    def __init__(self, status, code, message):
        super().__init__(f"{status}: {message}" if message else status)
        self.status = status
        self.code = code
        self.message = message


class FallbackWarning(RuntimeWarning):
    """stridepack used the framework's own per-tensor copy instead."""
