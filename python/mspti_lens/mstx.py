"""MSTX marks and ranges, as torch_npu's ``torch_npu.npu.mstx`` offers them, over
``libms_tools_ext.so`` bound at run time (the simulator exports the same symbols).

>>> from mspti_lens import mstx                                  # doctest: +SKIP
>>> with mstx.range("train_step"):                               # doctest: +SKIP
...     step()
>>> @mstx.range("forward", domain="model")                       # doctest: +SKIP
... def forward(x): ...
>>> mstx.mark("checkpoint")                                      # doctest: +SKIP

MSPTI turns these into MARKER activity records while a ``Session(activity=["marker"])`` runs;
ranges then become duration histograms in :meth:`Snapshot.ranges`, and ranges in the
``communication`` domain with torch_npu's JSON message (``{"opName": ..., "groupName": ...}``)
become device collective time in :meth:`Snapshot.collectives`. Without an MSTX library the calls
do nothing (one warning says why), as MSTX itself does without a tool attached.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from typing_extensions import Self

from . import _native

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R", bound="range")
DEFAULT_DOMAIN = "default"

_warned = False
_domains: dict[tuple[str, str], Domain] = {}
_lock = threading.Lock()


def library() -> str:
    """The path MSTX is bound from; raises ValueError saying what was tried when there is none."""
    return _native.mstx_library()


def available() -> bool:
    try:
        library()
        return True
    except ValueError:
        return False


def _stream(stream: Any) -> int:
    """An ``aclrtStream`` handle: None, an int, or a torch_npu stream (its ``npu_stream``)."""
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise TypeError("stream must be a stream handle (int) or a torch_npu stream, not a bool")
    if isinstance(stream, int):
        return stream
    handle = getattr(stream, "npu_stream", None)
    if isinstance(handle, int):
        return handle
    raise TypeError(
        f"stream must be a stream handle (int) or a torch_npu stream, not {type(stream).__name__}"
    )


def _call(f: Callable[..., Any], *args: Any) -> Any:
    global _warned
    try:
        return f(*args)
    except ValueError as e:
        if "no MSTX library" not in str(e):
            raise
        if not _warned:
            _warned = True
            warnings.warn(f"mspti_lens.mstx does nothing here: {e}", RuntimeWarning, stacklevel=3)
        return 0


class Domain:
    """An MSTX domain (``mstxDomainCreateA``); ``"default"`` is MSPTI's built-in one."""

    def __init__(self, name: str):
        if not isinstance(name, str) or not name:
            raise ValueError(f"a domain name is a non-empty string, not {name!r}")
        self.name = name
        self.handle = 0 if name == DEFAULT_DOMAIN else int(_call(_native.mstx_domain_create, name) or 0)

    def mark(self, message: str, stream: Any = None) -> None:
        _call(_native.mstx_mark, message, _stream(stream), self.handle)

    def range(self, message: str, stream: Any = None) -> range:
        return range(message, domain=self, stream=stream)

    def __repr__(self) -> str:
        return f"<mstx.Domain {self.name!r}>"


def domain(name: str) -> Domain:
    """The domain of this name (created once per MSTX library: handles belong to the library
    that made them, and marks follow the session's library when it exports MSTX itself)."""
    try:
        lib = library()
    except ValueError:
        lib = ""
    with _lock:
        d = _domains.get((lib, name))
        if d is None:
            d = _domains[(lib, name)] = Domain(name)
        return d


def _domain(d: str | Domain | None) -> Domain | None:
    if d is None or isinstance(d, Domain):
        return d
    return domain(d)


def mark(message: str, stream: Any = None, domain: str | Domain | None = None) -> None:
    """An instantaneous mark; with a stream, a device-side mark follows when the stream reaches it."""
    d = _domain(domain)
    _call(_native.mstx_mark, message, _stream(stream), d.handle if d else 0)


class range:  # named like torch_npu's mstx.range (shadows the builtin only in this module)
    """A range from ``__enter__`` to ``__exit__`` (``mstxRangeStartA`` / ``mstxRangeEnd``), also a
    decorator (each call is one range). With a stream, device-side START/END records follow."""

    def __init__(self, message: str, domain: str | Domain | None = None, stream: Any = None):
        if not isinstance(message, str):
            raise TypeError(f"an MSTX message is a str, not {type(message).__name__}")
        self.message = message
        self.domain = _domain(domain)
        self.stream = _stream(stream)
        self._ids = threading.local()

    def start(self) -> int:
        h = self.domain.handle if self.domain else 0
        return int(_call(_native.mstx_range_start, self.message, self.stream, h) or 0)

    def end(self, range_id: int) -> None:
        if range_id:
            _call(_native.mstx_range_end, range_id, self.domain.handle if self.domain else 0)

    def __enter__(self) -> Self:
        stack = getattr(self._ids, "stack", None)
        if stack is None:
            stack = self._ids.stack = []
        stack.append(self.start())
        return self

    def __exit__(self, *exc: object) -> None:
        self.end(self._ids.stack.pop())

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            rid = self.start()
            try:
                return fn(*args, **kwargs)
            finally:
                self.end(rid)

        return wrapper  # type: ignore[return-value]
