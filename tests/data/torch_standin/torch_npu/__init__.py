"""A stand-in for torch_npu (tests only; see ../README.md)."""

from . import npu

__all__ = ["npu"]
