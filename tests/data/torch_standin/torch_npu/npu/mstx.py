"""``torch_npu.npu.mstx`` of the stand-in: MSTX ranges through the tree's libms_tools_ext.so."""

from __future__ import annotations

import ctypes

from torch._cann import lib

_mstx = lib("libms_tools_ext.so")
_mstx.mstxRangeStartA.restype = ctypes.c_uint64
_mstx.mstxRangeStartA.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
_mstx.mstxRangeEnd.argtypes = [ctypes.c_uint64]
_mstx.mstxMarkA.argtypes = [ctypes.c_char_p, ctypes.c_void_p]


def mark(message: str, stream: int | None = None) -> None:
    _mstx.mstxMarkA(message.encode(), stream)


def range_start(message: str, stream: int | None = None) -> int:
    return int(_mstx.mstxRangeStartA(message.encode(), stream))


def range_end(range_id: int) -> None:
    _mstx.mstxRangeEnd(range_id)
