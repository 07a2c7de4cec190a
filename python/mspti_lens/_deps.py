"""Lazy imports of the optional notebook dependencies, with an install hint when missing."""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, extra: str = "notebook") -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as e:  # pragma: no cover - exercised only without the extra installed
        raise ImportError(
            f"{module} is needed for this; install it with `pip install 'mspti-lens[{extra}]'`"
        ) from e
