"""The H100 of torchtitan's 2024 tables (96 GB HBM2e at 2.4 TB/s, a 500 W power limit: profile ``h100-sxm-96gb-500w``)
and its hosts (system ``grand-teton-h100``): the page's own figures, and the peaks against the closed form of their
estimate, a third of the way from H100 NVL's datasheet (400 W) to H100 SXM's (700 W)."""
from __future__ import annotations

import pytest

from mhlo_cost.network import resolve_profile


def test_the_500w_h100_lies_one_third_of_the_way_from_nvl_to_sxm():
    nvl, sxm, tt = resolve_profile("h100-nvl"), resolve_profile("h100-sxm"), resolve_profile("h100-sxm-96gb-500w")
    # board power 400 W (NVL) and 700 W (SXM): 500 W is a third of the way
    for dtype in ("bf16", "fp8"):
        want = nvl.matrix_peak(dtype) + (sxm.matrix_peak(dtype) - nvl.matrix_peak(dtype)) / 3
        assert tt.matrix_peak(dtype) == pytest.approx(want, rel=1e-3)
    assert tt.hbm_bandwidth == 2.4e12 and tt.hbm_capacity == 96e9  # the torchtitan page's figures
    assert tt.matrix_peak("bf16") < sxm.matrix_peak("bf16")


def test_grand_teton_is_eight_500w_h100s_on_nvlink_with_400_gbps_per_gpu():
    gt, dgx = resolve_profile("grand-teton-h100"), resolve_profile("dgx-h100")
    assert gt.chip == "h100-sxm-96gb-500w"
    a, b = gt.topology, dgx.topology  # the same NVLink 4 switch and 400 Gb/s NICs, one per GPU
    assert (a.devices_per_node, a.intra, a.nics_per_node, a.switch) == (b.devices_per_node, b.intra, 8, True)
    assert (a.inter.bandwidth, a.inter.efficiency) == (400e9 / 8, b.inter.efficiency)
