"""The walk of a training step: :class:`TrainingVisitor`, the data-flow walk that also reads the entry
function's arguments (used by :func:`mhlo_cost.training.analysis.analyze_training`)."""
from __future__ import annotations

from ..visitors.dataflow import DataflowVisitor
from .argument import Argument


class TrainingVisitor(DataflowVisitor):
    """The data-flow walk that also reads the entry function's arguments, and sees through
    ``optimization_barrier`` (``jax.checkpoint`` passes a block's inputs through one before recomputing
    it): its i-th result comes from its i-th operand's producer."""

    def _record(self, op, row):
        row = super()._record(op, row)
        if op.name.endswith(".optimization_barrier"):
            for res, v in zip(op.results, op.operands):
                src = self._source(v)
                if src is not None:
                    self._def[hash(res)] = src
        return row

    def run(self):
        from jaxlib.mlir import ir

        fn = self.functions[self.entry]
        attrs = []
        if "arg_attrs" in fn.attributes:
            attrs = [ir.DictAttr(a) for a in ir.ArrayAttr(fn.attributes["arg_attrs"])]
        self.arguments = []
        for i, a in enumerate(fn.regions[0].blocks[0].arguments):
            d = attrs[i] if i < len(attrs) else None
            donated = d is not None and ("tf.aliasing_output" in d or "jax.buffer_donor" in d)
            name = self._locations(a.location).name
            self.arguments.append(Argument(f"arg{hash(a)}", i, name, donated, self.tinfo(a.type)))
        return super().run()
