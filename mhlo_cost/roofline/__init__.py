"""Roofline latency: counted costs turned into time on a hardware profile, per op, per kernel, per block.

* :mod:`.optime`: the time of one op row (compute, memory, overhead, communication; its bound);
* :mod:`.fusion`: rows grouped into fused kernels from the data flow (``--fuse elementwise``);
  :mod:`.kernel_io`: what one kernel reads, writes and costs;
* :mod:`.eager`: one kernel per framework op, as PyTorch eager runs it (``--execution eager``);
* :mod:`.attention`: dot -> softmax -> dot found in the data flow, one kernel (``--attention fused``);
* :mod:`.calibrate`: microbenchmarks on the local JAX device, written as a profile (``mhlo-cost calibrate``);
* :mod:`.estimate`: :class:`Roofline`, a program's totals, its disassembly table and its blocks.

The data flow the fusion reads comes from :func:`mhlo_cost.analysis.analyze` with
``AnalysisOptions(dataflow=True)``.
"""
from .eager import SDPA_BACKENDS, eager
from .estimate import EXECUTIONS, Roofline, execution_of, hardware_from_args
from .fusion import ATTENTION_MODES, FUSE_MODES, Fusion, Kernel, fuse
from .optime import BOUNDS, NO_KERNEL, OpTime, is_no_kernel, op_time

__all__ = [
    "ATTENTION_MODES", "BOUNDS", "EXECUTIONS", "SDPA_BACKENDS", "eager", "execution_of", "FUSE_MODES", "Fusion", "Kernel", "NO_KERNEL", "OpTime", "Roofline",
    "fuse", "hardware_from_args", "is_no_kernel", "op_time",
]
