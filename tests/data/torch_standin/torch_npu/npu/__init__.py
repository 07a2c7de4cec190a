"""``torch_npu.npu`` of the stand-in: the current stream and MSTX."""

from torch.npu import current_stream

from . import mstx

__all__ = ["current_stream", "mstx"]
