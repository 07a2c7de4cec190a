"""`mspti_lens.serve()`: a read-only /metrics endpoint that keeps serving through bad,
slow and many clients. Every connection goes to 127.0.0.1 only; loops are bounded in count, and
waits are bounded too (they end early when the condition holds, they never assert a duration)."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from export_data import workload

import mspti_lens
from mspti_lens.export import serve
from mspti_lens.export.prometheus import PROTOBUF_CONTENT_TYPE

PROTOBUF_ACCEPT = (
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,"
    "text/plain;version=0.0.4;q=0.3"
)


def get(url: str, accept: str | None = None, method: str = "GET") -> tuple[int, str, bytes]:
    req = urllib.request.Request(url, method=method, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def raw(port: int, data: bytes) -> bytes:
    """Send raw bytes, read the answer to the end."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def wait_until(cond, tries: int = 400, pause: float = 0.05) -> bool:
    for _ in range(tries):
        if cond():
            return True
        time.sleep(pause)
    return cond()


@pytest.fixture
def server():
    with serve(0, workload()) as srv:
        yield srv


def test_binds_loopback_by_default_and_serves_text_and_protobuf_by_accept_header(server):
    assert server.address == "127.0.0.1"
    status, ctype, body = get(server.url)
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    assert b'api="aclrtLaunchKernel"' in body and b'rank="3"' in body
    status, ctype, body = get(server.url, PROTOBUF_ACCEPT)
    assert status == 200 and ctype == PROTOBUF_CONTENT_TYPE
    assert b"mspti_lens_call_duration_nanoseconds" in body and b"aclrtLaunchKernel" in body


def test_serves_metrics_only_and_read_only(server):
    base = server.url.removesuffix("/metrics")
    assert get(base + "/")[0] == 404
    assert get(base + "/metrics/../admin")[0] == 404
    assert get(server.url, method="POST")[0] == 405
    assert get(server.url, method="DELETE")[0] == 405
    status, _, body = get(server.url, method="HEAD")
    assert status == 200 and body == b""
    assert get(server.url + "?x=1")[0] == 200  # a query string is ignored


@pytest.mark.parametrize(
    "request_bytes, status",
    [
        (b"\x00\xff\xfe garbage\r\n\r\n", b"400"),
        (b"GET /metrics\r\n\r\n", b"400"),
        (b"GET /metrics SPDY/9\r\n\r\n", b"400"),
        (b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n", b"431"),
    ],
)
def test_malformed_requests_get_an_error_and_the_server_goes_on(server, request_bytes, status):
    answer = raw(server.port, request_bytes)
    assert answer.split(b" ")[1] == status
    assert get(server.url)[0] == 200


def test_a_client_that_hangs_up_mid_request_costs_nothing(server):
    raw(server.port, b"GET /met")
    raw(server.port, b"")
    assert get(server.url)[0] == 200


def test_slow_clients_do_not_hold_up_other_scrapes():
    with serve(0, workload(), timeout=120) as srv:
        slow = []
        try:
            for _ in range(20):  # each sends half a request head and then nothing
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                slow.append(s)
            for _ in range(3):
                assert get(srv.url)[0] == 200
        finally:
            for s in slow:
                s.close()


def test_a_slow_client_is_dropped_after_the_timeout():
    with serve(0, workload(), timeout=0.2) as srv:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
            assert s.recv(100) == b""  # closed by the server, without an answer
        assert get(srv.url)[0] == 200


def test_many_concurrent_scrapes_all_get_the_metrics():
    with serve(0, workload(), max_connections=64) as srv:
        results: list[int] = []
        lock = threading.Lock()

        def scrape():
            for _ in range(5):
                st = get(srv.url, PROTOBUF_ACCEPT)[0]
                with lock:
                    results.append(st)

        threads = [threading.Thread(target=scrape) for _ in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert results == [200] * 160


def test_connections_over_the_limit_get_503_only_while_every_one_is_being_answered():
    release = threading.Event()
    rendering = threading.Semaphore(0)

    def source():
        rendering.release()
        release.wait(60)  # each scrape holds its connection while its snapshot is taken
        return workload()

    with serve(0, source, max_connections=2, min_interval=0, timeout=120) as srv:
        busy = [threading.Thread(target=get, args=(srv.url,)) for _ in range(2)]
        for t in busy:
            t.start()
        try:
            assert rendering.acquire(timeout=60)  # the first is rendering, the second waits for it
            assert wait_until(lambda: srv._open == 2 and not srv._idle)
            assert get(srv.url)[0] == 503
        finally:
            release.set()
            for t in busy:
                t.join(timeout=60)
        assert wait_until(lambda: srv._open == 0)
        assert get(srv.url)[0] == 200


def test_idle_connections_are_closed_to_make_room_for_a_scrape():
    # 70 connections that never send a request, then a real scrape: with the head timeout far
    # away, the scrape is answered only if idle connections give way to it.
    with serve(0, workload(), max_connections=64, timeout=600) as srv:
        idle = [socket.create_connection(("127.0.0.1", srv.port), timeout=60) for _ in range(70)]
        try:
            assert wait_until(
                lambda: srv._open <= 64 and srv.answered.get(503, 0) == 0 and len(srv._idle) == 64
            )
            for _ in range(3):
                assert get(srv.url)[0] == 200
            assert srv.answered.get(503, 0) == 0
            closed: set[int] = set()

            def closed_by_the_server() -> int:
                for i, s in enumerate(idle):  # closed without an answer: end of stream
                    s.settimeout(0.0)
                    try:
                        if i not in closed and s.recv(1) == b"":
                            closed.add(i)
                    except BlockingIOError:
                        pass
                return len(closed)

            # Room for the 6 connections over the limit, then for the first scrape (each one
            # after it finds the room its predecessor left): the 7 oldest, in order.
            assert wait_until(lambda: closed_by_the_server() >= 7)
            assert sorted(closed) == list(range(7))
            # The last scrape's own connection is let go by the server's thread after the answer
            # reached this one: wait for that, do not race it.
            assert wait_until(lambda: srv._open == 63)
            assert closed_by_the_server() == 7
        finally:
            for s in idle:
                s.close()


def test_the_answer_to_a_request_is_a_function_of_the_request_alone():
    from http import HTTPStatus

    from mspti_lens.export.serve import respond

    def render(fmt: str) -> bytes:
        return f"exposition in {fmt}".encode()

    ok = respond(b"GET /metrics?x=1 HTTP/1.1\r\nAccept: text/plain\r\n\r\n", render)
    assert (ok.status, ok.body, ok.head_only) == (HTTPStatus.OK, b"exposition in text", False)
    assert ok.encode().startswith(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4")
    proto = respond(f"GET /metrics HTTP/1.0\r\nAccept: {PROTOBUF_ACCEPT}\r\n\r\n".encode(), render)
    assert (proto.body, proto.content_type) == (b"exposition in protobuf", PROTOBUF_CONTENT_TYPE)
    head = respond(b"HEAD /metrics HTTP/1.1\r\n\r\n", render)
    assert head.head_only and head.encode().endswith(b"\r\n\r\n")
    post = respond(b"POST /metrics HTTP/1.1\r\n\r\n", render)
    assert post.status == HTTPStatus.METHOD_NOT_ALLOWED and b"Allow: GET, HEAD\r\n" in post.encode()
    assert respond(b"GET / HTTP/1.1\r\n\r\n", render).status == HTTPStatus.NOT_FOUND
    assert respond(b"GARBAGE\r\n\r\n", render).status == HTTPStatus.BAD_REQUEST
    assert respond(b"GET /metrics SPDY/3\r\n\r\n", render).status == HTTPStatus.BAD_REQUEST

    def failing(fmt: str) -> bytes:
        raise RuntimeError("boom")

    err = respond(b"GET /metrics HTTP/1.1\r\n\r\n", failing)
    assert err.status == HTTPStatus.INTERNAL_SERVER_ERROR and b"boom" in err.body
    assert err.encode().startswith(b"HTTP/1.1 500 Internal Server Error\r\n")


def test_a_failing_source_is_a_500_and_the_server_keeps_serving():
    calls = []

    def source():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return workload()

    with serve(0, source, min_interval=0) as srv:
        status, _, body = get(srv.url)
        assert status == 500 and b"boom" in body
        assert get(srv.url)[0] == 200


def test_scrapes_within_min_interval_share_one_snapshot():
    calls = []

    def source():
        calls.append(1)
        return workload()

    with serve(0, source, min_interval=3600) as srv:
        for _ in range(5):
            assert get(srv.url)[0] == 200
        assert len(calls) == 1


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="0..65535"):
        serve(70000, workload())
    for bad in (-1, 0, float("nan"), float("inf"), "5", True):
        with pytest.raises(ValueError, match=r"timeout must be a finite number of seconds > 0, not"):
            serve(0, workload(), timeout=bad)
    for bad in (-0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"min_interval must be a finite number of seconds >= 0, not"):
            serve(0, workload(), min_interval=bad)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match=r"max_connections must be an int >= 1, not"):
            serve(0, workload(), max_connections=bad)
    with pytest.raises(ValueError, match="a Session, a Snapshot or a function"):
        serve(0, 42)
    with serve(0, workload()) as srv, pytest.raises(OSError, match="port=0 for a free one"):
        serve(srv.port, workload())


def test_an_explicit_address_is_used():
    with serve(0, workload(), address="localhost") as srv:
        assert srv.address in ("127.0.0.1", "::1")
        assert get(srv.url)[0] == 200


def test_a_blocked_scrape_never_blocks_recording_on_the_simulator(session, sim):
    """While a render is stuck (its source blocks), calls on the training thread are recorded and
    the session's own snapshots go on."""
    release = threading.Event()
    entered = threading.Event()

    def stuck_source():
        entered.set()
        release.wait(120)
        return session.snapshot()

    session.start()
    with serve(0, stuck_source, min_interval=0) as srv:
        scraper = threading.Thread(target=get, args=(srv.url,))
        scraper.start()
        try:
            assert entered.wait(60)
            sim.call("aclrtLaunchKernel", work_ns=0, count=1000)
            assert session.snapshot().total_calls == 1000
        finally:
            release.set()
            scraper.join(timeout=60)


def test_serve_defaults_to_the_latest_session(session):
    with mspti_lens.serve(0) as srv:
        assert srv._snapshot == session.snapshot
