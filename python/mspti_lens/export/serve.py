"""``mspti_lens.serve(port)``: a read-only Prometheus ``/metrics`` endpoint.

One daemon thread runs an asyncio loop that accepts scrapes; a second renders the exposition
(at most one render at a time, reused for ``min_interval`` seconds, so many concurrent scrapes
cost one snapshot). Neither touches the callback: a snapshot reads the shards' counters without
a lock the callback takes, and the callback never runs Python. A scrape that is malformed,
slow (no complete request head within ``timeout`` seconds, or too slow to read the answer) or one
too many is answered or dropped on its own; the server keeps serving. A connection over
``max_connections`` closes the one that has waited longest without sending a request, so idle
connections cannot starve a scrape; only when every open connection is being answered does it
get 503. It binds 127.0.0.1 unless another address is given explicitly.

:func:`respond` is what /metrics answers to a request head, apart from any socket; the server
around it is the transport (accepting, reading the head, writing the answer, limits).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from . import prometheus

MAX_HEAD_BYTES = 8192
TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class Response:
    """One HTTP answer: status, body, its content type; ``head_only`` for HEAD (no body sent)."""

    status: HTTPStatus
    body: bytes
    content_type: str = TEXT
    head_only: bool = False

    def encode(self) -> bytes:
        """The whole HTTP/1.1 message (one answer per connection, then close)."""
        head = (
            f"HTTP/1.1 {self.status.value} {self.status.phrase}\r\nContent-Type: {self.content_type}\r\n"
            f"Content-Length: {len(self.body)}\r\nConnection: close\r\n"
            + ("Allow: GET, HEAD\r\n" if self.status == HTTPStatus.METHOD_NOT_ALLOWED else "")
            + "\r\n"
        ).encode()
        return head if self.head_only else head + self.body


def respond(head: bytes, render: Callable[[str], bytes]) -> Response:
    """The answer to one request head (the bytes up to and including its blank line), with
    ``render(fmt)`` giving the exposition in the negotiated format. No sockets, no clock: the
    whole of what /metrics answers, apart from the connection."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
        if not version.startswith("HTTP/1."):
            raise ValueError(version)
        headers = {}
        for line in lines[1:]:
            if line:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
    except ValueError:
        return Response(HTTPStatus.BAD_REQUEST, b"malformed request\n")
    if method not in ("GET", "HEAD"):
        return Response(HTTPStatus.METHOD_NOT_ALLOWED, b"read-only: only GET and HEAD of /metrics\n")
    if target.split("?", 1)[0] != "/metrics":
        return Response(HTTPStatus.NOT_FOUND, b"only /metrics is served here\n", head_only=method == "HEAD")
    fmt = prometheus.negotiate(headers.get("accept"))
    try:
        body = render(fmt)
    except Exception as e:  # noqa: BLE001 - reported to the scraper, the server goes on
        return Response(
            HTTPStatus.INTERNAL_SERVER_ERROR, f"mspti-lens could not take a snapshot: {e}\n".encode()
        )
    return Response(HTTPStatus.OK, body, prometheus.content_type(fmt), head_only=method == "HEAD")


def _seconds(name: str, value: Any, *, zero: bool) -> float:
    """A finite number of seconds, > 0 (or >= 0 with ``zero``), else ValueError naming the range."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not zero):
        valid = ">= 0" if zero else "> 0"
        raise ValueError(f"{name} must be a finite number of seconds {valid}, not {value!r}")
    return float(value)


def _source_of(source: Any) -> Callable[[], Any]:
    """A zero-argument function returning the snapshot to expose."""
    from ..session import Session
    from ..snapshot import Snapshot

    if source is None:
        from .. import session as session_module

        ref = getattr(session_module, "_active", None)
        active = ref() if ref is not None else None
        if active is None:
            raise ValueError(
                "serve() found no Session to expose: create one first (mspti_lens.Session(...)) "
                "or pass source= a Session, a Snapshot or a function returning a Snapshot"
            )
        return active.snapshot
    if isinstance(source, Session):
        return source.snapshot
    if isinstance(source, Snapshot) or (hasattr(source, "histogram") and hasattr(source, "summary")):
        return lambda: source  # a snapshot, or anything with its frames
    if callable(source):
        return source
    raise ValueError(
        f"serve() takes source= a Session, a Snapshot or a function returning a Snapshot, "
        f"not {type(source).__name__}"
    )


class MetricsServer:
    """A running ``/metrics`` endpoint (returned by :func:`serve`); ``close()`` stops it."""

    def __init__(
        self,
        source: Any = None,
        port: int = 9464,
        *,
        address: str = "127.0.0.1",
        rank: int | str | None = None,
        host: str | None = None,
        min_interval: float = 0.25,
        timeout: float = 5.0,
        max_connections: int = 64,
    ):
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an int in 0..65535 (0 picks a free port), not {port!r}")
        if not isinstance(address, str) or not address:
            raise ValueError(f"address must be a host address such as '127.0.0.1', not {address!r}")
        self.min_interval = _seconds("min_interval", min_interval, zero=True)
        self.timeout = _seconds("timeout", timeout, zero=False)
        if not isinstance(max_connections, int) or isinstance(max_connections, bool) or max_connections < 1:
            raise ValueError(f"max_connections must be an int >= 1, not {max_connections!r}")
        self.max_connections = max_connections
        self._snapshot = _source_of(source)
        self._rank, self._host = rank, host
        self._cache: dict[str, tuple[float, bytes]] = {}
        self._render_lock = threading.Lock()
        self._renderer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mspti-lens-render")
        self._open = 0
        # Connections still waiting for their request head, oldest first: the ones to close when
        # a new connection would go over max_connections (an idle one must not starve a scrape).
        self._idle: dict[asyncio.Task, None] = {}
        #: Scrapes answered, by HTTP status (for tests and for people).
        self.answered: dict[int, int] = {}
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, args=(address, port, ready), name="mspti-lens-metrics", daemon=True
        )
        self._thread.start()
        try:
            ready.result()
        except OSError as e:
            self._renderer.shutdown(wait=False)
            raise OSError(
                e.errno,
                f"serve() cannot listen on {address}:{port} ({e.strerror or e}); pick another port, "
                "or port=0 for a free one",
            ) from None
        assert self._server is not None
        self.address: str
        self.port: int
        self.address, self.port = self._server.sockets[0].getsockname()[:2]

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}/metrics"

    @property
    def source(self) -> Callable[[], Any]:
        """The function each render takes its snapshot from."""
        return self._snapshot

    def serve_from(self, source: Any) -> None:
        """Serve ``source`` from now on (a Session, a Snapshot or a function returning one; a
        recorded rank's flight recorder gives its writer's window so far,
        runs/flight_recorder.py); the next scrape renders it."""
        with self._render_lock:
            self._snapshot = _source_of(source)
            self._cache.clear()

    def _run(self, address: str, port: int, ready: concurrent.futures.Future) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._handle, address, port, limit=MAX_HEAD_BYTES, backlog=128)
            )
        except OSError as e:
            self._loop.close()
            ready.set_exception(e)
            return
        ready.set_result(None)
        self._loop.run_forever()
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()

    # -- rendering ---------------------------------------------------------------------------
    def render(self, fmt: str) -> bytes:
        """The exposition in ``fmt``, rendered at most once per ``min_interval``."""
        with self._render_lock:
            hit = self._cache.get(fmt)
            now = time.monotonic()
            if hit is not None and now - hit[0] < self.min_interval:
                return hit[1]
            out = prometheus.to_prometheus(self._snapshot(), fmt, rank=self._rank, host=self._host)
            body = out.encode() if isinstance(out, str) else out
            self._cache[fmt] = (time.monotonic(), body)
            return body

    # -- connections -------------------------------------------------------------------------
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open += 1
        me = asyncio.current_task()
        try:
            if self._open > self.max_connections and not self._close_oldest_idle():
                busy = Response(HTTPStatus.SERVICE_UNAVAILABLE, b"too many concurrent scrapes\n")
                await self._send(writer, busy)
                return
            if me is not None:
                self._idle[me] = None
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.timeout)
            except asyncio.LimitOverrunError:
                await self._send(
                    writer, Response(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, b"request head too large\n")
                )
                return
            except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                return  # a slow or vanished client: drop it
            finally:
                self._idle.pop(me, None)  # type: ignore[arg-type]
            answer = await self._loop.run_in_executor(self._renderer, respond, head, self.render)
            await self._send(writer, answer)
        except asyncio.CancelledError:
            pass  # close(), or an idle connection making room: dropped quietly
        except Exception:  # noqa: BLE001, S110 - one bad connection never stops the server
            pass
        finally:
            self._open -= 1
            writer.close()

    def _close_oldest_idle(self) -> bool:
        """Drop the connection that has waited longest without sending a request; False if
        every open connection is being answered."""
        for task in self._idle:
            del self._idle[task]
            task.cancel()
            return True
        return False

    async def _send(self, writer: asyncio.StreamWriter, answer: Response) -> None:
        self.answered[answer.status.value] = self.answered.get(answer.status.value, 0) + 1
        writer.write(answer.encode())
        try:
            await asyncio.wait_for(writer.drain(), self.timeout)
        except (asyncio.TimeoutError, ConnectionError):
            pass  # a client too slow to read its answer is dropped

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Stop listening, drop open connections and end the server's threads. Idempotent."""
        if not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=30)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass  # the loop is gone or stuck: stopping it below is all that is left to do
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._renderer.shutdown(wait=False)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(0)  # let the closed transports finish closing

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "serving" if self._thread.is_alive() else "closed"
        return f"<mspti_lens MetricsServer {state} at {self.url}>"


def serve(
    port: int = 9464,
    source: Any = None,
    *,
    address: str = "127.0.0.1",
    rank: int | str | None = None,
    host: str | None = None,
    **options: Any,
) -> MetricsServer:
    """Expose ``/metrics`` for Prometheus on ``address:port`` (127.0.0.1 unless given; ``port=0``
    picks a free port, see ``.port``). ``source`` is a Session, a Snapshot or a function
    returning one; by default the latest Session. Native histograms go to scrapers that ask for
    the protobuf format (Prometheus with ``--enable-feature=native-histograms``), classic buckets
    to everyone. Returns the running server; ``close()`` (or a ``with`` block) stops it."""
    return MetricsServer(source, port, address=address, rank=rank, host=host, **options)
