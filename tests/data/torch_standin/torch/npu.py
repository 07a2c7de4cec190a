"""``torch.npu`` of the stand-in: the current device and its stream."""

from __future__ import annotations

import ctypes

from ._cann import lib

_acl = lib("libascendcl.so")
_stream = ctypes.c_void_p()


def set_device(device: int) -> None:
    rc = _acl.aclrtSetDevice(device)
    if rc != 0:
        raise RuntimeError(f"aclrtSetDevice failed: {rc}")
    if not _stream.value:
        rc = _acl.aclrtCreateStream(ctypes.byref(_stream))
        if rc != 0:
            raise RuntimeError(f"aclrtCreateStream failed: {rc}")


def current_stream() -> int:
    """The current stream's aclrtStream handle (created by ``set_device``)."""
    if not _stream.value:
        raise RuntimeError("torch.npu.set_device was not called")
    return _stream.value


def synchronize() -> None:
    rc = _acl.aclrtSynchronizeStream(ctypes.c_void_p(current_stream()))
    if rc != 0:
        raise RuntimeError(f"aclrtSynchronizeStream failed: {rc}")
