"""StridepackError and FallbackWarning: the two things the binding raises or
warns with besides TypeError / ValueError for calls that are not arrays.

A StridepackError is also the Python error its status corresponds to, so
that callers can catch what they expect: ValueError for bad input (shapes,
overlap, alignment, sizes, devices that differ, a workspace too small,
input the library does not take), TypeError for dtypes that differ,
RuntimeError for the machine's side (no device, a CUDA error, out of
memory)."""

from __future__ import annotations


class StridepackError(Exception):
    """A stridepack call failed.

    .status  the status name, e.g. "SP_ERR_SHAPE_MISMATCH"
    .code    its integer value
    .message what went wrong (sp_last_error() for a library call)
    """

    def __init__(self, status: str, code: int, message: str) -> None:
        super().__init__(f"{status}: {message}" if message else status)
        self.status = status
        self.code = code
        self.message = message


class StridepackValueError(StridepackError, ValueError):
    """A StridepackError for bad input."""


class StridepackTypeError(StridepackError, TypeError):
    """A StridepackError for dtypes that differ."""


class StridepackRuntimeError(StridepackError, RuntimeError):
    """A StridepackError from the machine's side: no device, CUDA, memory."""


_KINDS = {
    "SP_ERR_DTYPE_MISMATCH": StridepackTypeError,
    "SP_ERR_NO_DEVICE": StridepackRuntimeError,
    "SP_ERR_CUDA": StridepackRuntimeError,
    "SP_ERR_OUT_OF_MEMORY": StridepackRuntimeError,
}


def error(status: str, code: int, message: str) -> StridepackError:
    """The StridepackError for `status`, of the subclass its kind calls for
    (StridepackValueError unless _KINDS says otherwise)."""
    return _KINDS.get(status, StridepackValueError)(status, code, message)


class FallbackWarning(RuntimeWarning):
    """stridepack used the framework's own per-tensor copy instead."""
