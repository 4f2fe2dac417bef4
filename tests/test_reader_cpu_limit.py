"""The reader child's time limit counts its CPU time, with a wall-clock backstop (issue 43, item 4).

On a loaded machine a 228-byte file once ran past the 20 s wall-clock limit: the child waited for a core, it did
not work. The limit is now the child's own CPU time (``RLIMIT_CPU``, set by the child per request), and only a
much longer wall-clock backstop ends a child that is blocked. Stub children stand in for the reader here, so
that the tests need no input that is slow to read; no test measures a duration.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mhlo_cost.ir import guard

ROOT = str(Path(guard.__file__).resolve().parents[2])


def _stub(tmp_path, body: str) -> Path:
    """A child that answers the guard's protocol as ``body`` says (the header read, ``h`` its fields)."""
    path = tmp_path / "stub_child.py"
    path.write_text(textwrap.dedent("""
        import json, sys, time
        sys.path.insert(0, sys.argv[1])
        from mhlo_cost.ir.reader import limit_cpu
        h = json.loads(sys.stdin.buffer.readline())
        sys.stdin.buffer.read(h[3])
    """) + textwrap.dedent(body))
    return path


@pytest.fixture
def server(monkeypatch):
    srv = guard._Server()
    monkeypatch.setattr(guard, "BASE_SECONDS", 1.0)
    monkeypatch.setattr(guard, "SECONDS_PER_MB", 0.0)
    yield srv
    srv.stop()


def test_limit_cpu_stops_a_process_that_spins():
    code = f"import sys; sys.path.insert(0, {ROOT!r}); from mhlo_cost.ir.reader import limit_cpu; limit_cpu(1)\n" \
           "while True: pass"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300)  # a hang guard only
    assert r.returncode == -signal.SIGXCPU, r.stderr


def test_the_request_header_carries_the_cpu_allowance(server, monkeypatch, tmp_path):
    stub = _stub(tmp_path, """
        reply = b"K" + json.dumps(h).encode()
        sys.stdout.buffer.write(len(reply).to_bytes(8, "big") + reply)
        sys.stdout.buffer.flush()
    """)
    monkeypatch.setattr(guard, "_READER", stub)
    answer = server.request("text", b"module {}", "x.mlir")
    header = __import__("json").loads(answer[1:])
    assert header[5] == guard.limits(len(b"module {}"))[1] == 1.0


def test_a_child_past_its_cpu_time_is_stopped_and_said_so(server, monkeypatch, tmp_path):
    stub = _stub(tmp_path, """
        limit_cpu(h[5])
        while True:
            pass
    """)
    monkeypatch.setattr(guard, "_READER", stub)
    with pytest.raises(guard._Failed, match=r"used 1 s of CPU time on this input"):
        server.request("text", b"module {}", "x.mlir")


def test_a_blocked_child_is_ended_by_the_wall_clock_backstop(server, monkeypatch, tmp_path):
    stub = _stub(tmp_path, """
        limit_cpu(h[5])
        time.sleep(10 ** 6)
    """)
    monkeypatch.setattr(guard, "_READER", stub)
    monkeypatch.setattr(guard, "WALL_FACTOR", 2.0)
    with pytest.raises(guard._Failed, match=r"no answer in 2 s \(wall clock\)"):
        server.request("text", b"module {}", "x.mlir")


def test_the_backstop_is_far_above_the_cpu_allowance():
    """A child that gets a tenth of a core still finishes what it may do in its CPU time."""
    assert guard.WALL_FACTOR >= 10
