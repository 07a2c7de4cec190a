"""``torch.distributed`` of the stand-in: one HCCL communicator over the job's ranks."""

from __future__ import annotations

import ctypes
import os
from typing import Any

from . import npu
from ._cann import lib

_hccl = lib("libhccl.so")
_comm = ctypes.c_void_p()
# HcclRootInfo (hccl/hccl_types.h): the group's name is what every rank puts there, as
# torch_npu's process groups are named.
ROOT_INFO_BYTES = 4108
GROUP_NAME = b"group_name_0"
HCCL_REDUCE_SUM = 0
# numpy dtype name -> HcclDataType
_HCCL_TYPES = {"float16": 3, "float32": 4}


def init_process_group(backend: str = "hccl", init_method: str = "env://") -> None:
    if backend != "hccl":
        raise ValueError(f"backend {backend!r}: only 'hccl' is simulated")
    root = ctypes.create_string_buffer(GROUP_NAME, ROOT_INFO_BYTES)
    rc = _hccl.HcclCommInitRootInfo(
        int(os.environ["WORLD_SIZE"]), root, int(os.environ["RANK"]), ctypes.byref(_comm)
    )
    if rc != 0:
        raise RuntimeError(f"HcclCommInitRootInfo failed: {rc}")


def all_reduce(tensor: Any) -> None:
    count = 1
    for d in tensor.shape:
        count *= d
    buf = ctypes.c_void_p(tensor.device)
    rc = _hccl.HcclAllReduce(
        buf,
        buf,
        ctypes.c_uint64(count),
        _HCCL_TYPES[tensor.dtype.name],
        HCCL_REDUCE_SUM,
        _comm,
        ctypes.c_void_p(npu.current_stream()),
    )
    if rc != 0:
        raise RuntimeError(f"HcclAllReduce failed: {rc}")
