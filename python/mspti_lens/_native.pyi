"""Type stubs of the native core (rust/lens/src/py). Users want the wrappers in mspti_lens."""

from typing import Any, final

__all__ = [
    "__version__",
    "SCALE",
    "MIN_INDEX",
    "MAX_INDEX",
    "RANGE_MAX_NS",
    "MAX_RELATIVE_ERROR",
    "SLOWEST_PER_KEY",
    "ARRIVALS_PER_THREAD",
    "HISTOGRAM_BYTES",
    "TSC_RELIABLE",
    "COUNTERS",
    "build_profile",
    "MsptiError",
    "LibraryError",
    "MsptiCallError",
    "SubscriberBusyError",
    "PreloadRequiredError",
    "SessionError",
    "Library",
    "NativeSession",
    "NativeSnapshot",
    "NativeCut",
    "load_library",
    "find_library",
    "search_order",
    "mapped_libmspti",
    "health",
    "self_cost",
    "take_collective_arrivals",
    "callbacks",
    "results",
    "bucket_bounds",
    "bucket_index",
    "nearest_rank",
    "bucket_tables",
    "callback_data_layout",
    "route_signal_to_main_thread",
    "signal_handled",
    "timeline_start",
    "timeline_stop",
    "timeline_tick",
    "timeline_rows",
    # device activity and MSTX
    "NativeActivity",
    "NativeActivitySnapshot",
    "activity_kinds",
    "device_event_kinds",
    "DEVICE_EVENTS_DEFAULT",
    "DEVICE_EVENTS_MAX",
    "ACTIVITY_BUFFERS_DEFAULT",
    "ACTIVITY_POOL_CAP",
    "ACTIVITY_SETTLE_TIMEOUT_S",
    "ACTIVITY_JOIN_SAMPLE_DEFAULT",
    "ACTIVITY_COUNTERS",
    "mstx_library",
    "mstx_mark",
    "mstx_range_start",
    "mstx_range_end",
    "mstx_domain_create",
]

__version__: str
SCALE: int
MIN_INDEX: int
MAX_INDEX: int
RANGE_MAX_NS: int
MAX_RELATIVE_ERROR: float
SLOWEST_PER_KEY: int
ARRIVALS_PER_THREAD: int
HISTOGRAM_BYTES: int
TSC_RELIABLE: bool
COUNTERS: list[tuple[str, str]]
build_profile: str

class MsptiError(Exception): ...
class LibraryError(MsptiError): ...

class MsptiCallError(MsptiError):
    """An MSPTI function returned an error code; args: (message, code, code_name, function)."""

    code: int
    code_name: str
    function: str

class SubscriberBusyError(MsptiCallError): ...
class PreloadRequiredError(MsptiCallError): ...
class SessionError(MsptiError): ...

@final
class Library:
    """A loaded MSPTI library; libraries stay loaded for the life of the process."""
    @property
    def path(self) -> str: ...
    @property
    def origin(self) -> str:
        """explicit, MSPTI_LIBRARY, preloaded, CANN or simulator."""
    @property
    def simulated(self) -> bool: ...
    @property
    def optional_symbols(self) -> list[str]: ...
    @property
    def version(self) -> int | None:
        """msptiGetVersion (xxyyzz), where the library has it."""
    @property
    def preloaded(self) -> bool:
        """Whether LD_PRELOAD names this library."""
    @property
    def sim_fidelity(self) -> int | None:
        """0 documented, 1 cann26, 2 cann8; None for a real library."""
    def result_string(self, code: int) -> str | None: ...

def load_library(path: str | None = None, simulator: str | None = None) -> Library:
    """In the order of search_order(), simulator last (if given)."""

def find_library(
    path: str | None = None, simulator: str | None = None
) -> tuple[str | None, str | None, list[str]]:
    """Where load_library would look, opening nothing: (path or None, origin, tried)."""

def search_order() -> list[tuple[str, str]]:
    """The discovery order: (origin, where) per place searched."""

def mapped_libmspti() -> str | None: ...
def health() -> dict[str, Any]:
    """poisoned, forked, late_threads, clock_errors (process-wide)."""

def self_cost() -> dict[str, Any]:
    """What mspti-lens has cost this process: sample_every, samples, skipped, sampled_ns,
    callback_cpu_ns, ns_per_pair (None before a sample), clock_overhead_ns, clock, drain_cpu_ns."""

def take_collective_arrivals() -> dict[str, Any]:
    """HCCL calls entered since the last take: cbid, name, sequence, start_ns columns; dropped."""

def callbacks() -> list[tuple[int, int, str, str, list[str], list[str]]]:
    """(domain, cbid, short, enum name, 26.x names, 8.x names) for every callback id."""

def results() -> list[tuple[int, str, str]]:
    """(code, enum name, library string) for every msptiResult."""

def bucket_bounds(index: int) -> tuple[float, float]:
    """(lower, upper) in ns of bucket `index`: base^index exclusive, base^(index+1) inclusive."""

def bucket_index(value_ns: int) -> int | None:
    """The bucket index of a value; None for 0 ns (zero bucket) and beyond RANGE_MAX_NS."""

def nearest_rank(q: float, n: int) -> int:
    """ceil(q*n) in integers (q to 9 decimals), at least 1."""

def bucket_tables() -> dict[str, Any]: ...
def route_signal_to_main_thread(signum: int) -> None:
    """Put a C handler in front of the one signal.signal installed for signum: taken on another
    thread, the signal is sent on to the main thread, and the main thread is kicked out of its
    wait until the Python handler calls signal_handled."""

def signal_handled(signum: int) -> None:
    """Called first by the Python handler of a routed signal: no more kicks."""

def callback_data_layout() -> dict[str, int]: ...

# latency over time
def timeline_start(interval_s: float, levels: int = 8, per_level: int = 64, ticking: bool = True) -> None: ...
def timeline_stop() -> None: ...
def timeline_tick() -> None: ...
def timeline_rows() -> dict[str, list[Any]]: ...

@final
class NativeSession:
    """One MSPTI subscription (the process's only one)."""

    #: The clock names ``start`` takes.
    CLOCKS: list[str]
    #: The callback domains: (name, MSPTI value, highest callback id; ids start at 1).
    DOMAINS: list[tuple[str, int, int]]
    def __new__(cls, library: Library, userdata: int = 0, slowest: bool = True) -> NativeSession: ...
    @property
    def library(self) -> Library: ...
    @property
    def running(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    @property
    def clock(self) -> str: ...
    def set_domain(self, domain: int, on: bool) -> None: ...
    def set_callback(self, domain: int, cbid: int, on: bool) -> None: ...
    def wanted(self, domain: int) -> int: ...
    def start(self, clock: str = "auto") -> str: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...
    def snapshot(self) -> NativeSnapshot: ...
    def reset(self) -> NativeSnapshot: ...
    def cut(self) -> NativeCut: ...

@final
class NativeSnapshot:
    """Merged histograms, one per (domain, cbid, function name)."""
    def stats(self, quantiles: list[float]) -> dict[str, list[Any]]: ...
    def buckets(self) -> dict[str, list[Any]]: ...
    def key_state(self) -> dict[str, list[Any]]: ...
    def counters(self) -> dict[str, int]: ...
    def slowest(self) -> dict[str, list[Any]]:
        """The slowest calls per (thread, key): domain, cbid, name, thread_id, start_unix_ns, duration_ns."""
    def merge(self, other: NativeSnapshot) -> NativeSnapshot: ...
    def with_cut(self, cut: NativeCut) -> NativeSnapshot: ...
    def __len__(self) -> int: ...
    @staticmethod
    def from_state(
        domain: list[int],
        cbid: list[int],
        name: list[str],
        sum: list[int],
        sum_sq: list[int],
        min: list[int | None],
        max: list[int | None],
        overflow: list[int],
        bucket_key: list[int],
        bucket_index: list[int | None],
        bucket_count: list[int],
        counters: dict[str, int],
    ) -> NativeSnapshot: ...
    @staticmethod
    def from_values(values: list[int], name: str = "values") -> NativeSnapshot: ...

@final
class NativeCut:
    """Calls cut out of a session's window (NativeSession.cut): their non-empty buckets alone."""
    def merge(self, other: NativeCut) -> NativeCut: ...
    def counters(self) -> dict[str, int]: ...
    def counters_of(self, names: list[str]) -> list[int]: ...
    def snapshot(self) -> NativeSnapshot: ...
    def __len__(self) -> int: ...

# -- device activity and MSTX -------------------------------------------------------------------

@final
class NativeActivity:
    """The activity collector sharing a session's subscription (buffer pool, drain thread, join)."""
    def __new__(
        cls,
        session: NativeSession,
        buffer_size: int = ...,
        buffers: int = ...,
        flush_interval_ms: int = 500,
        mark_stream: int | None = None,
        device_events: int = ...,
        pool_cap: int | None = None,
        settle_timeout_s: float | None = None,
        join_sample: float = ...,
    ) -> NativeActivity: ...
    def enable(self, kinds: list[str]) -> None: ...
    def disable(self, kinds: list[str]) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def flush(self, settle: bool = True) -> None: ...
    def close(self) -> None: ...
    def snapshot(self, reset: bool = False) -> NativeActivitySnapshot: ...
    def _pause_drain(self, paused: bool) -> None: ...
    @property
    def wanted(self) -> list[str]: ...
    @property
    def join(self) -> str: ...
    @property
    def clock_bridge(self) -> str: ...
    @property
    def symbols(self) -> list[str]: ...
    @property
    def settle_timeout(self) -> float: ...
    @settle_timeout.setter
    def settle_timeout(self, seconds: float) -> None: ...

@final
class NativeActivitySnapshot:
    """One window of device activity: histogram rows per table, marks, counters."""
    def stats(self, quantiles: list[float]) -> dict[str, list[Any]]: ...
    def buckets(self) -> dict[str, list[int]]: ...
    def marks(self) -> list[tuple[str, str, bool, int]]: ...
    def counters(self) -> dict[str, int]: ...
    def info(self) -> dict[str, Any]: ...
    def state(self) -> dict[str, Any]: ...
    def __len__(self) -> int: ...
    def events(self) -> dict[str, list[Any]]: ...
    def merge(self, other: NativeActivitySnapshot) -> NativeActivitySnapshot: ...
    @staticmethod
    def from_state(
        table: list[str],
        key0: list[str],
        key1: list[str],
        key2: list[str],
        metric: list[str],
        bytes: list[int],
        sum: list[int],
        sum_sq: list[float],
        min: list[int | None],
        max: list[int | None],
        overflow: list[int],
        buckets: list[list[int]],
        counts: list[list[int]],
        marks: list[tuple[str, str, bool, int]],
        counters: dict[str, int],
        join: str,
        clock_bridge: str,
        kinds: list[str],
        events: dict[str, list[Any]] | None = None,
        readings: list[tuple[int, int, dict[str, int]]] | None = None,
    ) -> NativeActivitySnapshot: ...

def activity_kinds() -> list[str]: ...
def device_event_kinds() -> list[str]: ...

DEVICE_EVENTS_DEFAULT: int
DEVICE_EVENTS_MAX: int
# (bytes per buffer, buffers at the start); the pool's memory cap; the settle wait's bound (s).
ACTIVITY_BUFFERS_DEFAULT: tuple[int, int]
ACTIVITY_POOL_CAP: int
ACTIVITY_SETTLE_TIMEOUT_S: float
# The fraction of time the RUNTIME_API launch join records, by default (1.0: exact).
ACTIVITY_JOIN_SAMPLE_DEFAULT: float
# (name, combine: sum | moment | peak | flag, counts a loss, meaning) of every activity counter.
ACTIVITY_COUNTERS: list[tuple[str, str, bool, str]]

def mstx_library() -> str: ...
def mstx_mark(message: str, stream: int = 0, domain: int = 0) -> None: ...
def mstx_range_start(message: str, stream: int = 0, domain: int = 0) -> int: ...
def mstx_range_end(id: int, domain: int = 0) -> None: ...
def mstx_domain_create(name: str) -> int: ...

# Only in builds with the cargo feature test-hooks (`make dev`), not in wheels.
def _bench_aggregate(records: int, names: int = 64, api: bool = False) -> tuple[int, int]: ...
def _bench_complete(buffers: int, pressure: bool = False) -> float: ...
def _trip_without_waking(signum: int) -> None: ...
