"""Stubs the train-plan tests share: a memory of BW bytes a second, a network of LINK bytes a second, and a layer cost
of given linear seconds (what :mod:`mhlo_cost.studies.plan.async_tp` and :mod:`.fp8_gather` read), so that a test's
closed form is worked out from round numbers."""
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


def stub_cost(linear: dict | None = None, elems: int = 1000) -> LayerCost:
    """A layer of 1 s forward and 1 s backward, ``elems`` bf16 weights, each TE GEMM of :data:`LINEARS` 0 s unless
    ``linear`` gives its seconds."""
    zero = {"forward": 0, "backward": 0, "recompute": 0, "optimizer": 0}
    return LayerCost("k", "chip", dict(zero), dict(zero), {"forward": 1.0, "backward": 1.0, "recompute": 0.0,
                                                          "optimizer": 0.0}, weight_elems=elems, weight_bytes=2 * elems,
                     linear_s=dict.fromkeys(LINEARS, 0.0) | (linear or {}))
