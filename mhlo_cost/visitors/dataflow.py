"""Data flow over the walk: which rows produce each row's operands (for fusion, memory and overlap), and
where each async collective's done is written (for overlap)."""
from __future__ import annotations

from .base import Row
from .cost import CostVisitor


class DataflowVisitor(CostVisitor):
    """:class:`CostVisitor` that also records, per row, the source of each operand: the producing row, a
    function argument (``("arg", id)``) or None (a loop-carried block argument, a call result it cannot
    follow). Rows replayed by calls, loops and branches get their sources remapped to the copies.

    With ``see_through_barriers`` (a training step's walk: ``AnalysisOptions.phases``), the i-th result of an
    ``optimization_barrier`` comes from its i-th operand's producer (``jax.checkpoint`` passes a block's inputs
    through one before recomputing it)."""

    see_through_barriers = False

    def __init__(self, module, entry=None):
        super().__init__(module, entry)
        self._def: dict[int, Row] = {}
        self._src: dict[int, tuple] = {}
        self._keep: list[Row] = []  # keeps every row alive so that id() stays unique
        self._arg_map: dict | None = None
        self._last_map: dict[int, Row] = {}
        self._async: dict[int, tuple] = {}  # hash of an async_start's result -> (its rows, callee)
        self._done_after: dict[int, Row] = {}  # id of an async collective row -> the last row before its done
        self._df_alias: dict[int, object] = {}  # a region's block argument -> the source of what it stands for

    def _source(self, v):
        h = hash(v)
        p = self._def.get(h)
        if p is not None:
            return p
        if h in self._args:
            return ("arg", h)
        return self._df_alias.get(h)

    def _record(self, op, row: Row) -> Row:
        self._src[id(row)] = tuple(self._source(v) for v in op.operands)
        for res in op.results:
            self._def[hash(res)] = row
        self._keep.append(row)
        if self.see_through_barriers and op.name.endswith(".optimization_barrier"):
            for res, v in zip(op.results, op.operands):
                src = self._source(v)
                if src is not None:
                    self._def[hash(res)] = src
        return row

    def emit(self, op, kind, target="", weights=False):
        return self._record(op, super().emit(op, kind, target, weights))

    def emit_same_type(self, op, kind):
        return self._record(op, super().emit_same_type(op, kind))

    def emit_no_operands(self, op, kind):
        return self._record(op, super().emit_no_operands(op, kind))

    def replay(self, rows, k, scope="", note=""):
        if k == 0:
            return
        start = len(self._out)
        super().replay(rows, k, scope, note)
        new = self._out[start:]
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

    def fold(self, rows, k, at):
        """A call folded into an earlier call's rows: its results come from those rows."""
        super().fold(rows, k, at)
        self._last_map = {id(o): n for o, n in zip(rows, self._out[at:at + len(rows)])}

    def visit_call(self, op):
        from jaxlib.mlir import ir

        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        fn = self.functions.get(callee)
        saved = self._arg_map
        if fn is not None:
            args = fn.regions[0].blocks[0].arguments
            self._arg_map = {hash(a): self._source(v) for a, v in zip(args, op.operands)}
        self._last_map = {}
        try:
            super().visit_call(op)
        finally:
            self._arg_map = saved
        if fn is None:
            return
        ops = list(fn.regions[0].blocks[0].operations)
        if not ops:
            return
        ret = ops[-1].operation
        for res, rv in zip(op.results, ret.operands):
            p = self._def.get(hash(rv))
            q = self._last_map.get(id(p)) if p is not None else None
            if q is not None:
                self._def[hash(res)] = q

    def visit_manual_computation(self, op):
        """A shard_map body: its block arguments are the op's operands, its results what it returns."""
        block = op.regions[0].blocks[0] if len(op.regions) and len(op.regions[0].blocks) else None
        if block is not None:
            for a, v in zip(block.arguments, op.operands):
                self._df_alias[hash(a)] = self._source(v)
        self._last_map = {}
        super().visit_manual_computation(op)
        ops = list(block.operations) if block is not None else []
        if ops:
            for res, rv in zip(op.results, ops[-1].operation.operands):
                p = self._def.get(hash(rv))
                q = self._last_map.get(id(p)) if p is not None else None
                if q is not None:
                    self._def[hash(res)] = q

    def visit_async_start(self, op):
        """The async computation's rows, with its arguments mapped to the start's operands."""
        from jaxlib.mlir import ir

        if "called_computation" not in op.attributes:
            return super().visit_async_start(op)
        fn = self.functions.get(ir.FlatSymbolRefAttr(op.attributes["called_computation"]).value)
        saved, start = self._arg_map, len(self._out)
        if fn is not None:
            args = fn.regions[0].blocks[0].arguments
            self._arg_map = {hash(a): self._source(v) for a, v in zip(args, op.operands)}
        try:
            super().visit_async_start(op)
        finally:
            self._arg_map = saved
        for res in op.results:
            self._async[hash(res)] = (self._out[start:], fn, self._last_map)

    def visit_async_done(self, op):
        """The done's results come from the async computation; its collectives end here."""
        for v in op.operands:
            found = self._async.get(hash(v))
            if found is None:
                continue
            rows, fn, m = found
            last = self._out[-1] if self._out else None
            for r in rows:
                if r.kind == "collective" and last is not None:
                    self._done_after[id(r)] = last
            ops = list(fn.regions[0].blocks[0].operations) if fn is not None else []
            if ops:
                for res, rv in zip(op.results, ops[-1].operation.operands):
                    p = self._def.get(hash(rv))
                    q = m.get(id(p)) if p is not None else None
                    if q is not None:
                        self._def[hash(res)] = q

    def async_done(self) -> dict[int, int]:
        """Per async collective (final row index): the index of the last row written before its done."""
        index = {id(r): i for i, r in enumerate(self.rows)}
        out = {}
        for r in self.rows:
            d = self._done_after.get(id(r))
            if d is not None and id(d) in index:
                out[r.index] = index[id(d)]
        return out

    def producers(self) -> list[tuple]:
        """Per final row: a source key per operand, the producing row's index, ``"argN"`` or None."""
        index = {id(r): i for i, r in enumerate(self.rows)}
        out = []
        for r in self.rows:
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
