"""Reading a DLPack capsule with ctypes (no DLPack header needed at build or
run time). The structs mirror dlpack.h v0.8 (DLManagedTensor, "dltensor"
capsules) and v1.0 (DLManagedTensorVersioned, "dltensor_versioned"); DLTensor
itself is the same in both.

The capsule is read, never consumed: it is not renamed to "used_dltensor",
so its own destructor calls the producer's deleter when the capsule is
dropped. Holding the capsule is what keeps the memory alive while in use.
"""

import ctypes

# DLDeviceType
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13
# DLDataTypeCode
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT, KDL_COMPLEX, KDL_BOOL = 0, 1, 2, 4, 5, 6
READ_ONLY_FLAG = 1  # DLPACK_FLAG_BITMASK_READ_ONLY (v1.0)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),  # NULL: dense row-major
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))),
]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype, _is_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype, _get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def read_capsule(capsule):
    """(DLTensor, read_only) of a "dltensor" or "dltensor_versioned" capsule.
    The DLTensor points into memory the capsule owns: keep the capsule."""
    if _is_valid(capsule, b"dltensor"):
        m = DLManagedTensor.from_address(_get_pointer(capsule, b"dltensor"))
        return m.dl_tensor, False
    if _is_valid(capsule, b"dltensor_versioned"):
        m = DLManagedTensorVersioned.from_address(_get_pointer(capsule, b"dltensor_versioned"))
        if m.version.major != 1:
            raise BufferError(f"DLPack major version {m.version.major} is not supported")
        return m.dl_tensor, bool(m.flags & READ_ONLY_FLAG)
    raise TypeError("__dlpack__() did not return a DLPack capsule")
