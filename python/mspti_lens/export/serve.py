"""``mspti_lens.serve(port)``: a read-only Prometheus ``/metrics`` endpoint.

One daemon thread runs an asyncio loop that accepts scrapes; a second renders the exposition
(at most one render at a time, reused for ``min_interval`` seconds, so many concurrent scrapes
cost one snapshot). Neither touches the callback: a snapshot reads the shards' counters without
a lock the callback takes, and the callback never runs Python. A scrape that is malformed,
slow (no complete request head within ``timeout`` seconds, or too slow to read the answer) or one
too many (over ``max_connections`` open at once) is answered or dropped on its own; the server
keeps serving. It binds 127.0.0.1 unless another address is given explicitly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any

from . import prometheus

MAX_HEAD_BYTES = 8192
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


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
        self._snapshot = _source_of(source)
        self._rank, self._host = rank, host
        self.min_interval, self.timeout, self.max_connections = (
            float(min_interval),
            float(timeout),
            max_connections,
        )
        self._cache: dict[str, tuple[float, bytes]] = {}
        self._render_lock = threading.Lock()
        self._renderer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mspti-lens-render")
        self._open = 0
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
        try:
            if self._open > self.max_connections:
                await self._reply(writer, 503, b"too many concurrent scrapes\n", head_only=False)
                return
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.timeout)
            except asyncio.LimitOverrunError:
                await self._reply(writer, 431, b"request head too large\n", head_only=False)
                return
            except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                return  # a slow or vanished client: drop it
            status, body, ctype, head_only = await self._answer(head)
            await self._reply(writer, status, body, head_only=head_only, ctype=ctype)
        except asyncio.CancelledError:
            pass  # close(): the connection is dropped; ending quietly keeps asyncio from logging it
        except Exception:  # noqa: BLE001, S110 - one bad connection never stops the server
            pass
        finally:
            self._open -= 1
            writer.close()

    async def _answer(self, head: bytes) -> tuple[int, bytes, str, bool]:
        text = "text/plain; charset=utf-8"
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
            return 400, b"malformed request\n", text, False
        if method not in ("GET", "HEAD"):
            return 405, b"read-only: only GET and HEAD of /metrics\n", text, False
        if target.split("?", 1)[0] != "/metrics":
            return 404, b"only /metrics is served here\n", text, method == "HEAD"
        fmt = prometheus.negotiate(headers.get("accept"))
        try:
            body = await self._loop.run_in_executor(self._renderer, self.render, fmt)
        except Exception as e:  # noqa: BLE001 - reported to the scraper, the server goes on
            return 500, f"mspti-lens could not take a snapshot: {e}\n".encode(), text, False
        return 200, body, prometheus.content_type(fmt), method == "HEAD"

    async def _reply(
        self, writer: asyncio.StreamWriter, status: int, body: bytes, *, head_only: bool, ctype: str = ""
    ) -> None:
        ctype = ctype or "text/plain; charset=utf-8"
        head = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n"
            + ("Allow: GET, HEAD\r\n" if status == 405 else "")
            + "\r\n"
        ).encode()
        self.answered[status] = self.answered.get(status, 0) + 1
        writer.write(head if head_only else head + body)
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
