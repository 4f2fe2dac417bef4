"""The house's rule on how a request moves through the wings (scripts/trace_wings.py): a ``report``, ``serve`` and
``train-plan`` request each enters no wing more than MOST_ENTRIES (3) times: once from above, and back up only
where a wing hands a callable down. Views get figures and frames, not a study whose methods they call back."""
from __future__ import annotations

from pathlib import Path

import pytest
from helpers import script

ROOT = Path(__file__).resolve().parents[1]
GPT = ROOT / "examples" / "gpt_small.mlir"
TINY_GPT = ["--model", "gpt", "--set", "layers=2", "--set", "hidden=64", "--set", "heads=2", "--set", "vocab=128"]
TINY_PLAN = ["--layers", "2", "--hidden", "64", "--heads", "2", "--seq", "32", "--vocab", "128"]


def _tracer():
    return script("scripts/trace_wings.py")


tracer = _tracer()


@pytest.mark.parametrize("argv", [
    ["report", str(GPT)],
    ["report", str(GPT), "--by", "block"],
    ["report", str(GPT), "--format", "html", "--hardware", "h100", "--fuse", "elementwise", "-o", "{tmp}/r.html"],
    ["serve", *TINY_GPT, "--decode", "--context", "64", "--no-cache"],
    ["train-plan", *TINY_PLAN, "-p", "2", "--format", "html", "-o", "{tmp}/plan.html"],
    ["train-plan", *TINY_PLAN, "--format", "json"],
], ids=["report", "report-block", "report-html", "serve", "train-plan-html", "train-plan-json"])
def test_a_request_enters_no_wing_more_than_three_times(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MHLO_COST_ISOLATE", "0")  # the walk in this process, so that it is traced too
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    t = tracer.trace([a.format(tmp=tmp_path) for a in argv])
    capsys.readouterr()
    assert t.code == 0
    assert {"cli", "studies", "views", "files"} <= set(t.first)  # the request went through the house
    over = {w: sorted(t.back[w]) for w in t.first if t.entries(w) > tracer.MOST_ENTRIES}
    assert not over, f"entered more than {tracer.MOST_ENTRIES} times: {over}"
    assert not [e for e in t.back.get("studies", ()) if e[0].startswith("mhlo_cost.views.")], \
        "a view called back into a study"


def test_the_tracer_counts_a_callback_as_an_entry():
    """An edge that comes back up into a wing counts: the rule could fail."""
    t = tracer.Trace(first={"cli": None, "files": "cli"}, back={"cli": {("mhlo_cost.files.x.f", "mhlo_cost.cli.y.g")}},
                     into={}, modules=set(), code=0)
    assert t.entries("cli") == 2 and t.entries("files") == 1
    assert tracer.wing_of("mhlo_cost.views.by", {}) == "views" and tracer.wing_of("numpy", {}) is None
