"""Data flow over the walk: which rows produce each row's operands (for fusion, memory and overlap), and
where each async collective's done is written (for overlap): :class:`DataflowRecorder`."""
from __future__ import annotations

from jaxlib.mlir import ir

from .recorder import Recorder
from .row import Row


class DataflowRecorder(Recorder, record="dataflow", fields=("producers", "async_done")):
    """Records, per row, the source of each operand: the producing row, a function argument (``("arg", id)``)
    or None (a loop-carried block argument, a call result it cannot follow). Rows replayed by calls, loops and
    branches get their sources remapped to the copies.

    With ``see_through_barriers`` (a training step's walk: ``AnalysisOptions.phases``), the i-th result of an
    ``optimization_barrier`` comes from its i-th operand's producer (``jax.checkpoint`` passes a block's inputs
    through one before recomputing it)."""

    wants_rows = True

    def __init__(self, see_through_barriers: bool = False):
        self.see_through_barriers = see_through_barriers
        self._walk = None
        self._def: dict[int, Row] = {}
        self._src: dict[int, tuple] = {}
        self._keep: list[Row] = []  # keeps every row alive so that id() stays unique
        self._arg_map: dict | None = None
        self._last_map: dict[int, Row] = {}
        self._async: dict[int, tuple] = {}  # hash of an async_start's result -> (its rows, callee)
        self._done_after: dict[int, Row] = {}  # id of an async collective row -> the last row before its done
        self._df_alias: dict[int, object] = {}  # a region's block argument -> the source of what it stands for

    @classmethod
    def for_options(cls, options):
        return cls(see_through_barriers=options.phases)

    def record(self) -> tuple:
        """(:meth:`producers`, :meth:`async_done`): ``Analysis.producers`` and ``.async_done``."""
        return self.producers(), self.async_done()

    def started(self, walk):
        self._walk = walk

    def _source(self, v):
        return self._source_of(hash(v))

    def _source_of(self, h: int):
        p = self._def.get(h)
        if p is not None:
            return p
        if self._walk.is_argument(h):
            return ("arg", h)
        return self._df_alias.get(h)

    def emitted(self, op, row: Row) -> None:
        uses, defs = row.values  # the keys of its operand and result values, read by the walk already
        self._src[id(row)] = tuple(map(self._source_of, uses))
        for h in defs:
            self._def[h] = row
        self._keep.append(row)
        if self.see_through_barriers and op.name.endswith(".optimization_barrier"):
            for res, v in zip(op.results, op.operands):
                src = self._source(v)
                if src is not None:
                    self._def[hash(res)] = src

    def replayed(self, rows, k, start):
        new = self._walk.out[start:]
        m = {id(o): n for o, n in zip(rows, new)}
        amap = self._arg_map
        for o, n in zip(rows, new):
            out = []
            for s in self._src.get(id(o), ()):
                if isinstance(s, Row):
                    s = m.get(id(s), s)
                elif isinstance(s, tuple) and amap is not None and s[1] in amap:
                    s = amap[s[1]]
                out.append(s)
            self._src[id(n)] = tuple(out)
        self._keep.extend(new)
        self._last_map = m
        for o, n in zip(rows, new):
            d = self._done_after.get(id(o))
            if d is not None:
                self._done_after[id(n)] = m.get(id(d), d)

    def folded(self, rows, k, at):
        """A call folded into an earlier call's rows: its results come from those rows."""
        self._last_map = {id(o): n for o, n in zip(rows, self._walk.out[at:at + len(rows)])}

    # -- ops whose results come from a sub-walk ---------------------------------------------------------------
    def region_started(self, kind, op):
        if kind == "call":
            return self._enter(op, "callee")
        if kind == "async_start" and "called_computation" in op.attributes:
            return self._enter(op, "called_computation") + (len(self._walk.out),)
        if kind == "manual_computation":
            block = op.regions[0].blocks[0] if len(op.regions) and len(op.regions[0].blocks) else None
            if block is not None:
                for a, v in zip(block.arguments, op.operands):
                    self._df_alias[hash(a)] = self._source(v)
            self._last_map = {}
            return block
        return None

    def _enter(self, op, attr: str) -> tuple:
        """The callee's arguments mapped to ``op``'s operands; (the map before, the callee)."""
        fn = self._walk.functions.get(ir.FlatSymbolRefAttr(op.attributes[attr]).value)
        saved = self._arg_map
        if fn is not None:
            args = fn.regions[0].blocks[0].arguments
            self._arg_map = {hash(a): self._source(v) for a, v in zip(args, op.operands)}
        if attr == "callee":
            self._last_map = {}
        return saved, fn

    def region_finished(self, kind, op, token, start):
        if kind == "call":
            self._arg_map, fn = token
            if fn is not None:
                self._results(op, fn.regions[0].blocks[0], self._last_map)
        elif kind == "async_start" and token is not None:
            self._arg_map, fn, at = token
            for res in op.results:
                self._async[hash(res)] = (self._walk.out[at:], fn, self._last_map)
        elif kind == "manual_computation" and token is not None:
            self._results(op, token, self._last_map)
        elif kind == "async_done":
            self._done(op)

    def _results(self, op, block, m) -> None:
        """``op``'s results come from the rows (copied through ``m``) that make what ``block`` returns."""
        ops = list(block.operations)
        if not ops:
            return
        for res, rv in zip(op.results, ops[-1].operation.operands):
            p = self._def.get(hash(rv))
            q = m.get(id(p)) if p is not None else None
            if q is not None:
                self._def[hash(res)] = q

    def _done(self, op) -> None:
        """The done's results come from the async computation; its collectives end here."""
        out = self._walk.out
        for v in op.operands:
            found = self._async.get(hash(v))
            if found is None:
                continue
            rows, fn, m = found
            last = out[-1] if out else None
            for r in rows:
                if r.kind == "collective" and last is not None:
                    self._done_after[id(r)] = last
            if fn is not None:
                self._results(op, fn.regions[0].blocks[0], m)

    # -- the record ---------------------------------------------------------------------------------------------
    def async_done(self) -> dict[int, int]:
        """Per async collective (final row index): the index of the last row written before its done."""
        rows = self._walk.rows
        index = {id(r): i for i, r in enumerate(rows)}
        out = {}
        for r in rows:
            d = self._done_after.get(id(r))
            if d is not None and id(d) in index:
                out[r.index] = index[id(d)]
        return out

    def producers(self) -> list[tuple]:
        """Per final row: a source key per operand, the producing row's index, ``"argN"`` or None."""
        rows = self._walk.rows
        index = {id(r): i for i, r in enumerate(rows)}
        out = []
        for r in rows:
            keys = []
            for s in self._src.get(id(r), ()):
                if isinstance(s, Row):
                    keys.append(index.get(id(s)))
                elif isinstance(s, tuple):
                    keys.append(f"arg{s[1]}")
                else:
                    keys.append(None)
            out.append(tuple(keys))
        return out
