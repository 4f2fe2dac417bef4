"""The task graph (mhlo_cost.roofline.tasks): bounds and the k-stream schedule on hand-built graphs against
closed forms worked out here; the graph of a two-layer MLP's training step against the program's own data flow;
the export, checked by running a program's ops in a topological order of the exported graph."""
import json

import numpy as np
import pytest

from mhlo_cost.roofline.tasks import Task, TaskGraph, critical_path, list_schedule
from mhlo_cost.roofline.tasks.scenarios import barrier, chunked, twice

from helpers import lowered, run_cli


def T(i, c=0.0, m=0.0, o=0.0, phase=""):
    return Task(i, f"t{i}", (i,), compute_s=c, memory_s=m, overhead_s=o, phase=phase)


def approx(x):
    return pytest.approx(x, rel=1e-12, abs=1e-15)


def test_chain_every_bound_is_the_sum():
    # a (compute 1) -> b (memory 2) -> c (compute 3, overhead 0.5): nothing can overlap
    g = TaskGraph.of([T(0, c=1), T(1, m=2), T(2, c=3, o=0.5)], [(0, 1), (1, 2)])
    assert g.serial_s == approx(6.5)
    p = critical_path(g)
    assert p.length_s == approx(6.5) and p.chain == [0, 1, 2] and p.slack == [0, 0, 0]
    for k in (1, 2, 4):
        assert list_schedule(g, k).makespan_s == approx(6.5)


def test_diamond_branches_on_different_resources_overlap():
    # A (c 1) -> B (memory 2), C (compute 3) -> D (memory 1): B beside C uses bandwidth and compute apart
    g = TaskGraph.of([T(0, c=1), T(1, m=2), T(2, c=3), T(3, m=1)], [(0, 1), (0, 2), (1, 3), (2, 3)])
    assert g.serial_s == approx(7)
    p = critical_path(g)
    assert p.length_s == approx(1 + 3 + 1)
    assert p.chain == [0, 2, 3] and p.binding[3] == 2
    assert p.slack == [approx(0), approx(1), approx(0), approx(0)]  # B could start 1 s later
    s = list_schedule(g, 2)
    assert s.makespan_s == approx(5) and s.end[1] == approx(3) and s.start[3] == approx(4)
    assert list_schedule(g, 1).makespan_s == approx(7)


def test_diamond_two_memory_bound_branches_are_no_faster_than_the_bandwidth():
    # B (memory 2) beside C (memory 3): together they need 5 s of bandwidth; each runs at half speed while both
    # run: B ends at 1 + 2 x 2 = 5, C has 1 s left alone, ends at 6, D ends at 7 = the serial sum
    g = TaskGraph.of([T(0, c=1), T(1, m=2), T(2, m=3), T(3, m=1)], [(0, 1), (0, 2), (1, 3), (2, 3)])
    assert critical_path(g).length_s == approx(5)
    s = list_schedule(g, 2)
    assert s.end[1] == approx(5) and s.end[2] == approx(6) and s.makespan_s == approx(7)


def test_two_independent_chains():
    # X1 (c 2) -> X2 (m 2); Y1 (m 1) -> Y2 (c 3). Two streams: X1 and Y1 from 0 (compute beside bandwidth);
    # Y1 ends at 1; Y2 then shares compute with X1 (half speed each): X1's last 1 s takes 2, ends at 3;
    # Y2 has done 1 of 3 s, runs alone on compute beside X2 (bandwidth): both end at 5
    g = TaskGraph.of([T(0, c=2), T(1, m=2), T(2, m=1), T(3, c=3)], [(0, 1), (2, 3)])
    assert g.serial_s == approx(8)
    assert critical_path(g).length_s == approx(4)
    s = list_schedule(g, 2)
    assert s.end == [approx(3), approx(5), approx(1), approx(5)]
    assert list_schedule(g, 1).makespan_s == approx(8)
    assert list_schedule(g, 4).makespan_s == approx(5)  # only two chains: two streams are all it uses


def test_launch_overheads_overlap_and_collectives_take_the_link():
    # two independent overhead-only kernels (no resource) and a collective (link 3) beside a compute kernel (2)
    comm = Task(2, "all_reduce", (2,), comm_s=3.0)
    g = TaskGraph.of([T(0, o=1), T(1, o=1), comm, T(3, c=2)], [])
    assert list_schedule(g, 2).makespan_s == approx(3)
    s = list_schedule(g, 1)  # the collective is not on the one stream: 1 + 1 + 2 on it, 3 on the link
    assert s.stream[2] == -1 and s.makespan_s == approx(4)


def test_edges_go_forward_only():
    with pytest.raises(ValueError):
        TaskGraph.of([T(0), T(1)], [(1, 0)])
    with pytest.raises(ValueError):
        list_schedule(TaskGraph.of([T(0)], []), 0)


def test_scenario_graphs():
    # forward f (c 1) -> backward b1 (c 2) -> b2 (c 2); updates u1 after b1, u2 after b2 (memory 1 each)
    tasks = [T(0, c=1, phase="forward"), T(1, c=2, phase="backward"), T(2, c=2, phase="backward"),
             T(3, m=1, phase="optimizer"), T(4, m=1, phase="optimizer")]
    g = TaskGraph.of(tasks, [(0, 1), (1, 2), (1, 3), (2, 4)])
    # per-layer updates: u1 (memory) hides under b2 (compute): 1 + 2 + 2 + 1
    assert list_schedule(g, 2).makespan_s == approx(6)
    # the optimizer after the whole backward: 1 + 2 + 2, then u1 and u2 share the bandwidth: 2
    assert list_schedule(barrier(g, "optimizer"), 2).makespan_s == approx(7)
    # two steps: the second's reader of the weight f reads waits for u1 only
    g.readers, g.updates = {"w": [0, 3]}, {"w": [3]}
    two = twice(g)
    assert two.preds[5] == [3]  # the second forward after the first's update of w
    # b1 ends at 3, u1 (memory 1) then runs beside b2 and ends at 4: the second forward starts there
    s = list_schedule(two, 2)
    assert s.start[5] == approx(4)
    # chunks of 2 on f, b1, b2: each chunk half the work; chunk j waits for chunk j
    cut = chunked(g, 2, lambda t: t.phase in ("forward", "backward"))
    assert len(cut.tasks) == 8 and cut.preds[2] == [0] and cut.preds[3] == [1]
    assert cut.preds[6] == [2, 3]  # u1 waits for both chunks of b1


def mlp_step(params, x, y):
    import jax
    import jax.numpy as jnp

    def loss(p):
        h = jnp.tanh(x @ p[0])
        return jnp.mean((h @ p[1] - y) ** 2)

    g = jax.grad(loss)(params)
    return [w - 0.1 * d for w, d in zip(params, g)]


def mlp_text():
    import jax
    import jax.numpy as jnp

    S = jax.ShapeDtypeStruct
    params = [S((64, 128), jnp.float32), S((128, 32), jnp.float32)]
    return jax.jit(mlp_step, donate_argnums=0).lower(params, S((16, 64), jnp.float32),
                                                     S((16, 32), jnp.float32)).as_text(debug_info=True)


def longest_row_path(analysis, times):
    """The longest path over the op rows themselves (producers read directly, rows of no time weigh 0)."""
    best = []
    for i, srcs in enumerate(analysis.producers):
        before = [best[s] for s in srcs if isinstance(s, int)]
        best.append(max(before, default=0.0) + times[i].time_s)
    return max(best)


def test_mlp_training_step():
    from mhlo_cost import Study
    from mhlo_cost.roofline.tasks import build

    s = Study(mlp_text(), hardware="h100", training=True, isolate=False)
    rf, a = s.roofline, s.analysis
    g = build(rf)
    assert g.serial_s == approx(rf.totals()["est_time_s"])  # the summary's (fork-join) figure
    p = critical_path(g)
    # the longest chain: x@w1, tanh, @w2, -y, x2/n, the loss' cotangent, the dgrad dot, tanh's derivative
    # (two multiplies and their sum), w1's wgrad dot, its transpose, the update's multiply and subtract
    names = [g.tasks[i].name for i in p.chain]
    assert names == ["dot_general", "tanh", "dot_general", "subtract", "multiply", "multiply", "dot_general",
                     "multiply", "multiply", "add", "dot_general", "transpose", "multiply", "subtract"]
    assert p.length_s == approx(math_sum(g.tasks[i].time_s for i in p.chain))
    assert p.length_s == approx(longest_row_path(a, rf.times))
    assert list_schedule(g, 1).makespan_s == approx(g.serial_s)
    two = list_schedule(g, 2).makespan_s
    assert p.length_s <= two < g.serial_s
    # w2 is versioned: its update (the last subtract) comes after the forward and dgrad dots that read it
    w2 = next(x.key for x in a.arguments if x.index == 1)
    (update,) = g.updates[w2]
    readers = [r for r in g.readers[w2] if r != update]
    assert {g.tasks[r].name for r in readers} == {"dot_general"} and len(readers) == 2
    assert set(readers) <= set(g.preds[update])


def math_sum(xs):
    import math

    return math.fsum(xs)


def small_program(x, w, v):
    import jax.numpy as jnp

    a = jnp.tanh(x @ w)
    b = jnp.sin(x) * 2.0
    c = (a + b.sum()) @ v
    return c, jnp.exp(b) - a.mean(axis=0)


@pytest.mark.parametrize("execution", ["unfused", "eager"])
def test_running_ops_in_the_exported_order_gives_the_same_outputs(tmp_path, capsys, monkeypatch, execution):
    import jax
    from jax._src import xla_bridge
    from jax._src.lib import xla_client

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    shapes = [((8, 16), np.float32), ((16, 16), np.float32), ((16, 4), np.float32)]
    text = lowered(small_program, *shapes)
    (tmp_path / "p.mlir").write_text(text)
    code, _, err = run_cli(["report", tmp_path / "p.mlir", "--hardware", "h100", "--execution", execution,
                            "--by", "critical-path", "-o", tmp_path / "g.json"], capsys)
    assert code == 0, err
    graph = json.loads((tmp_path / "g.json").read_text())
    edges = graph["edges"]
    assert edges and all(a < b for a, b in edges)
    # a topological order as far from program order as the edges allow: the latest ready node first
    g = TaskGraph.of([Task(n["id"], n["op"], tuple(n["rows"])) for n in graph["nodes"]], edges)
    order = g.topological(latest_first=True)
    assert order != sorted(order)  # the test moves ops
    assert _moved(text, [graph["nodes"][i]["rows"] for i in reversed(range(len(order)))]) is None  # the control
    moved = _moved(text, [graph["nodes"][i]["rows"] for i in order])
    assert moved is not None  # every operand defined before its use: no edge missing
    backend = xla_bridge.get_backend("cpu")
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(d) for s, d in shapes]
    exe = backend.compile_and_load(moved, xla_client.DeviceList(tuple(backend.devices()[:1])),
                                   xla_client.CompileOptions())
    got = [np.asarray(o) for o in exe.execute([jax.device_put(x) for x in args])]
    want = [np.asarray(o) for o in jax.jit(small_program)(*args)]
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _moved(text: str, node_rows):
    """The program with its entry's ops in the order of ``node_rows`` (:func:`_reordered`), or None where
    the result does not verify (a value used before it is made)."""
    from jaxlib.mlir import ir

    from mhlo_cost import Study
    from mhlo_cost.ir.loader import make_context

    rows = len(Study(text, isolate=False).analysis.rows)
    with make_context() as ctx:
        module = ir.Module.parse(text, ctx)
        main = next(op for op in module.body.operations if ir.StringAttr(op.attributes["sym_name"]).value == "main")
        body = list(main.regions[0].blocks[0].operations)
        ret, ops = body[-1], body[:-1]
        assert len(ops) == rows  # one row per op of the entry: a row's position is its op's
        for i in _reordered(ops, node_rows):
            ops[i].operation.move_before(ret)
        try:
            ok = module.operation.verify()
        except ir.MLIRError:
            ok = False
        return str(module) if ok else None


def _reordered(ops, node_rows) -> list[int]:
    """The ops' positions: each node's rows in turn; an op of no node (a constant, a reshape) just before its
    first reader, its own such sources before it. The op rows are the entry's ops (one row each)."""
    in_node = {i for rows in node_rows for i in rows}
    users: dict = {}
    for i, op in enumerate(ops):
        for v in op.operands:
            owner = v.owner
            for j, o in enumerate(ops):
                if o.operation == owner:
                    users.setdefault(i, []).append(j)
    out, done = [], set()

    def place(i):
        if i in done:
            return
        for j in users.get(i, []):
            if j not in in_node:
                place(j)
        done.add(i)
        out.append(i)

    for rows in node_rows:
        for i in rows:
            place(i)
    for i in range(len(ops)):  # ops no node reads (dead, or read only by the return)
        place(i)
    return out


def test_report_views_and_their_refusals(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    path = tmp_path / "mlp.mlir"
    path.write_text(mlp_text())
    code, out, err = run_cli(["report", path, "--hardware", "h100", "--by", "critical-path"], capsys)
    assert code == 0, err
    for start in ("serial ", "critical path ", "2-stream ", "scenario optimizer after backward",
                  "scenario next forward early", "scenario chunks of 2"):
        assert any(line.startswith(start) for line in out.splitlines()), start
    code, out, err = run_cli(["report", path, "--hardware", "h100", "--by", "overlap", "--format", "csv"], capsys)
    assert code == 0 and out.splitlines()[0].startswith("block,tasks,serial_s,critical_s,slack_min_s")
    for argv, says in ((["--by", "critical-path"], "needs a profile"),
                       (["--by", "overlap", "--hardware", "h100", "--scope", "x"], "does not go with --block"),
                       ([path, "--by", "critical-path", "--hardware", "h100"], "takes one file")):
        code, out, err = run_cli(["report", path, *argv], capsys)
        assert code == 2 and out == ""
        assert len(err.splitlines()) == 1 and err.startswith("mhlo-cost: error: ") and says in err


def test_dot_export_names_every_node_and_marks_the_critical_path(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    path = tmp_path / "mlp.mlir"
    path.write_text(mlp_text())
    for name in ("g.dot", "g.json"):
        code, _, err = run_cli(["report", path, "--hardware", "h100", "--by", "critical-path", "-o",
                                tmp_path / name], capsys)
        assert code == 0, err
    dot = (tmp_path / "g.dot").read_text()
    graph = json.loads((tmp_path / "g.json").read_text())
    assert dot.startswith("digraph tasks {") and dot.rstrip().endswith("}")
    assert dot.count("[label=") == len(graph["nodes"])
    assert dot.count(" -> ") == len(graph["edges"])
    critical = [n["id"] for n in graph["nodes"] if n["critical"]]
    assert dot.count(", color=red];") == len(critical)  # the nodes
    assert dot.count("[color=red]") == len(critical) - 1  # the chain's edges
    assert graph["critical_path_s"] == pytest.approx(sum(graph["nodes"][i]["time_s"] for i in critical))


def test_html_page_draws_the_schedule(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    path = tmp_path / "mlp.mlir"
    path.write_text(mlp_text())
    code, _, err = run_cli(["report", path, "--hardware", "h100", "--by", "critical-path", "--format", "html",
                            "-o", tmp_path / "cp.html"], capsys)
    assert code == 0, err
    page = (tmp_path / "cp.html").read_text()
    run_cli(["report", path, "--hardware", "h100", "--by", "critical-path", "-o", tmp_path / "g.json"], capsys)
    graph = json.loads((tmp_path / "g.json").read_text())
    timeline = page[page.index('<section id="timeline">'):page.index('<section id="bounds">')]
    assert timeline.count("<rect") - timeline.count('class="swatch"') == len(graph["nodes"])  # a bar per task
    critical = sum(n["critical"] for n in graph["nodes"])
    assert timeline.count('stroke="#000"') == critical


def loop_program(x, w):
    import jax
    import jax.numpy as jnp

    y = jnp.sin(x)
    z = jax.lax.fori_loop(0, 3, lambda i, c: jnp.tanh(c @ w), x)
    return z + y


def test_a_value_the_walk_cannot_follow_waits_for_everything_before_it():
    # the loop's carried value has no producer the walk can name: its readers (the loop's ops, and the sum
    # after it) wait for every task before them, so no order but the program's is left
    from mhlo_cost import Study
    from mhlo_cost.roofline.tasks import build

    s = Study(lowered(loop_program, ((8, 8), np.float32), ((8, 8), np.float32)), hardware="h100", isolate=False)
    g = build(s.roofline)
    assert g.barriers >= 2
    n = len(g.tasks)
    assert g.topological(latest_first=True) == list(range(n))
    assert critical_path(g).length_s == approx(g.serial_s)


def test_a_barrier_that_cannot_be_drawn_is_said_not_guessed():
    from mhlo_cost.roofline.tasks.scenarios import scenarios

    # an update the backward reads: no barrier can put every update after the whole backward
    g = TaskGraph.of([T(0, c=1, phase="backward"), T(1, m=1, phase="optimizer"), T(2, c=1, phase="backward")],
                     [(0, 1), (1, 2)])
    with pytest.raises(ValueError):
        barrier(g, "optimizer")
    first = scenarios(g, 2)[0]
    assert first.step_s is None and first.note.startswith("not computed")
