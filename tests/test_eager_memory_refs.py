"""The eager peak holds a value while Python references it (mhlo_cost/memory/eager_hold.py), checked on small
torch modules (no Python scalars: the IR stores a scalar operand, eager does not) whose eager peak is known in
closed form and equals torch's MemTracker (FakeTensorMode, no-grad forward) on the same module: a named local lives until its function returns, an argument until the call it
is passed to returns, a temporary dies at the end of its statement."""
from __future__ import annotations

import importlib.util

import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("torchax") is None:
    pytest.skip("torchax is not installed (pip install 'mhlo-cost[torch]')", allow_module_level=True)

N = 1 << 16  # elements of every f32 tensor below
S = 4 * N  # bytes of one


class Named(torch.nn.Module):
    """Named locals, each read by a statement making a value of another shape: all live when the last is made
    (freeing at last use would drop ``a`` once ``b`` is made)."""

    def forward(self, x):
        a = torch.cat([x, x])
        b = a.reshape(2, N).sum(0)
        c = torch.cat([b, b])
        return c


class Rebound(torch.nn.Module):
    """One name re-bound to a value like its old one (``h = f(h)``): the old value dies with the re-binding."""

    def forward(self, x):
        h = x * x
        h = h * h
        h = h * h
        return h


class Temporaries(torch.nn.Module):
    """Temporaries of one statement: each dies once the op reading it returns."""

    def forward(self, x):
        return torch.sin(torch.cos(x) * x)


class Inner(torch.nn.Module):
    def forward(self, h):
        u = torch.exp(h)
        return u * u


class Outer(torch.nn.Module):
    """``x * x`` is passed to ``inner``: referenced by the call until it returns, though ``exp`` reads it last."""

    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return self.inner(x * x)


def memtracker_peak(make) -> int:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    with FakeTensorMode():
        module = make().eval()
        x = torch.zeros(N)
        mt = MemTracker()
        mt.track_external(module, x)
        with mt, torch.no_grad():
            module(x)
        (snap,) = mt.get_tracker_snapshot("peak").values()
    return snap["Total"]


def eager_peak(make) -> tuple[int, int]:
    """(eager peak, unfused peak) of the module lowered through torchax."""
    from mhlo_cost.analysis import AnalysisOptions, analyze
    from mhlo_cost.lower.frontends import torchax_frontend as tf
    from mhlo_cost.roofline.memory import eager_profile

    a = analyze(tf.lower_module(make(), [((N,), torch.float32)], dtype=None).text, AnalysisOptions(dataflow=True))
    return eager_profile(a).peak_bytes, a.memory.peak_bytes


@pytest.mark.parametrize("make, expected", [
    (Named, 6 * S),  # x, a (2S), b, c (2S): all still named when c is made
    (Rebound, 3 * S),  # x, the old h, the new h
    (Temporaries, 3 * S),  # x, cos(x), cos(x) * x while the product runs; then x, cos(x) * x, the sine
    (Outer, 4 * S),  # x, x * x (held by the call), u (named in inner), u * u
], ids=["named", "rebound", "temporaries", "argument"])
def test_eager_peak_equals_memtracker_closed_form(make, expected):
    ref = memtracker_peak(make)
    assert ref == expected  # the closed form describes what eager PyTorch does
    eager, _ = eager_peak(make)
    assert eager == expected


def test_without_references_eager_frees_at_last_use(monkeypatch):
    """The same modules with no reference seen beyond a last use: the peaks of freeing at last use."""
    from mhlo_cost.memory import eager_hold

    monkeypatch.setattr(eager_hold, "holds", lambda rows, producers: [None] * len(rows))
    assert eager_peak(Named)[0] == 4 * S + 4  # x, b, c while c is made (a freed once b is); the sum's f32 init
    assert eager_peak(Outer)[0] == 3 * S  # x * x freed once exp has read it


@pytest.mark.parametrize("isolate", ["1", "0"])
def test_report_through_the_guarded_child_holds_the_same(tmp_path, isolate):
    """`report --execution eager` walks in the reader's child (or in process): the call stacks cross with the
    rows, so the eager peak is the closed form either way (freeing at last use would give 4S + 4)."""
    import json
    import os
    import subprocess
    import sys

    from mhlo_cost.lower.frontends import torchax_frontend as tf

    path = tmp_path / "named.mlir"
    path.write_text(tf.lower_module(Named(), [((N,), torch.float32)], dtype=None).text)
    out = subprocess.run([sys.executable, "-m", "mhlo_cost", "report", str(path), "--execution", "eager",
                          "--format", "json", "-q"], capture_output=True, text=True, check=True,
                         env=dict(os.environ, MHLO_COST_ISOLATE=isolate))
    assert json.loads(out.stdout)["summary"]["peak_bytes_eager"] == 6 * S
