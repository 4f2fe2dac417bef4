"""A serve grid's batch-1 points swept in a second process (``sweep(..., jobs=2)``, ``serve -j 2``): the same
figures as every point lowered in one process, the notes once, and a lost process's points swept here."""
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool


def test_second_process_gives_the_figures_of_every_point_lowered(tmp_path):
    """A 5-layer GPT (its points rebuilt from depths 2 and 3, checked at 4): with jobs 2 the batch-1 points come
    from the second process, the table byte-identical and every figure equal to lowering every point at full
    depth here (the independent reference), and the second process's figures kept in the shared cache."""
    from mhlo_cost.lower.inference.steps import StepRequest
    from mhlo_cost.roofline import hardware_from_args
    from mhlo_cost.studies.serve.grid import StepCache, sweep, table

    hw = hardware_from_args("h100", None)
    base = StepRequest(model="gpt", overrides=(("layers", 5), ("hidden", 64), ("heads", 2), ("vocab", 128)))
    grid = dict(batches=[1, 2, 3, 4], contexts=[128, 256, 512], hw=hw, tps=(1, 2))
    stages, notes = [], []
    two = sweep(base, cache=StepCache(tmp_path / "a"), stage=stages.append, note=notes.append, jobs=2, **grid)
    lowered = sweep(base, cache=StepCache(tmp_path / "b"), fit=False, **grid)
    assert not notes
    assert [s for s in stages if "second process" in s] == ["batch 1 at contexts 128, 256, 512 in a second process"]
    assert not any(s.startswith("lowering batch 1,") for s in stages)  # (none of them here)
    assert sum(s.startswith("evaluating") for s in stages) == 9  # the grid of batches 2..4 here
    assert table(two).to_csv() == table(lowered).to_csv()
    assert two == lowered
    kept = StepCache(tmp_path / "a")
    one = replace_batch(base, 1, 256)
    assert kept.figures(one, hw, 2) == lowered[2 * 1 + 1]  # (batch 1, context 256, tp 2): kept by the second


def replace_batch(base, batch: int, context: int):
    from dataclasses import replace

    return replace(base, batch=batch, context=context)


class _Pool:
    def __init__(self):
        self.shut = False

    def shutdown(self, wait=True, cancel_futures=False):
        self.shut = True


def test_lost_second_process_leaves_its_points_here():
    """Where the second process is lost (killed, out of memory), its points are given back to sweep here."""
    from mhlo_cost.studies.serve.aside import Aside

    future = Future()
    future.set_exception(BrokenProcessPool("lost"))
    pool = _Pool()
    found = {}
    assert Aside(pool, future, [128, 512]).gather(found, (1,), lambda text: None) == [(1, 128), (1, 512)]
    assert found == {} and pool.shut


def test_notes_of_the_second_process_said_once():
    """The second process's figures go to their points in order (context, then tp); a note both processes
    said is said once."""
    from mhlo_cost.studies.serve.aside import Aside
    from mhlo_cost.studies.serve.grid import _Said

    heard = []
    said = _Said(heard.append)
    said("serve: points lowered at full depth: why")
    future = Future()
    future.set_result((["a1", "a2", "b1", "b2"], ["serve: points lowered at full depth: why", "another"]))
    found = {}
    assert Aside(_Pool(), future, [128, 512]).gather(found, (1, 2), said.again) == []
    assert found == {(1, 128, 1): "a1", (1, 128, 2): "a2", (1, 512, 1): "b1", (1, 512, 2): "b2"}
    assert heard == ["serve: points lowered at full depth: why", "another"]
