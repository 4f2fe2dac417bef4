"""benchmarks/stdit3_roofline.py's eager breakdown: the kinds of kernel partition the eager estimate (their times
add up to the forward's, their kernels to its kernel count), and each kind is what its kernels are."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from helpers import script

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent


def _module():
    return script("benchmarks/stdit3_roofline.py", "stdit3_roofline_more")


def test_kinds_partition_the_eager_estimate():
    from mhlo_cost.machines.hardware import get_profile

    mod = _module()
    hw = get_profile("a100")
    rfs = mod._eager_rooflines("", hw, small=True)
    total, kernels = mod.eager_per_forward("", hw, depth=3, small=True, rooflines=rfs)
    parts = mod.eager_made_of(rfs, depth=3)
    kinds = {k: v for k, v in parts.items() if not k.startswith("of which")}
    assert math.isclose(sum(t for t, _ in kinds.values()), total, rel_tol=1e-9)
    assert sum(n for _, n in kinds.values()) == kernels
    # one self-attention per block (spatial and temporal) and one cross-attention per block: 3 blocks of each
    assert kinds["attention, spatial"][1] == 3 and kinds["attention, temporal"][1] == 3
    assert kinds["attention, cross"][1] == 6
    assert kinds["GEMM"][1] > 0 and kinds["elementwise"][1] > 0
