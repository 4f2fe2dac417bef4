"""``analyze()``: load, walk once, and hold the op table with its summary and groupings."""
from __future__ import annotations

import contextlib
import functools
import os
import sys
from dataclasses import dataclass, field, replace
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING

from ..files import collector
from ..ir.loader import LoadError, Loaded, load
from .series import int_series
from ..walk.options import AnalysisOptions
from ..walk.row import METRICS, AnalysisError, Row

if TYPE_CHECKING:
    import pandas as pd

    from .collectors.phases import Phases
    from ..walk.arguments import Argument
    from ..walk.frames import Recording

#: Columns of the op table, in order.
COLUMNS = (
    "index", "op", "kind", "scope", "location", "shape", "dtype",
    "gemm_flops", "conv_flops", "vector_flops", "transcendentals", "bytes_read", "bytes_written",
    "multiplicity", "comm_kind", "group_size", "num_groups", "comm_bytes", "comm_steps",
    "target", "note", "operand_shapes", "weight_operands", "func",
)
#: Integer columns summed when rows are grouped.
SUM_COLUMNS = METRICS
SUMMARY_KEYS = SUM_COLUMNS + ("ops", "unknown_ops", "comm_ops")


@dataclass
class Analysis:
    """What :func:`analyze` recorded. Every part the options may ask for is here; one they did not ask for is
    None (``options`` says which were asked for)."""

    rows: list[Row]
    source: str
    entry: str
    warnings: list[str] = field(default_factory=list)
    _ops: pd.DataFrame | None = None
    liveness: Recording | None = None  # the walk's liveness record (options.liveness)
    _memory: object = None
    options: AnalysisOptions = AnalysisOptions()
    #: Per row, the source of each operand: the producing row's index (int), a function argument (``"argN"``
    #: str), or None where unknown (options.dataflow).
    producers: list | None = None
    async_done: dict | None = None  # async collective row -> last row before its done (options.dataflow)
    arguments: list[Argument] | None = None  # the entry function's arguments (options.arguments)
    _phases: Phases | None = None
    #: The records of the other declared recorders the options asked for, by name (:meth:`record`).
    records: dict = field(default_factory=dict)

    def record(self, name: str) -> object:
        """The record of the declared recorder ``name`` (:mod:`mhlo_cost.walk.recorder`), None where the
        options did not ask for it; a name no recorder declares is a ValueError (a built-in record is read
        from its attribute: ``liveness``, ``producers``...)."""
        cls = declared().get(name)
        if cls is None:
            raise ValueError(f"no recorder is declared for {name!r}")
        if cls.fields:
            raise ValueError(f"the {name} record is Analysis.{', Analysis.'.join(cls.fields)}")
        return self.records.get(name)

    @property
    def param_args(self) -> set | None:
        """Data-flow keys of the donated arguments (None where nothing is donated, or the arguments were not
        recorded: any may be one)."""
        keys = {a.key for a in self.arguments or () if a.donated}
        return keys or None

    @property
    def phases(self) -> Phases | None:
        """A training step's phase of every row (:mod:`mhlo_cost.analysis.collectors.phases`; options.phases), else None."""
        if self._phases is None and self.options.phases:
            from .collectors.phases import assign_phases

            self._phases = assign_phases(self)
        return self._phases

    # -- the op table -----------------------------------------------------------------------------------
    @property
    def ops(self) -> pd.DataFrame:
        """One row per op occurrence; metric columns are totals over the op's multiplicity."""
        if self._ops is None:
            import pandas as pd

            data = {}
            for c in COLUMNS:
                vals = [getattr(r, c) for r in self.rows]
                data[c] = int_series(vals) if c in SUM_COLUMNS or c in (
                    "index", "multiplicity", "group_size", "num_groups", "comm_steps") else vals
            if self.liveness is not None:
                data["live_bytes"] = int_series(self.memory.after)
            self._ops = pd.DataFrame(data)
        return self._ops

    @property
    def memory(self):
        """Live bytes per row, the peak, arguments, parameters, outputs (:class:`mhlo_cost.memory.MemoryProfile`)."""
        if self._memory is None:
            from ..memory.profile import profile

            pending = self.__dict__.pop("_memory_alongside", None)  # computing in a fork (isolated.answer)
            self._memory = pending.result() if pending is not None else None
            if self._memory is not None:
                return self._memory
            with deep_recursion():  # the sweep follows call frames as deep as the walk did
                try:
                    self._memory = profile(self)
                except RecursionError:
                    raise AnalysisError(f"{self.source}: calls nested too deeply for the memory sweep") from None
        return self._memory

    @property
    def summary(self) -> dict[str, int]:
        """Whole-program totals as exact Python integers: the counts, the memory figures, ``macs`` (multiply-adds
        of the matrix products and convolutions: half their FLOPs) and ``params`` (elements of the parameter
        arguments, biases, norms and embeddings included: :mod:`mhlo_cost.memory.params`)."""
        memo = self.__dict__.get("_summary_memo")  # computed once per report (its views all read it)
        if memo is None or memo[0] != self._summary_key():
            s = self._summary()
            memo = self.__dict__["_summary_memo"] = (self._summary_key(), s)
        return dict(memo[1])

    def _summary_key(self) -> tuple:
        """What the summary was computed from: another row list (or one grown), liveness or memory recomputes it."""
        return id(self.rows), len(self.rows), id(self.liveness), id(self._memory)

    def _summary(self) -> dict[str, int]:
        rows = self.rows
        # One metric at a time, by item: no object the cyclic collector tracks is made per row (``zip(*costs)``
        # made an iterator per row, and on a large program that alone set off a full collection of the heap the
        # walk left: 0.37 s at 10^5 ops).
        costs = [r.cost for r in rows]
        s = {k: sum(map(itemgetter(i), costs)) for i, k in enumerate(SUM_COLUMNS)}
        s["ops"] = sum(map(attrgetter("multiplicity"), rows))
        s["unknown_ops"] = s["comm_ops"] = 0
        for r in rows:  # one pass for the two kinds counted apart (most programs have neither)
            if r.kind == "unknown":
                s["unknown_ops"] += r.multiplicity
            elif r.kind == "collective":
                s["comm_ops"] += r.multiplicity
        if self.liveness is not None:
            s.update(self.memory.summary())
        s["macs"] = (s["gemm_flops"] + s["conv_flops"]) // 2
        if self.liveness is not None:
            s["params"] = self.memory.params
        return with_precisions(s, rows)

    @property
    def unknown(self) -> list[str]:
        """Names (targets) of the ops no rule knows, each once, in program order."""
        seen: dict[str, None] = {}
        for r in self.rows:
            if r.kind == "unknown":
                seen.setdefault(r.target or r.op, None)
        return list(seen)

    # -- groupings ----------------------------------------------------------------------------------------
    def group(self, by: str = "kind", depth: int | None = None) -> pd.DataFrame:
        """Sum the metric columns by ``op``, ``kind`` or ``scope`` (cut to ``depth`` segments).

        Rows come in order of first appearance in the program for ``scope``, by FLOPs (largest first)
        otherwise. Every grouping's columns add up to :attr:`summary`.
        """
        keys = self.keys(by, depth)
        return group_rows(self.rows, keys, order="program" if by == "scope" else "flops", label=by)

    def keys(self, by: str, depth: int | None = None) -> list[str]:
        """The group key of every row for :meth:`group`."""
        if by == "op":
            return [r.op for r in self.rows]
        if by == "kind":
            return [r.kind for r in self.rows]
        if by == "scope":
            if depth is None:
                return [r.scope or "(top)" for r in self.rows]
            return ["/".join(r.scope.split("/")[:depth]) or "(top)" for r in self.rows]
        raise ValueError(f"cannot group by {by!r}: choose op, kind or scope")


#: Low-precision classes of a matrix product's operands, reported apart (``gemm_flops_fp8``, ...).
LOW_PRECISIONS = ("fp8", "fp6", "fp4", "int8", "int4")


@functools.lru_cache(maxsize=256)  # a program has a handful of element types and thousands of dots
def element_precision(dtype: str) -> str | None:
    """The low-precision class of an MLIR element type (``f8E4M3FN`` -> fp8, ``ui4`` -> int4); None for the
    others (bf16, f16, f32, wider integers...)."""
    d = dtype.lower()
    for prefix, cls in (("f8e", "fp8"), ("f6e", "fp6"), ("f4e", "fp4")):  # f8E4M3FN, f6E2M3FN, f4E2M1FN: not f64
        if d.startswith(prefix):
            return cls
    bits = d.removeprefix("ui").removeprefix("si").removeprefix("i") if d.startswith(("i", "ui", "si")) else ""
    return {"8": "int8", "4": "int4", "2": "int4"}.get(bits)


def dot_precision(r: Row) -> str | None:
    """The precision a dot runs in when both operands are low-precision (the wider of the two classes, in the
    order of :data:`LOW_PRECISIONS`); None for a dot in a classical dtype (a bf16 x fp8 dot is upcast: None)."""
    if r.kind != "dot" or not r.gemm_flops:
        return None
    classes = [element_precision(t.dtype) for t in r.operands[:2]]
    if not classes or None in classes:
        return None
    return min(classes, key=LOW_PRECISIONS.index)


def precision_flops(rows) -> dict[str, int]:
    """``gemm_flops_<precision>`` of the rows' low-precision dots, for each precision that has any (exact ints):
    the part of ``gemm_flops`` that runs in fp8, fp4, int8, ..."""
    out: dict[str, int] = {}
    for r in rows:
        if r.kind != "dot":  # (dot_precision's own first test, made here: no call for the other rows)
            continue
        p = dot_precision(r)
        if p is not None:
            out[f"gemm_flops_{p}"] = out.get(f"gemm_flops_{p}", 0) + r.gemm_flops
    return {k: out[k] for k in sorted(out, key=lambda k: LOW_PRECISIONS.index(k.rsplit("_", 1)[1]))}


def with_precisions(summary: dict, rows) -> dict:
    """``summary`` with the low-precision parts of ``gemm_flops`` just after it (none added for a program whose
    dots are all in classical dtypes: its summary is unchanged)."""
    extra = precision_flops(rows)
    if not extra:
        return summary
    out = {}
    for k, v in summary.items():
        out[k] = v
        if k == "gemm_flops":
            out.update(extra)
    return out


def group_rows(rows: list[Row], keys: list[str], order: str = "program", label: str = "group") -> pd.DataFrame:
    import pandas as pd

    sums: dict[str, list[int]] = {}
    counts: dict[str, int] = {}
    for r, k in zip(rows, keys):
        acc = sums.get(k)
        if acc is None:
            acc = sums[k] = [0] * len(SUM_COLUMNS)
            counts[k] = 0
        for i, c in enumerate(SUM_COLUMNS):
            acc[i] += getattr(r, c)
        counts[k] += r.multiplicity
    names = list(sums)
    if order == "flops":
        names.sort(key=lambda k: (-(sums[k][0] + sums[k][1] + sums[k][2]), -sums[k][5] - sums[k][4], k))
    data = {label: names}
    for i, c in enumerate(SUM_COLUMNS):
        data[c] = int_series([sums[k][i] for k in names])
    data["ops"] = int_series([counts[k] for k in names])
    return pd.DataFrame(data)


def analyze(source: str | bytes | os.PathLike | Loaded, options: AnalysisOptions | None = None, *,
            entry: str | None = None, conv_padding: str | None = None) -> Analysis:
    """Analyse MLIR given as a path, text, bytes, or an already :func:`~mhlo_cost.ir.loader.load`-ed module,
    recording what ``options`` (:class:`~mhlo_cost.walk.options.AnalysisOptions`) ask for. ``entry`` and
    ``conv_padding`` override the options' (``conv_padding="dense"`` counts a convolution's padded positions
    too, PyTorch's convention).

    Raises :class:`~mhlo_cost.ir.loader.LoadError` for input that is not MLIR and
    :class:`~mhlo_cost.walk.base.AnalysisError` for IR that cannot be counted.
    """
    options = options or AnalysisOptions()
    if entry is not None or conv_padding is not None:
        options = replace(options, entry=options.entry if entry is None else entry,
                          conv_padding=options.conv_padding if conv_padding is None else conv_padding)
    from ..walk.base import IRVisitor
    from ..walk.recorder import recorders_for

    recorders = recorders_for(options, declared())  # the declared recorders the options ask for
    found: dict = {"records": {}}

    def make(module, entry):
        return IRVisitor(module, entry, recorders=recorders, options=options)  # every rule (walk.registry)

    def after(v):  # each record to its typed attribute(s), or to ``records`` under its name
        for r in recorders:
            value = r.record()
            if not r.fields:
                found["records"][r.name] = value
            else:
                found.update(zip(r.fields, value if len(r.fields) > 1 else (value,)))

    loaded, visitor = walk(source, make, options.entry, after=after)
    return Analysis(visitor.rows, loaded.name, visitor.entry, visitor.warnings, options=options, **found)


def declared() -> dict[str, type]:
    """Every declared recorder by record name: the built-in ones (:func:`mhlo_cost.walk.registry.recorders` lists
    them) and any other declared by its class statement."""
    from ..walk.registry import recorders

    return recorders()


def analyze_dataflow(source, entry: str | None = None, conv_padding: str = "xla") -> Analysis:
    """Deprecated (removed in 0.3.0): ``analyze(source, AnalysisOptions(dataflow=True))``."""
    deprecated("mhlo_cost.analysis.analyze_dataflow(source)", "analyze(source, AnalysisOptions(dataflow=True))")
    return analyze(source, AnalysisOptions(entry, conv_padding, dataflow=True))


def deprecated(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn (DeprecationWarning) that ``old`` goes in mhlo-cost 0.3.0 and ``new`` is its replacement."""
    import warnings

    warnings.warn(f"{old} is deprecated and goes in mhlo-cost 0.3.0: use {new}", DeprecationWarning,
                  stacklevel=stacklevel)


#: Python frames the walk may use: each level of func.call or region nesting takes about six (3,312 levels fit
#: in 20,000, measured). From
#: Python 3.11 on, Python-to-Python calls do not grow the C stack, so the limit can be generous.
WALK_RECURSION_LIMIT = 20000 if sys.version_info >= (3, 11) else 4000


@contextlib.contextmanager
def deep_recursion():
    """Python's recursion limit raised to :data:`WALK_RECURSION_LIMIT` meanwhile."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, WALK_RECURSION_LIMIT))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def walk(source, visitor_class, entry: str | None = None, after=None):
    """Load ``source`` if need be and run one walk over it; (loaded, visitor). ``visitor_class(module, entry)``
    makes the visitor (a class, or a factory).

    ``after(visitor)`` runs inside the module's context once the walk is done.
    """
    loaded = source if isinstance(source, Loaded) else load(source)
    # The walk allocates one row per op and frees nothing: the cyclic collector would only rescan the
    # growing heap again and again (that alone doubled the time on 50k ops), so it pauses meanwhile.
    try:
        with collector.paused(), loaded.context, deep_recursion():
            visitor = visitor_class(loaded.module, entry)
            visitor.run()
            if after is not None:
                after(visitor)
    except AnalysisError as e:
        raise AnalysisError(f"{loaded.name}: {e}") from None
    except RecursionError:
        raise AnalysisError(f"{loaded.name}: calls or regions nested too deeply to walk (over about "
                            f"{WALK_RECURSION_LIMIT // 6} levels)") from None
    except RuntimeError as e:
        if "conversion error" not in str(e):
            raise
        raise AnalysisError(f"{loaded.name}: a name or location in the IR is not valid UTF-8") from None
    return loaded, visitor



def __getattr__(name: str):
    """``DataflowAnalysis``: the deprecated name of :class:`Analysis` (one type: what was recorded is in its
    options), with a warning; it goes in 0.3.0."""
    if name == "DataflowAnalysis":
        deprecated("mhlo_cost.analysis.DataflowAnalysis", "mhlo_cost.analysis.Analysis")
        return Analysis
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Analysis", "AnalysisError", "AnalysisOptions", "LoadError", "analyze", "METRICS"]
