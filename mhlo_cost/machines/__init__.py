"""Chips: what a hardware profile says and how far to trust it.

* :mod:`.hardware`: the face (import profiles from here); :mod:`.profile`: one chip's peaks per precision and
  its time models; :mod:`.catalogue`: the TOML files (``data/``), their schema, lookup by name or alias;
* :mod:`.gemm`, :mod:`.kernels`: efficiency models read off measurements; :mod:`.limits`: the physical range
  of every figure; :mod:`.accuracy`: how far estimates have been from published measurements.

System profiles (a chip and the network that joins many) are read by :mod:`mhlo_cost.network.systems`.
"""
