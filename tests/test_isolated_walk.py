"""The walk in the MLIR reader's child process (mhlo_cost/analysis/isolated.py, wire.py): the input parsed once, the
rows handed back, and a ``report`` whose own process imports no jaxlib."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mhlo_cost.analysis import AnalysisOptions, analyze
from mhlo_cost.ir.loader import LoadError, load
from mhlo_cost.walk.row import AnalysisError
from mhlo_cost.analysis.isolated import WalkOptions, analyze_isolated

from callgraph_dags import LEAF, fanout
from helpers import call_chain

ROOT = Path(__file__).resolve().parent.parent
GPT = ROOT / "examples" / "gpt_small.mlir"
COLLECTIVES = ROOT / "tests" / "fixtures" / "collectives_8dev.mlir"
ROW_FIELDS = ("op", "kind", "scope", "location", "shape", "dtype", "gemm_flops", "conv_flops", "vector_flops",
              "transcendentals", "bytes_read", "bytes_written", "multiplicity", "comm_kind", "group_size",
              "num_groups", "comm_bytes", "comm_steps", "target", "note", "operand_shapes", "weight_operands",
              "func", "index", "replica_groups")  # (``values``: hashes of this process's MLIR objects)

MATMUL = """
func.func @main(%a: tensor<8x16xf32>, %b: tensor<16x32xf32>) -> tensor<8x32xf32> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
  return %0 : tensor<8x32xf32>
}
"""


def _training_text() -> str:
    import jax
    import jax.numpy as jnp

    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    def step(w, x):
        return w - 0.1 * jax.grad(loss)(w, x)

    s = jax.ShapeDtypeStruct
    return jax.jit(step, donate_argnums=0).lower(s((16, 8), jnp.float32), s((4, 16), jnp.float32)).as_text(
        debug_info=True)


def _same(a, b) -> None:
    assert (a.source, a.entry, a.warnings) == (b.source, b.entry, b.warnings)
    assert len(a.rows) == len(b.rows)
    for x, y in zip(a.rows, b.rows):
        for f in ROW_FIELDS:
            assert getattr(x, f) == getattr(y, f), f
    assert [_shape(r.values) for r in a.rows] == [_shape(r.values) for r in b.rows]
    assert a.summary == b.summary
    assert a.memory.after == b.memory.after and a.memory.during == b.memory.during


def _shape(values):
    return tuple(len(v) for v in values)


def _plain(producers) -> list:
    """Producers with the argument keys (``arg<hash>``, a hash of this process's MLIR objects) numbered."""
    names: dict = {}
    return [tuple(names.setdefault(p, len(names)) if isinstance(p, str) else p for p in ps) for ps in producers]


@pytest.mark.parametrize("source", [GPT, COLLECTIVES, "fanout"])
def test_the_worker_gives_the_rows_and_memory_of_the_walk_in_process(source):
    text = fanout(6, 2, "distinct") if source == "fanout" else Path(source).read_text()
    here = analyze(load(text, isolate=False, name="x.mlir"))
    there = analyze_isolated(text, name="x.mlir")
    _same(there, here)


def test_data_flow_and_a_training_step_travel_with_their_records():
    text = _training_text()
    here = analyze(load(text, isolate=False, name="t.mlir"), AnalysisOptions(dataflow=True))
    there = analyze_isolated(text, WalkOptions(record="dataflow"), name="t.mlir")
    _same(there, here)
    assert _plain(there.producers) == _plain(here.producers) and there.async_done == here.async_done
    here = analyze(load(text, isolate=False, name="t.mlir"), AnalysisOptions(phases=True))
    there = analyze_isolated(text, WalkOptions(record="training-if-backward"), name="t.mlir")
    assert there.options == here.options and there.options.phases
    _same(there, here)
    facts = [[(a.index, a.name, a.donated, a.type) for a in x.arguments] for x in (there, here)]
    assert facts[0] == facts[1] and any(a.donated for a in there.arguments)
    assert there.phases.training and (there.phases.phase, there.phases.grad) == (here.phases.phase, here.phases.grad)


def test_a_forward_program_asked_for_phases_gets_the_plain_walk():
    there = analyze_isolated(MATMUL, WalkOptions(record="training-if-backward"), name="m.mlir")
    assert not there.options.dataflow and (there.producers, there.arguments, there.phases) == (None, None, None)
    there = analyze_isolated(MATMUL, WalkOptions(record="training-if-backward", dataflow_if_forward=True))
    assert there.options.dataflow and not there.options.phases and there.phases is None
    assert len(there.producers) == 1 and [p[:3] for p in there.producers[0]] == ["arg", "arg"]


def test_counts_from_the_worker_match_the_closed_form():
    a = analyze_isolated(MATMUL, name="m.mlir")
    assert a.summary["gemm_flops"] == 2 * 8 * 32 * 16
    assert a.summary["bytes_read"] == 4 * (8 * 16 + 16 * 32) and a.summary["bytes_written"] == 4 * 8 * 32


def test_options_reach_the_walk_and_errors_come_back_as_their_own_kind():
    with pytest.raises(AnalysisError, match="no function named 'nope'"):
        analyze_isolated(MATMUL, WalkOptions(entry="nope"), name="m.mlir")
    with pytest.raises(LoadError, match="m.mlir:"):
        analyze_isolated("func.func @main( {\n", name="m.mlir")
    recursive = "func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n  %0 = func.call @main(%a) : " \
                "(tensor<2xf32>) -> tensor<2xf32>\n  return %0 : tensor<2xf32>\n}\n"
    with pytest.raises(AnalysisError, match="^m.mlir: recursive call to @main"):
        analyze_isolated(recursive, name="m.mlir")


def test_callee_rows_are_built_once_per_function_however_many_call_paths():
    from mhlo_cost.walk.base import IRVisitor

    built = []

    class Spy(IRVisitor):
        def _function_rows(self, name):
            if name not in self._func_rows:
                built.append(name)
            return super()._function_rows(name)

    depth = 30  # 2**30 call paths to the leaf
    loaded = load(fanout(depth, 2, "same"), isolate=False)
    from mhlo_cost.analysis import walk

    _, v = walk(loaded, Spy)
    assert sorted(built) == sorted(["main"] + [f"f{i}" for i in range(depth + 1)])
    gemm = sum(r.gemm_flops for r in v.rows)
    assert gemm == LEAF["gemm_flops"] * 2 ** depth


def _run(*argv, env=None) -> subprocess.CompletedProcess:
    code = ("import sys\nfrom mhlo_cost.cli import main\nrc = main(sys.argv[1:])\n"
            "print(json.dumps([rc, sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib'))]))")
    return subprocess.run([sys.executable, "-c", "import json\n" + code, *map(str, argv)], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})), cwd=ROOT)


@pytest.mark.parametrize("view", [[], ["--by", "op"], ["--by", "block", "--format", "csv"],
                                  ["--fuse", "elementwise", "--by", "memory"], ["--by", "scope", "--format", "json"],
                                  ["--hardware", "a100", "--by", "op"], ["--hardware", "a100", "--format", "html"]])
def test_report_on_a_file_imports_no_jaxlib_in_its_own_process(tmp_path, view):
    out = tmp_path / "out.txt"
    p = _run("report", GPT, "-q", "-o", out, *view)
    rc, modules = json.loads(p.stdout.splitlines()[-1])
    assert rc == 0, p.stderr
    assert modules == []
    assert out.read_text()


def test_report_in_process_when_isolation_is_off_gives_the_same_text(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    assert json.loads(_run("report", GPT, "--by", "op", "--format", "csv", "-o", a).stdout.splitlines()[-1])[0] == 0
    p = _run("report", GPT, "--by", "op", "--format", "csv", "-o", b, env={"MHLO_COST_ISOLATE": "0"})
    rc, modules = json.loads(p.stdout.splitlines()[-1])
    assert rc == 0 and "jaxlib" in modules
    assert a.read_bytes() == b.read_bytes()


def test_an_error_in_the_walk_is_one_line_and_exit_2(tmp_path):
    f = tmp_path / "m.mlir"
    f.write_text(MATMUL)
    p = _run("report", f, "--entry", "nope")
    rc, modules = json.loads(p.stdout.splitlines()[-1])
    assert rc == 2 and modules == []
    assert p.stderr.strip().splitlines()[-1].startswith("mhlo-cost: error: ")
    assert "no function named 'nope'" in p.stderr and "Traceback" not in p.stderr


def test_a_deep_call_chain_too_large_to_send_is_walked_by_the_caller(tmp_path):
    n = 600
    f = tmp_path / "chain.mlir"
    f.write_text(call_chain(n))
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    view = ("--by", "op", "--format", "csv", "--hardware", "a100")  # (a profile: the child renders no answer whole)
    p = _run("report", f, *view, "-o", a)
    rc, modules = json.loads(p.stdout.splitlines()[-1])
    assert rc == 0 and "jaxlib" in modules  # the child sent bytecode: 600 * 601 / 2 rows over the tables
    assert _run("report", f, *view, "-o", b, env={"MHLO_COST_ISOLATE": "0"}).returncode == 0
    assert a.read_bytes() == b.read_bytes()
    analysis = analyze_isolated(f)
    assert analysis.summary["vector_flops"] == 4 * n and analysis.summary["ops"] == n  # one add of 4 per function
