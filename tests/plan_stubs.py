"""Stubs the train-plan tests share: a memory of BW bytes a second, a network of LINK bytes a second, and a layer cost
of given forward, backward and linear seconds (what :mod:`mhlo_cost.studies.plan.compose`, :mod:`.async_tp` and
:mod:`.fp8_gather` read), so that a test's closed form is worked out from round numbers."""
from __future__ import annotations

from mhlo_cost.studies.plan.costs import LayerCost
from mhlo_cost.studies.plan.tp_overlap import LINEARS

BW = 1e12  # the stub memory's bytes a second
LINK = 1e11  # the stub network's bytes a second


class StubHW:
    """A profile whose memory moves BW bytes a second, whatever the kernels."""

    def memory_time(self, nbytes, kernels=0, path="stream"):
        return nbytes / BW


def stub_price(kind, nbytes, groups):
    """A stub network: a permute moves its bytes at LINK, a collective of n ranks (n - 1)/n of them."""
    n = len(groups[0])
    return nbytes / LINK if kind == "collective_permute" else nbytes * (n - 1) / n / LINK


def by_phase(forward: float = 0.0, backward: float = 0.0) -> dict:
    """A LayerCost field by phase: ``forward`` and ``backward`` seconds, nothing in the recompute or the optimizer."""
    return {"forward": forward, "backward": backward, "recompute": 0.0, "optimizer": 0.0}


def stub_cost(linear: dict | None = None, elems: int = 1000, forward: float = 1.0, backward: float = 1.0,
              **fields) -> LayerCost:
    """A layer of ``forward`` s forward and ``backward`` s backward (1 s each unless given), no FLOPs, ``elems`` bf16
    weights, each TE GEMM of :data:`LINEARS` 0 s unless ``linear`` gives its seconds; ``fields``: other LayerCost
    fields (a charge by phase: :func:`by_phase`)."""
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero), by_phase(forward, backward), weight_elems=elems,
                     weight_bytes=2 * elems, linear_s=dict.fromkeys(LINEARS, 0.0) | (linear or {}), **fields)
