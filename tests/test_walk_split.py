"""The entry function walked by two processes (mhlo_cost.walk.split): every row, warning and count the same as the
walk of one process, on programs written here (thousands of ops, each with its own name and source location), and
the totals equal to closed forms worked out here."""
from __future__ import annotations

import os
from dataclasses import fields

import pytest

from mhlo_cost.analysis import analyze
from mhlo_cost.ir.loader import load
from mhlo_cost.walk import split
from mhlo_cost.walk.row import AnalysisError, Row

# JAX's warning at every fork once its backends have started (jax/_src/xla_bridge.py, _at_fork: "os.fork() was
# called ..."), which an earlier test of the same pytest process does: the forks here use none of JAX's threads.
FORK_WARNING = "ignore:os.fork:RuntimeWarning"
pytestmark = [pytest.mark.skipif(not hasattr(os, "fork"), reason="the split walk forks (POSIX)"),
              pytest.mark.filterwarnings(FORK_WARNING)]

T = "tensor<8x16xf32>"


def program(layers: int, call_at: int | None = None) -> str:
    """``layers`` layers of four ops (dot_general with the weight, add, exponential, multiply by a constant), each op
    with its own scope and source line; ``call_at``: a call of @f (one multiply) in place of that layer."""
    lines = ["module {"]
    if call_at is not None:
        lines += [f"  func.func private @f(%a: {T}) -> {T} {{",
                  f'    %r = stablehlo.multiply %a, %a : {T} loc("f/mul"("f.py":1:1))',
                  f"    return %r : {T}", "  }"]
    lines.append(f"  func.func public @main(%x: {T}, %w: tensor<16x16xf32>) -> {T} {{")
    lines.append(f'    %c = stablehlo.constant dense<2.0> : {T} loc("c"("m.py":1:1))')
    v = "%x"
    for i in range(layers):
        where = f'"jit(f)/layers.{i}/{{op}}"("m.py":{10 + i}:{{col}})'
        if i == call_at:
            lines.append(f'    %call{i} = func.call @f({v}) : ({T}) -> {T} loc({where.format(op="call", col=1)})')
            v = f"%call{i}"
            continue
        lines += [
            f"    %d{i} = stablehlo.dot_general {v}, %w, contracting_dims = [1] x [0] : ({T}, tensor<16x16xf32>) -> {T}"
            f' loc({where.format(op="dot_general", col=1)})',
            f'    %a{i} = stablehlo.add %d{i}, {v} : {T} loc({where.format(op="add", col=2)})',
            f'    %e{i} = stablehlo.exponential %a{i} : {T} loc({where.format(op="exp", col=3)})',
            f'    %m{i} = stablehlo.multiply %e{i}, %c : {T} loc({where.format(op="mul", col=4)})']
        v = f"%m{i}"
    lines += [f"    return {v} : {T}", "  }", "}"]
    return "\n".join(lines)


@pytest.fixture
def forking(monkeypatch):
    """The split walk on, at a small size, in this process (whose threads, jax's, the fork does not use); the forks'
    process ids."""
    forks = []
    real = os.fork

    def fork():
        pid = real()
        forks.append(pid)  # (in the fork: its own copy of the list)
        return pid

    monkeypatch.setattr(split, "MIN_OPS", 64)
    monkeypatch.setattr(split, "_forkable", lambda: split._on is not None)  # (enabled; threads, load or not)
    monkeypatch.setattr(split.os, "fork", fork)
    return forks


def both(text: str, forking):
    """(the walk of one process, the split walk) of one parsed module."""
    loaded = load(text)
    one = analyze(loaded)
    assert not forking
    split.enable()
    try:
        two = analyze(loaded)
    finally:
        split.enable(False)
    return one, two


def same_rows(one, two) -> None:
    names = [f.name for f in fields(Row) if f.name != "loc"]
    assert len(one.rows) == len(two.rows)
    for a, b in zip(one.rows, two.rows):
        assert [getattr(a, n) for n in names] == [getattr(b, n) for n in names]
        for n in ("name", "scope", "site", "file_line", "stack"):
            assert getattr(a.loc, n) == getattr(b.loc, n), (a.index, n)


def test_split_walk_rows_are_the_sequential_walks(forking, monkeypatch):
    layers = 300
    merged = []
    real = split._merge
    monkeypatch.setattr(split, "_merge", lambda *a: merged.append(1) or real(*a))
    one, two = both(program(layers), forking)
    assert len(forking) == 1 and merged == [1]  # (the fork's rows merged, not walked here again)
    same_rows(one, two)
    assert one.warnings == two.warnings and one.summary == two.summary
    # Closed forms: per layer a [8,16]x[16,16] product (2*8*16*16 FLOPs), an add, a multiply and an exponential
    # (128 FLOPs each: the walk's convention counts a transcendental's FLOP too, walk/vector.py), the exponential's
    # 128 transcendentals; the source line of the last layer's multiply.
    s = two.summary
    assert s["gemm_flops"] == layers * 2 * 8 * 16 * 16
    assert s["vector_flops"] == layers * 3 * 128
    assert s["transcendentals"] == layers * 128
    assert s["ops"] == 1 + 4 * layers
    assert two.rows[-1].loc.file_line == f"m.py:{10 + layers - 1}"
    assert two.rows[-1].scope == f"layers.{layers - 1}"


def test_a_call_in_the_forks_part_is_walked_here(forking, monkeypatch):
    """An op no pure rule counts (a call) in the fork's part: this process walks the part itself, as one walk."""
    layers = 300
    merged = []
    monkeypatch.setattr(split, "_merge", lambda *a: merged.append(1))
    one, two = both(program(layers, call_at=layers - 5), forking)
    assert len(forking) == 1 and merged == []
    same_rows(one, two)
    assert two.summary == one.summary
    assert two.summary["vector_flops"] == (layers - 1) * 3 * 128 + 128  # the call's multiply


def test_small_or_unforkable_walks_stay_in_one_process(monkeypatch):
    forks = []
    def fork():  # (a fork let through here would be a bug: never return 0 in pytest's own process)
        forks.append(1)
        raise AssertionError("forked")

    monkeypatch.setattr(split.os, "fork", fork)
    monkeypatch.setattr(split, "_idle_enough", lambda: True)  # (a quiet machine: only the size and threads refuse)
    split.enable()
    try:
        analyze(load(program(20)))  # 81 ops: below MIN_OPS
        monkeypatch.setattr(split, "MIN_OPS", 8)
        monkeypatch.setattr(split.os, "listdir", lambda path: ["1", "2"])  # two threads
        analyze(load(program(20)))
    finally:
        split.enable(False)
    assert forks == []


def _dynamic_at(layer: int) -> str:
    """The 300-layer program with layer ``layer``'s product made dynamic (a shape the walk refuses)."""
    i, j = layer, layer - 1
    text = program(300).replace(f"%d{i} = stablehlo.dot_general %m{j}, %w",
                                f"%d{i} = stablehlo.dot_general %m{j}, %u", 1)
    text = text.replace("%w: tensor<16x16xf32>)", "%w: tensor<16x16xf32>, %u: tensor<16x?xf32>)", 1)
    text = text.replace("contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>"
                        f' loc("jit(f)/layers.{i}/', "contracting_dims = [1] x [0] : (tensor<8x16xf32>, "
                        f'tensor<16x?xf32>) -> tensor<8x?xf32> loc("jit(f)/layers.{i}/', 1)
    return text.replace(f"%a{i} = stablehlo.add %d{i}, %m{j} : tensor<8x16xf32>",
                        f"%a{i} = stablehlo.add %m{j}, %m{j} : tensor<8x16xf32>", 1)


@pytest.mark.parametrize("layer", [3, 290])  # before the cut (this process's part) and after it (the fork's)
def test_an_error_ends_the_fork(forking, layer):
    """IR the walk cannot count, in either part: the same error as one walk's, and the fork is reaped."""
    loaded = load(_dynamic_at(layer))
    with pytest.raises(AnalysisError) as one:
        analyze(loaded)
    split.enable()
    try:
        with pytest.raises(AnalysisError) as two:
            analyze(loaded)
    finally:
        split.enable(False)
    assert len(forking) == 1 and str(two.value) == str(one.value) and "dynamic" in str(two.value)
    with pytest.raises(ChildProcessError):
        os.waitpid(forking[0], os.WNOHANG)  # reaped: not left behind


def test_the_fork_waits_for_an_idle_core(monkeypatch):
    """Forked only where the machine had at least MIN_IDLE_CORES idle since enable(): ticks (all, idle) of 2 cores."""
    ticks = iter([(1000, 500), (1200, 580), (1000, 500), (1200, 520)])
    monkeypatch.setattr(split, "_cpu_ticks", lambda: next(ticks))
    monkeypatch.setattr(split.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(split.os, "cpu_count", lambda: 2)
    try:
        split.enable()
        assert split.idle_cores((1000, 500), (1200, 580), 2) == 0.8  # 80 of 200 ticks idle, of 2 cores
        assert split._idle_enough()  # 0.8 core idle
        split.enable()
        assert not split._idle_enough()  # 0.2 core idle: a loaded machine
    finally:
        split.enable(False)
