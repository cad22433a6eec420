"""The shared library through ctypes: finding it, the structs of
include/stridepack.h mirrored field for field, the prototypes, and the
translation of a failing sp_status into StridepackError.

Where the library is looked for, first match wins:
  1. $STRIDEPACK_LIBRARY: a path to libstridepack.so (or a directory holding it);
  2. next to this package (libstridepack.so copied into python/stridepack/
     before `pip install ./python`);
  3. the build tree of the checkout this package sits in (build*/src/), when
     run from the source tree or an editable install;
  4. the system loader (LD_LIBRARY_PATH, ldconfig paths, `cmake --install`
     prefixes the loader knows).
"""

import ctypes
import ctypes.util
import glob
import os

SP_MAX_DIMS = 8          # include/stridepack.h
SP_PACK_ALIGN = 256

# sp_dtype values (fixed by the header; new ones are only appended).
SP_BOOL, SP_U8, SP_I8, SP_U16, SP_I16, SP_U32, SP_I32, SP_U64, SP_I64 = range(9)
SP_F16, SP_BF16, SP_F32, SP_F64 = 9, 10, 11, 12
# The unsigned type of each width, used to move bits of any element type.
UNSIGNED_OF_SIZE = {1: SP_U8, 2: SP_U16, 4: SP_U32, 8: SP_U64}

SP_DEVICE_CPU, SP_DEVICE_CUDA = 0, 1


class Device(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int32), ("ordinal", ctypes.c_int32)]


class Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * SP_MAX_DIMS),
        ("strides", ctypes.c_int64 * SP_MAX_DIMS),
        ("device", Device),
    ]


class CopyPair(ctypes.Structure):
    _fields_ = [("src", Tensor), ("dst", Tensor)]


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


def _candidates():
    env = os.environ.get("STRIDEPACK_LIBRARY")
    if env:
        # An explicit setting is the only candidate: silently loading some
        # other build would hide the mistake.
        if os.path.isdir(env):
            return [os.path.join(env, "libstridepack.so")]
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(glob.glob(os.path.join(here, "libstridepack.so*")))
    root = os.path.dirname(os.path.dirname(here))  # python/stridepack -> checkout
    # Newest build first: the one most likely to match the sources.
    built = glob.glob(os.path.join(root, "build*", "src", "libstridepack.so"))
    found += sorted(built, key=os.path.getmtime, reverse=True)
    system = ctypes.util.find_library("stridepack")
    found += [system] if system else []
    found.append("libstridepack.so")  # plain dlopen: LD_LIBRARY_PATH, rpath
    return found


def _load():
    tried = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append(f"{path} ({e})")
    raise ImportError(
        "stridepack: libstridepack.so not found; build it (cmake --build <dir> "
        "--target stridepack) and set STRIDEPACK_LIBRARY to its path. Tried: "
        + "; ".join(tried))


lib, path = _load()

_P = ctypes.POINTER
_PROTOTYPES = {
    "sp_version": (ctypes.c_char_p, []),
    "sp_version_number": (ctypes.c_uint, []),
    "sp_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "sp_last_error": (ctypes.c_char_p, []),
    "sp_dtype_size": (ctypes.c_size_t, [ctypes.c_int]),
    "sp_dtype_name": (ctypes.c_char_p, [ctypes.c_int]),
    "sp_cuda_available": (ctypes.c_int, []),
    "sp_tensor_is_dense": (ctypes.c_int, [_P(Tensor)]),
    "sp_copy_batch": (ctypes.c_int, [_P(CopyPair), ctypes.c_size_t, ctypes.c_void_p]),
    "sp_pack_workspace_bytes": (ctypes.c_int, [_P(Tensor), ctypes.c_size_t,
                                               _P(ctypes.c_size_t)]),
    "sp_pack": (ctypes.c_int, [_P(Tensor), ctypes.c_size_t, ctypes.c_void_p,
                               ctypes.c_size_t, _P(Tensor), _P(ctypes.c_size_t),
                               ctypes.c_void_p]),
    "sp_copy_pass_count": (ctypes.c_uint64, []),
}
for _name, (_res, _args) in _PROTOTYPES.items():
    _fn = getattr(lib, _name)
    _fn.restype, _fn.argtypes = _res, _args


def _status_table():
    """Names by value, read from the library so they cannot drift: the
    strings read "SP_ERR_OVERLAP: memory regions overlap"."""
    names = {}
    for code in range(64):
        text = lib.sp_status_string(code).decode()
        name = text.split(":", 1)[0]
        if name.startswith("SP_") and name != "SP_ERR_UNKNOWN":
            names[code] = name
    return names


STATUS_NAMES = _status_table()
STATUS = {name: code for code, name in STATUS_NAMES.items()}
SP_OK = STATUS["SP_OK"]
SP_ERR_UNSUPPORTED = STATUS["SP_ERR_UNSUPPORTED"]


def error(status_name, message):
    """A StridepackError raised by the binding itself (not the library)."""
    return StridepackError(status_name, STATUS.get(status_name, -1), message)


def check(code):
    """Raise StridepackError for a failing status, with sp_last_error()."""
    if code != SP_OK:
        msg = lib.sp_last_error().decode(errors="replace")
        raise StridepackError(STATUS_NAMES.get(code, f"SP_ERR_UNKNOWN({code})"), code, msg)
