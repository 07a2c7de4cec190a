"""A Session's window hand-over for the window writer, without a library: window i holds CALLS
calls of exact durations (of one function, aclrtLaunchKernel unless told), so compaction and
readers can be checked against known sums."""

from __future__ import annotations

from mspti_lens import _native
from mspti_lens.snapshot import Snapshot

CALLS = 3  # calls in each window


class FakeSession:
    """What runs.writer.WindowWriter asks of a Session: reset() hands over window i."""

    def __init__(self, name: str = "aclrtLaunchKernel", start: float = 1000.0) -> None:
        self.i = 0
        self.name = name
        self.start = start  # window i spans start + i .. start + i + 1 (s since the epoch)
        self.activity: list[str] = []

    def reset(self) -> Snapshot:
        self.i += 1
        values = [1_000 * self.i, 7 + self.i % 5, 3_000_000 + self.i]
        snap = Snapshot(_native.NativeSnapshot.from_values(values, self.name), {})
        start = self.start + self.i
        return snap.with_meta(window_start=start, window_end=start + 1, simulated=True)

    def flush_activity(self, settle: bool) -> None:
        pass

    def stop(self) -> None:
        pass

    def close(self) -> None:
        pass
