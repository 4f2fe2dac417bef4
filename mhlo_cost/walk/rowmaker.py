"""How the walk makes a row: :class:`RowMaker`, mixed into :class:`mhlo_cost.walk.base.IRVisitor`.

A pure rule (:class:`~mhlo_cost.walk.optable.OpRule`) is applied by :meth:`RowMaker.count`; the walk's own rows
(an unknown op, a call without a body, ``arith.constant``) are made by :meth:`RowMaker.emit` (or
``emit_no_operands``). Either way the walk reads
the op's types once, and the row is its identity (op, location, scope, function, values) and a
:class:`~mhlo_cost.walk.costvalue.Cost`. It reads the walk's type and location caches, the arguments of the
function being walked, its output list and recorders' row hooks (all set by ``IRVisitor.__init__``).
"""
from __future__ import annotations

from collections import ChainMap

from jaxlib.mlir import ir

from ..ir.tensorinfo import TensorInfo
from .costvalue import Cost
from .optable import OpContext, OpRule
from .row import AnalysisError, Row


#: comm_kind, group_size, num_groups, comm_steps of a row that is not a collective's.
_NO_COMM = ("", 0, 0, 0)
_new = tuple.__new__


class RowMaker:
    """The row-making half of the walk."""

    def count(self, rule: OpRule, op: ir.Operation, attrs=None) -> Row:
        """The row of ``op`` counted by the pure ``rule`` (:mod:`mhlo_cost.walk.optable`): the walk reads the
        types the rule asks for, gives it an :class:`OpContext` (``attrs``: the op's own attributes unless
        given; with the rule's ``extra`` in front of them), and makes the row from the cost it returns and the
        identity the walk owns."""
        if attrs is None and rule.extra is not None:
            attrs = ChainMap(rule.extra(op), op.attributes)
        return self.count_named(rule, op.name, op, attrs)

    def count_named(self, rule: OpRule, name: str, op: ir.Operation, attrs=None) -> Row:
        """:meth:`count` of an op whose name is known already (the walk dispatches by name: it binds ``rule``
        and ``name`` once per op name, and the op's name is not read from the IR again)."""
        facts = self._facts(op, rule.reads, rule.weights)
        memo = key = None
        if attrs is None and rule.body is None:  # a pure function of the op's name, types and attributes
            memo = self._memo
            result = facts[0]  # (RuleMemo.key, inlined: the walk's hot path)
            key = (rule.fn, name, id(result) if type(result) is TensorInfo else tuple(map(id, result)),
                   tuple(map(id, facts[3])))
            variants = memo.known(key)
            if variants is not None:
                log, out = variants[0]
                if log:  # the rule read attributes: they must find the same on this op
                    out = memo.answer(variants, op)
                if type(out) is Cost:
                    return self._row(op, rule.kind, out, facts, name=name)
                if out is not None:
                    return self._counted(op, rule, name, out, facts)
            attrs = memo.reads(op)
        bodies = tuple(rule.body(r, self.functions) for r in op.regions) if rule.body is not None else ()
        ctx = _new(OpContext, (name, facts[3], facts[0], op.attributes if attrs is None else attrs, self.options,
                               facts[4], facts[1], bodies, self.module_facts))  # OpContext(...), as a tuple is made
        try:
            out = rule.fn(ctx)
        except (ValueError, IndexError, ZeroDivisionError) as e:  # a window too large to count, odd attributes
            raise AnalysisError(f"{name} at {self.loc(op).describe()}: {e}") from None
        if memo is not None:
            memo.keep(key, attrs, out)
        return self._counted(op, rule, name, out, facts)

    def _counted(self, op: ir.Operation, rule: OpRule, name: str, out, facts: tuple) -> Row:
        """The row of ``op`` from its rule's answer ``out`` (a Cost, or a Counted that says more)."""
        if type(out) is Cost:
            return self._row(op, rule.kind, out, facts, name=name)
        if out.warning:
            head, detail = out.warning
            self.warnings.append(f"{head}: {name} at {self.loc(op).describe()}: {detail}")
        row = self._row(op, out.kind or rule.kind, out.cost, facts, out.target, out.comm, name)
        if out.groups:
            row.replica_groups = out.groups
        if out.kind == "unknown":  # an op whose work is unknown claims no weights (a dynamic_conv's padding unread)
            row.weights = ()
        return row

    def emit(self, op: ir.Operation, kind: str, target: str = "") -> Row:
        """Append a row of kind ``kind`` for ``op`` (the walk's own: an unknown op, a call without a body), its
        bytes read and written from its operand and result types."""
        facts = self._facts(op, "operands", False)
        return self._row(op, kind, Cost(bytes_read=facts[4], bytes_written=facts[1]), facts, target)

    def emit_no_operands(self, op: ir.Operation, kind: str) -> Row:
        """:meth:`emit` for an op without operands (``constant``, ``iota``): reads only its result."""
        facts = self._facts(op, "none", False)
        return self._row(op, kind, Cost(bytes_written=facts[1]), facts)

    def _row(self, op: ir.Operation, kind: str, cost: Cost, facts: tuple, target: str = "", comm: tuple = (),
             name: str = "") -> Row:
        loc = self._locations(op.location)
        # Row's fields by position (the walk's hot path; tests/test_walk_fast_paths.py holds the order to the keywords):
        # op, kind, loc, scope, result, cost, multiplicity, note, target, comm_kind, group_size, num_groups,
        # comm_steps, operands, weights, func, index, values.
        row = Row(name or op.name, kind, loc, loc.scope, facts[0], cost, 1, "", target, *(comm or _NO_COMM),
                  facts[3], facts[6], self._func_name, 0, (facts[5], facts[2]))
        self._out.append(row)
        for hook in self._row_hooks:
            hook(op, row)
        return row

    def _facts(self, op: ir.Operation, reads: str, weights: bool) -> tuple:
        """(result type, bytes written, result keys, operand types, bytes read, operand keys, weight operands) of
        ``op``, its operands read as ``reads`` says (:data:`mhlo_cost.walk.optable.READS`). This is the hot
        path of the walk: it runs for every type of every op."""
        types = self._types
        known = self._known_type  # the cache's dict lookup, inlined
        try:
            try:
                r = op.result  # one result, most ops: read without making the list of results
            except ValueError:  # none, or several
                r = None
            if r is not None:
                t = r.type
                result = known(hash(t)) or types(t)
                written = result.nbytes
                h = hash(r)
                defs = (h,)
                self._value_types[h] = result
            else:
                results = op.results
                result = tuple(types(r.type) for r in results)
                written = sum(t.nbytes for t in result)
                defs = tuple(map(hash, results))
                self._value_types.update(zip(defs, result))
            if reads == "none":
                return result, written, defs, (), 0, (), ()
            if reads == "same_type":  # weight operands are not looked for on this path
                uses = tuple(map(hash, op.operands))
                return result, written, defs, (result,) * len(uses), len(uses) * written, uses, ()
            return (result, written, defs) + self._operand_facts(op.operands, weights)
        except ValueError as e:
            raise AnalysisError(f"{op.name} at {self.loc(op).describe()}: {e}") from None

    def _operand_facts(self, operands, weights: bool) -> tuple:
        """(operand types, bytes read, operand keys, weight operands). An operand made by an op this walk has
        read already has its type from there (by the value's key, the walk's identity of a value: liveness and
        data flow key values by it too), not read from the IR again; any other (a function's or a region's
        argument, a result of control flow) is read."""
        types, known, made = self._types, self._known_type, self._value_types.get
        if len(operands) == 1:  # most data movement: broadcast, convert, reshape, transpose, slice
            v = operands[0]
            h = hash(v)
            ti = made(h)
            if ti is None:
                t = v.type
                ti = known(hash(t)) or types(t)
            return (ti,), ti.nbytes, (h,), ((0,) if weights and h in self._args else ())
        read = 0
        infos, uses, found = [], [], ()
        args = self._args
        for v in operands:
            h = hash(v)
            ti = made(h)
            if ti is None:
                t = v.type
                ti = known(hash(t)) or types(t)
            read += ti.nbytes
            if weights and h in args:
                found += (len(infos),)
            infos.append(ti)
            uses.append(h)
        return tuple(infos), read, tuple(uses), found
