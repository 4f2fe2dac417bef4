"""A program's memory: live bytes per row, the peak and where it is, arguments, parameters and outputs."""
from __future__ import annotations

import gc
from dataclasses import dataclass

from .sweep import Sweep

#: Summary keys, in order.
MEMORY_KEYS = ("peak_bytes", "argument_bytes", "param_bytes", "input_bytes", "output_bytes")


@dataclass
class MemoryProfile:
    """Per row (program order): ``during`` (live bytes while the op runs: everything live before it plus its
    results) and ``after`` (``live_bytes``: once the values it read for the last time are freed). Exact ints."""

    during: list[int]
    after: list[int]
    peak_bytes: int
    peak_row: int | None  # the row at which the peak is first reached; None: before the first op
    argument_bytes: int
    param_bytes: int
    output_bytes: int
    fused: bool = False

    @property
    def input_bytes(self) -> int:
        """Arguments that are not parameters (activations, the inputs of the program)."""
        return self.argument_bytes - self.param_bytes

    def summary(self, suffix: str = "") -> dict[str, int]:
        return {k + suffix: getattr(self, k) for k in MEMORY_KEYS}


def profile(analysis, kernels: list | None = None) -> MemoryProfile:
    """The memory profile of ``analysis`` (made by :func:`mhlo_cost.analyze`); ``kernels`` (each row's fused
    kernel id or None, :attr:`mhlo_cost.roofline.Fusion.row_kernel`) gives the fused estimate."""
    rec = analysis.liveness
    if rec is None:
        raise ValueError("this analysis carries no liveness record")
    n = len(analysis.rows)
    sw = Sweep(rec, n, kernels)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the sweep allocates and frees nothing cyclic: rescanning the rows' heap is wasted time
    try:
        peak = sw.run()
    finally:
        if gc_was_enabled:
            gc.enable()
    peak_row = None
    if n:
        top = max(sw.during)
        if top >= peak:
            peak, peak_row = top, sw.during.index(top)
    args = {k: sw.size(k, b) for k, b, _ in rec.args}
    params = parameters(sw, set(args))
    return MemoryProfile(sw.during, sw.after, peak, peak_row, sum(args.values()),
                         sum(args[k] for k in params), sum(sw.outputs), kernels is not None)


def parameters(sw: Sweep, args: set) -> set:
    """The arguments read as weights: the right-hand operand of a dot or the kernel of a convolution, followed
    back through reshapes, transposes, converts, slices and gathers, and across calls, loops and ``shard_map``
    into the arguments they stand for."""
    found, seen, todo = set(), set(), list(sw.weights)
    while todo:
        k = todo.pop()
        if k in seen:
            continue
        seen.add(k)
        if k in args:
            found.add(k)
        for m in (sw.src, sw.alias):
            if k in m:
                todo.append(m[k])
        todo.extend(sw.passed.get(k, ()))
    return found
