"""A stand-in for torch (tests only; see ../README.md): tensors live in the simulated CANN tree's
device memory and their operators are the tree's aclnn operators, called through ctypes."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from . import distributed, npu
from ._cann import lib

__all__ = ["Tensor", "distributed", "float16", "float32", "matmul", "npu", "randn"]

float16 = np.float16
float32 = np.float32
# numpy dtype -> aclDataType (acl/acl_base.h)
_ACL_TYPES = {np.dtype(np.float32): 0, np.dtype(np.float16): 1}
ACL_FORMAT_ND = 2
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2


acl = lib("libascendcl.so")
nnop = lib("libnnopbase.so")
opapi = lib("libopapi.so")
nnop.aclCreateTensor.restype = ctypes.c_void_p
nnop.aclCreateScalar.restype = ctypes.c_void_p


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what} failed: {rc}")


class Tensor:
    """A 2-D (or any-D) tensor in host memory, or on the simulated device after ``npu()``."""

    def __init__(self, shape: tuple[int, ...], dtype: type, host: np.ndarray | None = None, device: int = 0):
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.host = host
        self.device = device

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize

    def npu(self) -> Tensor:
        ptr = ctypes.c_void_p()
        _check(acl.aclrtMalloc(ctypes.byref(ptr), ctypes.c_size_t(self.nbytes), 0), "aclrtMalloc")
        assert self.host is not None
        data = np.ascontiguousarray(self.host)
        _check(
            acl.aclrtMemcpy(
                ptr,
                ctypes.c_size_t(self.nbytes),
                data.ctypes.data_as(ctypes.c_void_p),
                ctypes.c_size_t(self.nbytes),
                ACL_MEMCPY_HOST_TO_DEVICE,
            ),
            "aclrtMemcpy",
        )
        return Tensor(self.shape, self.dtype.type, device=ptr.value or 0)

    def cpu(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        _check(
            acl.aclrtMemcpy(
                out.ctypes.data_as(ctypes.c_void_p),
                ctypes.c_size_t(self.nbytes),
                ctypes.c_void_p(self.device),
                ctypes.c_size_t(self.nbytes),
                ACL_MEMCPY_DEVICE_TO_HOST,
            ),
            "aclrtMemcpy",
        )
        return out

    def acl_tensor(self) -> int:
        dims = (ctypes.c_int64 * len(self.shape))(*self.shape)
        strides = [1] * len(self.shape)
        for i in range(len(self.shape) - 2, -1, -1):
            strides[i] = strides[i + 1] * self.shape[i + 1]
        st = (ctypes.c_int64 * len(self.shape))(*strides)
        t = nnop.aclCreateTensor(
            dims,
            ctypes.c_uint64(len(self.shape)),
            _ACL_TYPES[self.dtype],
            st,
            ctypes.c_int64(0),
            ACL_FORMAT_ND,
            dims,
            ctypes.c_uint64(len(self.shape)),
            ctypes.c_void_p(self.device),
        )
        if not t:
            raise RuntimeError("aclCreateTensor failed")
        return int(t)

    def __add__(self, other: Tensor) -> Tensor:
        out = empty_like(self)
        alpha = ctypes.c_float(1.0)
        scalar = nnop.aclCreateScalar(ctypes.byref(alpha), 0)
        _run2(
            opapi.aclnnAddGetWorkspaceSize,
            opapi.aclnnAdd,
            [self.acl_tensor(), other.acl_tensor(), scalar, out.acl_tensor()],
        )
        return out


def _run2(get_workspace: Any, run: Any, args: list[int]) -> None:
    """An aclnn operator's two phases on the current stream."""
    size = ctypes.c_uint64()
    executor = ctypes.c_void_p()
    _check(
        get_workspace(*[ctypes.c_void_p(a) for a in args], ctypes.byref(size), ctypes.byref(executor)),
        get_workspace.__name__,
    )
    _check(run(None, size, executor, ctypes.c_void_p(npu.current_stream())), run.__name__)


def empty_like(t: Tensor) -> Tensor:
    return Tensor(t.shape, t.dtype.type, host=np.zeros(t.shape, t.dtype)).npu()


def randn(*shape: int, dtype: type = float32) -> Tensor:
    return Tensor(tuple(shape), dtype, host=np.random.default_rng().standard_normal(shape).astype(dtype))


def matmul(a: Tensor, b: Tensor) -> Tensor:
    shape = (a.shape[0], b.shape[1])
    out = Tensor(shape, a.dtype.type, host=np.zeros(shape, a.dtype)).npu()
    size = ctypes.c_uint64()
    executor = ctypes.c_void_p()
    args = [ctypes.c_void_p(x) for x in (a.acl_tensor(), b.acl_tensor(), out.acl_tensor())]
    cube_math_type = ctypes.c_int8(0)
    _check(
        opapi.aclnnMatmulGetWorkspaceSize(*args, cube_math_type, ctypes.byref(size), ctypes.byref(executor)),
        "aclnnMatmulGetWorkspaceSize",
    )
    _check(opapi.aclnnMatmul(None, size, executor, ctypes.c_void_p(npu.current_stream())), "aclnnMatmul")
    return out
