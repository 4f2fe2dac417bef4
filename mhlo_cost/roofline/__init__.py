"""Roofline latency: counted costs turned into time on a hardware profile, per op, per kernel, per block.

* :mod:`.optime`: the time of one op row (compute, memory, overhead, communication; its bound);
* :mod:`.fusion`: rows grouped into fused kernels from the data flow (``--fuse elementwise``);
  :mod:`.kernel_io`: what one kernel reads, writes and costs;
* :mod:`.eager`: one kernel per framework op, as PyTorch eager runs it (``--execution eager``; its function is
  :func:`.eager.eager`);
* :mod:`.inductor`: the kernels torch.compile's Inductor makes (``--execution inductor``; ``--cudagraphs``), and
  :mod:`.gain`: the compile gain over eager (eager time / Inductor time, per program and per block);
* :mod:`.attention`: dot -> softmax -> dot found in the data flow, one kernel (``--attention fused``);
  :mod:`.attention_backward`: the backward kernel of each in a training program; :mod:`.attention_compute`: the
  compute time of one such kernel;
* :mod:`.calibrate`: microbenchmarks on the local JAX device, written as a profile (``mhlo-cost calibrate``);
* :mod:`.estimate`: :class:`Roofline`, a program's totals, its disassembly table and its blocks (the block table:
  :mod:`.block_frame`).

The data flow the fusion reads comes from :func:`mhlo_cost.analysis.analyze` with
``AnalysisOptions(dataflow=True)``.
"""
from __future__ import annotations

#: name -> the module of this package that defines it, imported on first use (PEP 562): a view that needs only
#: :mod:`.memory` (the reader's child rendering a summary) imports neither the estimate nor pandas.
_NAMES = {"SDPA_BACKENDS": "eager", "EXECUTIONS": "estimate", "Roofline": "estimate", "execution_of": "estimate",
          "hardware_from_args": "estimate", "ATTENTION_MODES": "fusion", "FUSE_MODES": "fusion", "Fusion": "fusion",
          "Kernel": "fusion", "fuse": "program", "BOUNDS": "optime", "NO_KERNEL": "optime", "OpTime": "optime",
          "is_no_kernel": "optime", "op_time": "optime"}

__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name in _NAMES:
        import importlib

        value = getattr(importlib.import_module(f".{_NAMES[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
