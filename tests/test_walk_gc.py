"""After the walk, the cyclic collector is not set off by what the summary and the child's view make per row: a full
collection traverses every row the walk left (issue 41: the cost of a report linear in the program's size)."""
from __future__ import annotations

import gc

from mhlo_cost.analysis import SUM_COLUMNS, analyze
from mhlo_cost.analysis.isolated import WalkOptions, answer
from mhlo_cost.ir.codes import Answer
from mhlo_cost.ir.loader import load

N = 400


def _chain(n: int = N) -> str:
    ops = "\n".join(f"  %a{i + 1} = stablehlo.multiply %a{i}, %a{i} : tensor<4x8xf32>" for i in range(n))
    return f"func.func @main(%a0: tensor<4x8xf32>) -> tensor<4x8xf32> {{\n{ops}\n  return %a{n} : tensor<4x8xf32>\n}}\n"


def test_the_summary_makes_no_tracked_object_per_row():
    a = analyze(_chain())
    a.memory  # the memory sweep's own work is not what is measured here
    collections = []

    def heard(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    old = gc.get_threshold()
    gc.collect()
    gc.set_threshold(N // 4, 10, 10)  # a young-generation collection per N/4 tracked objects made and kept
    gc.callbacks.append(heard)
    try:
        s = a._summary()
    finally:
        gc.callbacks.remove(heard)
        gc.set_threshold(*old)
    assert collections == []  # zip(*costs) held an iterator per row: N of them, four collections at least
    # and the sums are the rows' (an independent sum, metric by metric)
    for k in SUM_COLUMNS:
        assert s[k] == sum(getattr(r, k) for r in a.rows)
    assert s["vector_flops"] == N * 4 * 8 and s["ops"] == N


def test_the_childs_whole_answer_is_made_with_the_collector_paused():
    loaded = load(_chain(8))
    seen = []

    def render(analysis, asked):
        seen.append((gc.isenabled(), asked, len(analysis.rows)))
        return b"whole"

    code, payload = answer(loaded.module, "chain", WalkOptions(render="{}").to_json(), render)
    assert (code, payload) == (Answer.RENDERED, b"whole")
    assert seen == [(False, "{}", 8)]
    assert gc.isenabled()


def test_the_childs_answer_leaves_a_paused_collector_paused():
    loaded = load(_chain(8))
    gc.disable()
    try:
        code, _ = answer(loaded.module, "chain", WalkOptions(render="{}").to_json(), lambda a, asked: b"whole")
        assert code == Answer.RENDERED
        assert not gc.isenabled()  # the render's pause turned the collector on where the caller had it off
    finally:
        gc.enable()
