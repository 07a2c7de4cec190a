"""The MSPTI callback catalogue: domains, callback ids and the function names that fire them.

Users name what to trace the way they know it: a domain (``"runtime"``, ``"hccl"``), a callback
by enum name (``"MSPTI_CBID_RUNTIME_LAUNCH"``), short name (``"LAUNCH"``), function name
(``"aclrtLaunchKernel"`` or CANN 8.x ``"rtKernelLaunch"``), or a ``(domain, id)`` pair.
MSPTI enables whole callback ids, so naming one function enables every function of its id
(``aclrtLaunchKernel`` enables the four LAUNCH functions).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from . import _native

# The domains and their id ranges are the native session's (rust/lens/src/session.rs, MSPTI's enum
# sizes in the ABI crate): (name, MSPTI value, highest callback id; ids start at 1).
DOMAINS: dict[str, int] = {name: value for name, value, _ in _native.NativeSession.DOMAINS}
DOMAIN_NAMES: dict[int, str] = {v: k for k, v in DOMAINS.items()}
#: The highest callback id each domain's ``(domain, id)`` pairs may name (1-36 runtime, 1-12 HCCL).
MAX_CBID: dict[int, int] = {value: top for _, value, top in _native.NativeSession.DOMAINS}

Target = str | tuple


@dataclass(frozen=True)
class Callback:
    """One callback id of `cbids.csv`."""

    domain: int
    cbid: int
    short: str
    enum: str
    names_26x: tuple[str, ...]
    names_8x: tuple[str, ...]

    @property
    def domain_name(self) -> str:
        return DOMAIN_NAMES[self.domain]

    @property
    def label(self) -> str:
        """The name users know: the first 26.x function name, else the 8.x one, else the enum."""
        if self.names_26x:
            return self.names_26x[0]
        if self.names_8x:
            return self.names_8x[0]
        return self.enum


@cache
def callbacks() -> tuple[Callback, ...]:
    """Every defined callback id, INVALID included (37 runtime, 13 HCCL)."""
    return tuple(
        Callback(d, c, short, enum, tuple(a), tuple(b)) for d, c, short, enum, a, b in _native.callbacks()
    )


def callback(domain: int, cbid: int) -> Callback | None:
    for c in callbacks():
        if c.domain == domain and c.cbid == cbid:
            return c
    return None


def enableable() -> tuple[Callback, ...]:
    """Callback ids that can be enabled (every id but INVALID)."""
    return tuple(c for c in callbacks() if c.cbid != 0)


def suggest(word: str, choices: Iterable[str]) -> str:
    """ "; did you mean X?" for the closest choice (case-insensitive), or "": what every error
    about a name the user typed (a callback, domain, kind, command or option) ends with."""
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(str(word).strip().lower(), list(by_lower), n=1, cutoff=0.6)
    return f"; did you mean {by_lower[close[0]]!r}?" if close else ""


def names() -> list[str]:
    """Every name :func:`resolve` takes as a string: domains, enum, short and function names."""
    return [*DOMAINS, *(n for c in enableable() for n in (c.enum, c.short, *c.names_26x, *c.names_8x))]


def _valid_choices() -> str:
    shorts = ", ".join(c.short for c in enableable())
    domains = ", ".join(repr(n) for n in DOMAINS)
    ranges = " and ".join(f"1-{MAX_CBID[v]} for {n}" for n, v in DOMAINS.items())
    return (
        f"valid choices are a domain ({domains}), a callback's short name "
        f"({shorts}), its enum name (e.g. 'MSPTI_CBID_RUNTIME_LAUNCH'), a function name "
        f"(e.g. 'aclrtLaunchKernel', 'HcclAllReduce', 'rtKernelLaunch'), or a (domain, id) pair with ids "
        f"{ranges}"
    )


def _unknown_domain(d: object) -> ValueError:
    valid = " and ".join(f"{n!r} ({v})" for n, v in DOMAINS.items())
    return ValueError(f"unknown domain {d!r}; valid domains are {valid}")


def _domain_value(d: object) -> int:
    if isinstance(d, bool):
        raise _unknown_domain(d)
    if isinstance(d, int) and d in DOMAIN_NAMES:
        return d
    if isinstance(d, str):
        key = d.strip().lower().removeprefix("mspti_cb_domain_")
        if key in DOMAINS:
            return DOMAINS[key]
    raise _unknown_domain(d)


def resolve(what: Target) -> tuple[int, int | None]:
    """Turn one user target into ``(domain, cbid)``; ``cbid`` is None for a whole domain.

    Raises ValueError naming the valid choices for anything unknown.
    """
    if isinstance(what, tuple):
        if len(what) != 2:
            raise ValueError(f"a (domain, id) pair has two items, not {len(what)}: {what!r}")
        d = _domain_value(what[0])
        cbid = what[1]
        if isinstance(cbid, str):
            dd, cc = resolve(cbid)
            if dd != d or cc is None:
                raise ValueError(f"{cbid!r} is not a callback of domain {DOMAIN_NAMES[d]!r}")
            return d, cc
        if not isinstance(cbid, int) or isinstance(cbid, bool):
            raise ValueError(f"callback id must be an int, not {type(cbid).__name__}: {what!r}")
        top = MAX_CBID[d]
        if not 1 <= cbid <= top:
            raise ValueError(
                f"callback id {cbid} is out of range for domain {DOMAIN_NAMES[d]!r}; valid ids are 1-{top}"
            )
        return d, cbid
    if not isinstance(what, str):
        raise ValueError(f"cannot enable {what!r} (a {type(what).__name__}); {_valid_choices()}")
    text = what.strip()
    low = text.lower().removeprefix("mspti_cb_domain_")
    if low in DOMAINS:
        return DOMAINS[low], None
    up = text.upper()
    for c in enableable():
        if up in (c.enum, c.short) or text in c.names_26x or text in c.names_8x:
            return c.domain, c.cbid
    hint = suggest(text, names())
    if hint:  # one short line: the near name, not the whole catalogue
        domains = " or ".join(repr(n) for n in DOMAINS)
        raise ValueError(
            f"unknown callback or domain {what!r}{hint} (valid: a domain, {domains}, or a "
            "callback's short, enum or function name)"
        )
    raise ValueError(f"unknown callback or domain {what!r}; {_valid_choices()}")
