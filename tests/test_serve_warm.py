"""A serve grid's steps lowered in a second process (``sweep(..., jobs=2)``, ``serve -j 2``) while this one walks,
fits and prices them: the same figures as every point lowered in one process, the plan the steps the sweep asks for,
and a lost or idle second process leaving its steps to this one."""
import queue

GPT = (("layers", 5), ("hidden", 64), ("heads", 2), ("vocab", 128))


def _base():
    from mhlo_cost.lower.inference.steps import StepRequest

    return StepRequest(model="gpt", overrides=GPT)


def test_second_process_gives_the_figures_of_every_point_lowered(tmp_path):
    """A 5-layer GPT (its points rebuilt from depths 3 and 4, checked at 5): with jobs 2 every planned step comes
    from the second process's cache entries, the table byte-identical and every figure equal to lowering every
    point at full depth here (the independent reference) and to the sweep in one process."""
    from mhlo_cost.roofline import hardware_from_args
    from mhlo_cost.studies.serve.grid import StepCache, sweep, table

    hw = hardware_from_args("h100", None)
    grid = dict(batches=[1, 2, 3, 4], contexts=[128, 256, 512], hw=hw, tps=(1, 2))
    stages, notes = [], []
    two = sweep(_base(), cache=StepCache(tmp_path / "a"), stage=stages.append, note=notes.append, jobs=2, **grid)
    one = sweep(_base(), cache=StepCache(tmp_path / "c"), **grid)
    lowered = sweep(_base(), cache=StepCache(tmp_path / "b"), fit=False, **grid)
    assert not notes
    assert "the steps lowered in a second process" in stages
    assert table(two).to_csv() == table(lowered).to_csv() == table(one).to_csv()
    assert two == lowered


class _Asked:
    """A StepCache that records the requests the sweep lowers (or reads)."""

    def __init__(self, cache):
        self.cache, self.asked = cache, []

    def step(self, req):
        self.asked.append(req)
        return self.cache.step(req)

    def __getattr__(self, name):
        return getattr(self.cache, name)


def test_plan_is_what_the_sweep_lowers(tmp_path):
    """:func:`planned` names the steps a fitted sweep in one process lowers, in its order (so the second process
    lowers every step the fits compare, and nothing else): a grid of batches 2..4 fitted (nodes at depths 3 and 4,
    the corner at 5 too, the check point), batch 1's points rebuilt (its first checked at 5)."""
    from mhlo_cost.roofline import hardware_from_args
    from mhlo_cost.studies.serve.fitted import planned
    from mhlo_cost.studies.serve.grid import StepCache, sweep

    cache = _Asked(StepCache(tmp_path))
    points = [(b, c) for b in (1, 2, 3, 4) for c in (128, 256, 512)]
    sweep(_base(), [1, 2, 3, 4], [128, 256, 512], hardware_from_args("h100", None), cache=cache)
    plan = planned(_base(), points)
    assert plan == cache.asked
    layers = [dict(r.overrides)["layers"] for r in plan]
    assert len(plan) == 5 * 2 + 1 + 3 * 2 + 1 and sorted(set(layers)) == [3, 4, 5]  # (5 fit points, 3 of batch 1)
    assert [(r.batch, r.context) for r in plan if dict(r.overrides)["layers"] == 5] == [(2, 128), (1, 128)]


def test_no_plan_where_the_points_are_lowered_at_full_depth(tmp_path):
    """A 4-layer GPT is lowered at full depth (no depth to repeat from): the plan is empty, and a sweep with jobs 2
    lowers every step here, its table that of the sweep in one process."""
    from mhlo_cost.lower.inference.steps import StepRequest
    from mhlo_cost.roofline import hardware_from_args
    from mhlo_cost.studies.serve.fitted import planned
    from mhlo_cost.studies.serve.grid import StepCache, sweep, table

    base = StepRequest(model="gpt", overrides=(("layers", 4),) + GPT[1:])
    assert planned(base, [(1, 128), (2, 128), (2, 256)]) == []
    hw = hardware_from_args("h100", None)
    grid = dict(batches=[1, 2], contexts=[128, 256], hw=hw)
    two = sweep(base, cache=StepCache(tmp_path / "a"), jobs=2, **grid)
    assert table(two).to_csv() == table(sweep(base, cache=StepCache(tmp_path / "b"), fit=False, **grid)).to_csv()


class _Process:
    def __init__(self, alive: bool):
        self.alive, self.ended = alive, False

    def is_alive(self):
        return self.alive

    def terminate(self):
        self.alive, self.ended = False, True

    def join(self):
        pass


def test_waits_for_a_planned_step_only(monkeypatch):
    """The plan heard first; a planned step waited for until the second process says it is kept; a step it
    does not plan returns at once."""
    from mhlo_cost.studies.serve import warm

    monkeypatch.setattr(warm, "POLL_S", 0.01)
    said = queue.Queue()
    said.put(("plan", ["a", "b"]))
    said.put(("kept", 0))
    said.put(("failed", 1))
    w = warm.Warmer(_Process(True), said)
    w.wait("z")
    assert w.plan == {"a": 0, "b": 1} and w.over == set()
    w.wait("b")  # (reads past a's message to b's)
    assert w.over == {0, 1} and not w.lost
    w.stop()
    assert w.process.ended


def test_what_the_second_processs_cache_says_goes_through_the_sweeps_note_once(monkeypatch):
    """The second process's cache notes (an entry not kept, not trusted) are the sweep's to tell (its quiet and its
    console), each text once, not printed by the second process itself."""
    from mhlo_cost.studies.serve import warm

    monkeypatch.setattr(warm, "POLL_S", 0.01)
    said, notes = queue.Queue(), []
    for what in (("plan", ["a"]), ("note", "cannot keep a"), ("note", "cannot keep a"), ("note", "b not trusted"),
                 ("kept", 0)):
        said.put(what)
    w = warm.Warmer(_Process(True), said, notes.append)
    w.wait("a")
    assert notes == ["cannot keep a", "b not trusted"] and w.over == {0}


def test_lost_second_process_leaves_its_steps_here(monkeypatch):
    """Where the second process is lost (killed, out of memory) before it says a step is kept, waiting for the step
    ends (this process lowers it); the rest of its plan is not waited for either."""
    from mhlo_cost.studies.serve import warm

    monkeypatch.setattr(warm, "POLL_S", 0.01)
    said = queue.Queue()
    said.put(("plan", ["a", "b"]))
    w = warm.Warmer(_Process(False), said)
    w.wait("a")
    assert w.lost and w.over == set()
    w.wait("b")
    assert w.lost


def test_check_after_the_second_process_started_still_refuses(tmp_path, capsys):
    """With -j 2 the checks that read the model's configuration run once the second process has started (beside
    its imports): a tensor-parallel degree that does not divide the heads is still one error line (exit 2), before
    anything is lowered here, the second process ended."""
    from mhlo_cost.cli import main

    code = main(["serve", "--model", "gpt", "--set", "layers=5", "--batches", "1,2", "--contexts", "128,256",
                 "--tps", "1,3", "-j", "2", "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "degree 3 does not divide" in err and "Traceback" not in err
    assert not (tmp_path / "serve" / "figures").exists()
