"""The simulated CANN tree's libraries, as torch_npu reaches CANN's: each library is loaded into
the global namespace and its functions are looked up there, so a call resolves as a linked
program's call does, to the first definition in load order: libmspti.so's wrapper when it is
preloaded, else the library's own function. (``ctypes.CDLL(path).f`` would look ``f`` up in that
library alone and bypass a preloaded libmspti.so.)"""

from __future__ import annotations

import ctypes
import os

_GLOBAL = ctypes.CDLL(None)


def lib(name: str) -> ctypes.CDLL:
    ctypes.CDLL(os.path.join(os.environ["ASCEND_HOME_PATH"], "lib64", name), mode=ctypes.RTLD_GLOBAL)
    return _GLOBAL
