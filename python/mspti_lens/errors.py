"""Exceptions and warnings of mspti_lens.

Every error the native core raises derives from :class:`MsptiError`. An error from an MSPTI call,
:class:`MsptiCallError`, says what failed in its attributes ``code`` (the ``msptiResult``),
``code_name`` (``"MSPTI_ERROR_..."``) and ``function`` (``"msptiSubscribe"``...), also in
``args[1:]`` after the message; the two that users meet in practice
have their own classes: :class:`SubscriberBusyError` (code 2: another tool holds MSPTI's only
subscriber slot) and :class:`PreloadRequiredError` (code 6: the process was not started with
``LD_PRELOAD`` of libmspti.so). Bad arguments raise :class:`ValueError` naming the valid choices.
"""

from __future__ import annotations

from ._native import (
    LibraryError,
    MsptiCallError,
    MsptiError,
    PreloadRequiredError,
    SessionError,
    SubscriberBusyError,
)

__all__ = [
    "LibraryError",
    "MsptiCallError",
    "MsptiError",
    "NotPreloadedWarning",
    "PreloadRequiredError",
    "SessionError",
    "SimulatedBackendWarning",
    "SubscriberBusyError",
]


class SimulatedBackendWarning(UserWarning):
    """No real libmspti.so was found, so the bundled simulator is in use: results are simulated."""


class NotPreloadedWarning(UserWarning):
    """A real libmspti.so is in use but the process was not started with it in LD_PRELOAD, so no
    callback will fire (CANN 8.x stays silent; MSPTI 26.x refuses with code 6)."""
