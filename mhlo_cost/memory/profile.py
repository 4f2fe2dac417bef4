"""A program's memory: live bytes per row, the peak and where it is, arguments, parameters and outputs."""
from __future__ import annotations

from operator import is_
from dataclasses import dataclass, field

from ..files import collector
from .params import first_readers, parameters
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
    params: int = 0  # elements of the parameters (:mod:`.params`), as the frameworks count them
    param_rows: dict = field(default_factory=dict)  # row position -> elements of the parameters first read there
    execution: str = "unfused"  # the execution model it describes: unfused, compiled (fused kernels), eager
    param_row_bytes: dict = field(default_factory=dict)  # row position -> bytes of the parameters first read there

    @property
    def input_bytes(self) -> int:
        """Arguments that are not parameters (activations, the inputs of the program)."""
        return self.argument_bytes - self.param_bytes

    def summary(self, suffix: str = "") -> dict[str, int]:
        return {k + suffix: getattr(self, k) for k in MEMORY_KEYS}


def profile(analysis, kernels: list | None = None, eager: bool = False) -> MemoryProfile:
    """The memory profile of ``analysis`` (made by :func:`mhlo_cost.analyze`); ``kernels`` (each row's fused
    kernel id or None, :attr:`mhlo_cost.roofline.Fusion.row_kernel`) gives the fused estimate; with ``eager`` the
    eager one (kernels are framework calls; views share storage)."""
    rec = analysis.liveness
    if rec is None:
        raise ValueError("this analysis carries no liveness record")
    n = len(analysis.rows)
    hold = None
    if eager and analysis.producers is not None:
        from .eager_hold import holds

        hold = holds(analysis.rows, analysis.producers)
    sw = Sweep(rec, n, kernels, eager, hold)
    with collector.paused():  # the sweep allocates and frees nothing cyclic: rescanning the rows' heap is wasted time
        peak = sw.run()
    peak_row = None
    if n:
        top = max(sw.during)
        if top >= peak:
            peak, peak_row = top, sw.during.index(top)
    args = {k: sw.size(k, b) for k, b, _ in rec.args}
    params = parameters(sw, rec, set(args))
    elems = dict(zip((k for k, _, _ in rec.args), rec.arg_elems))
    rows: dict[int, int] = {}
    row_bytes: dict[int, int] = {}
    for k, i in first_readers(sw, _table_rows(analysis.rows, rec), params, rec.entry).items():
        rows[i] = rows.get(i, 0) + elems.get(k, 0)
        row_bytes[i] = row_bytes.get(i, 0) + args[k]
    return MemoryProfile(sw.during, sw.after, peak, peak_row, sum(args.values()),
                         sum(args[k] for k in params), sum(sw.outputs), kernels is not None,
                         sum(elems.get(k, 0) for k in params), rows,
                         "eager" if eager else "compiled" if kernels is not None else "unfused", row_bytes)


def _table_rows(rows: list, rec) -> list:
    """``rows``, or the entry frame's list of the same rows (what they read is known already where the sweep
    read it)."""
    entry = rec.entry.rows if rec.entry is not None else None
    if entry is not None and entry is not rows and len(entry) == len(rows) and all(map(is_, entry, rows)):
        return entry
    return rows
