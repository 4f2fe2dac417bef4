"""Recorders: what a walk keeps beside its rows (liveness frames, data flow), each in its own room with its own
state, composed by the caller (``IRVisitor(module, entry, recorders=[...])``) rather than inherited.

The walk (:class:`mhlo_cost.walk.base.IRVisitor`) tells every recorder what it does, through the methods of
:class:`Recorder` (each a no-op here); a recorder reads the walk only through its public face (``walk.out``,
``walk.functions``, ``walk.is_argument``, ``walk.nbytes``, ``walk.rows``), never another recorder's state.
A new recorder is declared in one place, its class: ``class Tally(Recorder, record="tally")``. The declaration
is the options flag (``AnalysisOptions(records=("tally",))``), the composition (:func:`recorders_for`: the walk
of :func:`mhlo_cost.analysis.analyze` gets one, made by :meth:`Recorder.for_options`, where the options ask
for it) and the analysis' record (what :meth:`Recorder.record` returns is ``Analysis.record("tally")``, None
where not asked for). The built-in recorders are listed in one place, :data:`mhlo_cost.walk.registry.RECORDERS`
(:func:`mhlo_cost.walk.registry.recorders` gives them and every other declared one); ``fields`` names the typed
:class:`~mhlo_cost.analysis.Analysis` attributes a built-in record fills instead.
"""
from __future__ import annotations

from .row import short_name

#: The region ops: their rows come from sub-walks (a callee, a loop's body, the branch taken, a shard_map body).
REGION_OPS = ("call", "while", "case", "if", "manual_computation", "composite", "async_start")
#: Ops of other dialects whose rule is a region op's (:mod:`mhlo_cost.walk.control`).
_OTHER_DIALECTS = {"func.call": "call", "sdy.manual_computation": "manual_computation", "scf.if": "if",
                   "affine.if": "if", "scf.index_switch": "case"}
_SHARED = ("stablehlo.", "mhlo.", "chlo.")
#: The ops recorders are told of as they begin and end: the region ops, and an async pair's done.
WATCHED = REGION_OPS + ("async_done",)


def region_kind(op_name: str) -> str | None:
    """The watched op an op's rule runs (``func.call`` -> ``call``, ``scf.index_switch`` -> ``case``), else None."""
    if op_name.startswith(_SHARED):
        name = short_name(op_name)
        return name if name in WATCHED else None
    return _OTHER_DIALECTS.get(op_name)


def told(walk, kind: str, rule):
    """``rule`` (a bound visit method of ``walk``) with ``walk``'s recorders told where its op begins and ends."""
    recorders = walk.recorders

    def visit(op):
        start = len(walk.out)
        tokens = [r.region_started(kind, op) for r in recorders]
        rule(op)
        for r, t in zip(recorders, tokens):
            r.region_finished(kind, op, t, start)
    return visit


#: record name -> the :class:`Recorder` class declared for it, in the order the walk tells them.
DECLARED: dict[str, type] = {}


def recorders_for(options, known: dict[str, type] = DECLARED) -> list:
    """A fresh recorder of every declared record (``known``) that ``options`` (an AnalysisOptions) asks for."""
    asked = options.asked
    unknown = sorted(asked - set(known))
    if unknown:
        raise ValueError(f"no recorder is declared for {', '.join(unknown)} (declared: {', '.join(known)})")
    return [cls.for_options(options) for name, cls in known.items() if name in asked]


class Recorder:
    """The walk's notices; override those a record needs. ``op`` is an MLIR operation, ``rows`` a list of rows.

    A subclass made with ``record="name"`` (and, for a built-in one, ``fields=(...)``: the Analysis attributes
    :meth:`record` fills, a tuple of that many values where several) is declared: see the module's text."""

    #: Whether :meth:`emitted` is wanted (it runs for every row: the walk skips it for recorders without it).
    wants_rows = False
    #: The record's name (the options ask for it by this name), None for a recorder composed by hand.
    name: str | None = None
    #: The typed Analysis attributes the record fills; () keeps it in ``Analysis.records`` under :attr:`name`.
    fields: tuple = ()

    def __init_subclass__(cls, record: str | None = None, fields: tuple = (), **kw):
        super().__init_subclass__(**kw)
        if record is None:
            return
        before = DECLARED.get(record)
        if before is not None and (before.__module__, before.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(f"record {record!r} is declared twice: {before.__qualname__} and {cls.__qualname__}")
        cls.name, cls.fields = record, tuple(fields)
        DECLARED[record] = cls

    @classmethod
    def for_options(cls, options) -> "Recorder":
        """The recorder a walk under ``options`` (an AnalysisOptions) uses."""
        return cls()

    def record(self) -> object:
        """What the walk recorded, read once it is done (inside the module's context)."""
        return None

    def started(self, walk) -> None:
        """Before the walk, its entry chosen."""

    def finished(self, walk) -> None:
        """After the walk; ``walk.rows`` are final."""

    def emitted(self, op, row) -> None:
        """A row was made for ``op`` (with :attr:`wants_rows`)."""

    def function_started(self, name: str) -> None:
        """The body of function ``name`` is walked for the first time (its rows are built once)."""

    def function_finished(self, name: str, rows) -> None:
        """... and gave ``rows`` (also where the walk failed: then ``rows`` is None)."""

    def collect_started(self) -> None:
        """A sub-walk (a loop's body, a branch) begins with a fresh output list."""

    def collect_finished(self, rows) -> None:
        """... and gave ``rows`` (None where it failed)."""

    def replayed(self, rows, k: int, start: int) -> None:
        """``rows`` were replayed ``k`` times (k > 0) into ``walk.out`` from position ``start``."""

    def folded(self, rows, k: int, at: int) -> None:
        """``k`` more executions of ``rows`` were added to the row set at ``at`` of ``walk.out``."""

    def returned(self, op) -> None:
        """A terminator (``return``) at the current end of ``walk.out``."""

    def contained(self, op) -> None:
        """An op without a rule of its own was visited (a container whose body ran inline, or an unknown op)."""

    def region_started(self, kind: str, op) -> object:
        """Op ``op`` (``kind``: one of :data:`WATCHED`) begins; what this returns comes back at its end."""

    def region_finished(self, kind: str, op, token, start: int) -> None:
        """... and ended; its rows are ``walk.out[start:]``."""


class RowFactRecorder(Recorder):
    """A recorder of one fact per row (:meth:`fact`: a tuple, or None for a row without one), read back per row
    index; rows a call, loop or branch replays get their original's fact."""

    wants_rows = True

    def __init__(self):
        self._walk = None
        self._facts: dict[int, tuple] = {}
        self._keep: list = []  # keeps every row with a fact alive, so that id() stays unique
        self._record: dict[int, tuple] = {}

    def fact(self, op, row) -> tuple | None:
        """The fact of ``row`` (made from ``op``), or None."""
        raise NotImplementedError

    def started(self, walk):
        self._walk = walk

    def emitted(self, op, row) -> None:
        fact = self.fact(op, row)
        if fact is not None:
            self._facts[id(row)] = fact
            self._keep.append(row)

    def replayed(self, rows, k, start) -> None:
        facts = self._facts
        for o, n in zip(rows, self._walk.out[start:]):
            f = facts.get(id(o))
            if f is not None:
                facts[id(n)] = f
                self._keep.append(n)

    def finished(self, walk) -> None:
        facts = self._facts
        self._record = {i: facts[id(r)] for i, r in enumerate(walk.rows) if id(r) in facts}

    def record(self) -> dict[int, tuple]:
        return self._record
