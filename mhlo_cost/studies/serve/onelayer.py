"""A serve point priced from one layer: the step's figures at full depth from its programs at two depths (the
grid's :data:`~.fitted.DEPTHS`, 3 and 4), each priced once, the deep one's repeated layer's priced rows and kernels
copied once per further layer (:class:`mhlo_cost.studies.layerprice.Repeat`, as the sweep prices a deep STDiT3),
instead of the op table rebuilt at full depth row by row (:func:`mhlo_cost.studies.layerfit.repeat_layers`) and
priced whole.

What :func:`~.serve.figures_of` reads, and why the repetition gives it:

* the estimate (times, kernels, totals, the program's bound, FLOPs, the precisions of the dots): the repeated
  estimate of :func:`mhlo_cost.studies.layerprice.repeated_figures` (every total an ``fsum``, so bit for bit the
  full-depth pricing's; the module's docstring says why);
* the compiled execution's liveness: its peak, its arguments (weights and KV cache per layer), its outputs (the
  updated cache per layer) and what is live at its end each grow by a constant per layer (a layer adds its
  weights and cache and, at the peak inside a layer, the same live values per layer before it), so each is
  ``deep + (L - d) (deep - shallow)`` at ``L`` layers, ``d`` the deep program's depth
  (:meth:`~mhlo_cost.studies.layerprice.Repeat.grown`; which two depths it holds from is the check's to say: at
  depths 2 and 3 Llama-2's decode peak is not on one line, :data:`~.fitted.DEPTHS`);
* a step on one device has no collective, so its exposed communication is none whatever its data flow: the
  full-depth program is then priced without one (:meth:`~mhlo_cost.studies.layerprice.Repeat.program`);
* the per-block times (:func:`block_times`): each row at full depth is a copy of a row of the deep program, in
  that row's block, or for a copy of layer 2's row, in the block of its copy's layer (the block's index and the
  digits ending its name moved on by the layers before it); the rows' fused times and the sums made as the
  block table makes them (:func:`mhlo_cost.analysis.blocks._accumulate`, in program order), the TOTAL's from the
  estimate's totals (:meth:`mhlo_cost.roofline.Roofline.block_frame`).

The grid checks all of it first, once per program, against the program lowered at depth 5 and priced whole
(:class:`Check`); a point whose check does not hold is priced as before, from its table rebuilt at full depth.
The check is made at one point of the program (a corner of the grid) and holds for its other batches and contexts
by this argument, not by a check at each point: a value that outlives its layer is an argument (weights, cache) or
an output (the updated cache), so a position in the last layer or the tail carries every layer's, and one in an
earlier layer only the layers' before it, with the same values of its own (the layers are one program, at any
shape); the peak therefore sits in the last layer or the tail at every depth, where which position holds it does
not depend on the depth, and grows by the same bytes per layer from the depth where the layers start repeating
(the check's two depths and the one past them show where that is). A shape where that fails (the peak of the
rebuilt table not on the line) is not caught at points other than the checked one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import cached_property


@dataclass
class _Liveness:
    """What :func:`~.serve.activation_bytes` reads of a liveness profile, grown to full depth."""

    peak_bytes: int
    argument_bytes: int
    output_bytes: int
    after: list


def _end(mem) -> int:
    return mem.after[-1] if mem.after else mem.argument_bytes


def layer_priced(step, shallow: tuple, deep: tuple, hw, tp: int, launch: str = "stream", base: int = 2):
    """The :class:`~.serve.Figures` of ``step`` (at full depth, ``step.layers`` layers) on ``hw`` over ``tp``
    devices from ``shallow`` and ``deep``, its (step, analysis) at depths ``base`` and ``base + 1``, compiled;
    FitFailed (or the error of a program the repetition does not take) where its layers cannot be repeated."""
    from ..layerprice import Repeat, repeated_figures
    from .serve import figures_of, launched, step_study

    hw = launched(hw, launch)
    st2, st3 = (step_study(s, hw, a) for s, a in (shallow, deep))
    repeat = Repeat(shallow[1], deep[1], step.layers, base=base)
    # (a step on one device has no collective: its exposed communication is none, whatever the data flow)
    flow = any(r.kind == "collective" for r in deep[1].rows)
    priced = repeated_figures(repeat, repeat.program(flow), st3, st2)
    m2, m3 = st2.fused_memory, st3.fused_memory
    mem = _Liveness(priced.fused_memory.peak_bytes, repeat.grown(m2.argument_bytes, m3.argument_bytes),
                    repeat.grown(m2.output_bytes, m3.output_bytes), [repeat.grown(_end(m2), _end(m3))])
    rf = priced.roofline
    blocks = block_times(repeat, st3.blocks, rf, len(st3.blocks.blocks) - len(st2.blocks.blocks))
    return figures_of(step, hw, tp, rf, mem, blocks, launch, "compiled")


def _full_blocks(repeat, blocks, per_layer: int):
    """The deep program's ``blocks`` (:class:`~mhlo_cost.analysis.collectors.Blocks`) at full depth, a layer being
    ``per_layer`` blocks: a copy of layer 2's row in its block moved on by the layers before its copy, a row after
    the repeated layers in its block moved on by every copy; FitFailed where a moved block is not named by its
    index or two rows put one block under two names."""
    from ...analysis.collectors import Block
    from ..gridfit import FitFailed

    if len(repeat.plan.segs) != 1 or per_layer < 1:
        raise FitFailed("not one run of repeated layers, each of its own blocks")
    (q, m), copies = repeat.plan.segs[0], repeat.plan.depth - 2
    made: dict = {}

    def moved(b: int, shift: int) -> int:
        if (b, shift) not in made:
            blk = blocks.blocks[b]
            if shift:
                named = re.fullmatch(r"(.*?)(\d+)", blk.name)
                if blk.index is None or named is None or int(named.group(2)) != blk.index:
                    raise FitFailed(f"the block {blk.name} is not named by its index")
                blk = Block(named.group(1) + str(blk.index + shift), blk.kind, blk.index + shift)
            made[b, shift] = (b + shift, blk)
        return made[b, shift][0]

    row_blocks = []
    for p, k in repeat.order:
        shift = (k - 2) * per_layer if k is not None else copies * per_layer if p >= q + 2 * m else 0
        row_blocks.append(tuple(moved(b, shift) for b in blocks.row_blocks[p]))
    out = {}
    for j, blk in made.values():
        if out.setdefault(j, blk) != blk:
            raise FitFailed(f"two blocks at full depth are both block {j}")
    if sorted(out) != list(range(len(out))):
        raise FitFailed("the blocks at full depth are not numbered in order")
    return replace(blocks, blocks=[out[j] for j in range(len(out))], row_blocks=row_blocks, row_parts=[],
                   row_groups=[blocks.row_groups[p] for p, _ in repeat.order])


def block_times(repeat, blocks, rf, per_layer: int) -> list:
    """(block, est_time_fused_s, bound) of every block of the full-depth estimate ``rf`` and the TOTAL, as
    :func:`~.serve._blocks` reads them of :meth:`mhlo_cost.roofline.Roofline.block_frame`: each block's sums of its
    rows' fused time, compute-bound fused time, communication, fixed and growing costs, added in program order
    by the block table's own :func:`mhlo_cost.analysis.blocks._accumulate` (a row in k blocks gives each 1/k),
    the blocks and groups in the block table's order (:func:`mhlo_cost.analysis.blocks._sort_key`), the TOTAL's
    times the estimate's totals (:func:`mhlo_cost.roofline.block_frame._total_from`)."""
    from operator import itemgetter

    from ...analysis.blocks import TOTAL, _accumulate, _sort_key
    from ...roofline.bounds import span_bound

    full = _full_blocks(repeat, blocks, per_layer)
    ts, f = rf.times, rf.fusion
    ks, rk, ft = f.kernels, f.row_kernel, f.row_time
    compute = [k.bound == "compute" for k in ks]
    vals = [(ft[i] + t.comm_s, ft[i] if rk[i] is not None and compute[rk[i]] else 0.0, t.comm_s, t.fixed_cost_s,
             t.growing_s) for i, t in enumerate(ts)]
    acc, order, _ = _accumulate(vals, full, [itemgetter(c) for c in range(5)], parts=False)
    keys = sorted(acc, key=_sort_key(order))
    tot = rf.totals()
    sums = [sum(acc[k][c] for k in keys) for c in range(5)]
    out = []
    for key, v in [(k, acc[k]) for k in keys] + [(None, [tot["est_time_fused_s"], sums[1], tot["comm_time_s"],
                                                         sums[3], sums[4]])]:
        name = TOTAL if key is None else full.blocks[key[1]].name if key[0] == "b" else key[1]
        out.append((str(name), float(v[0]), str(span_bound(v[0] - v[2], v[1], v[2], v[3], v[4]))))
    return out


class Check:
    """The repetition's pricing checked against a program lowered at a depth not used to make it: ``made``,
    depth -> (step, analysis) of one point at the depths ``base`` and ``base + 1`` and at ``at`` (lowered there
    too); :meth:`holds` once per profile, tp and launch."""

    def __init__(self, made: dict, base: int, at: int):
        self.made, self.base, self.at, self.said = made, base, at, {}

    def holds(self, hw, tp: int, launch: str) -> bool:
        """Whether the figures priced from one layer at depth :attr:`at` are those of the lowering there priced
        whole, every figure (the blocks' times too) to the last bit."""
        from ..gridfit import FitFailed
        from .serve import figures

        key = (hw.name, repr(hw.as_dict()), tp, launch)
        if key not in self.said:
            (step, analysis), base = self.made[self.at], self.base
            try:
                got = layer_priced(step, self.made[base], self.made[base + 1], hw, tp, launch, base)
            except (FitFailed, ValueError, IndexError, KeyError):  # (the layers not repeating; not a bug)
                got = None
            self.said[key] = got is not None and got == figures(step, hw, tp, analysis=analysis, launch=launch)
        return self.said[key]


class Layered:
    """A point of the grid at two depths (``shallow``, ``deep``: (step, analysis) at the depths of ``check``,
    evaluated from a fit or lowered), its layers ``depth`` ((key, layers)), the :class:`Check` of its program.
    :meth:`figures` prices it from one layer where the check holds, else from :attr:`analysis` (its table rebuilt
    at full depth)."""

    def __init__(self, shallow: tuple, deep: tuple, depth: tuple, check: Check):
        self.shallow, self.deep, self.depth, self.check = shallow, deep, depth, check

    @cached_property
    def analysis(self):
        """The table rebuilt at full depth row by row (:func:`mhlo_cost.studies.layerfit.repeat_layers`)."""
        from ..layerfit import repeat_layers

        return repeat_layers(self.shallow[1], self.deep[1], self.depth[1], base=self.check.base)

    def figures(self, step, hw, tp: int, launch: str, split=None):
        """``step``'s figures (at full depth): from one layer where :attr:`check` holds on ``hw``, ``tp`` and
        ``launch`` (compiled, no expert split), else priced whole from :attr:`analysis`."""
        from ..gridfit import FitFailed
        from .serve import figures

        if (split is None or split.ep <= 1) and self.check.holds(hw, tp, launch):
            try:
                return layer_priced(step, self.shallow, self.deep, hw, tp, launch, self.check.base)
            except (FitFailed, ValueError, IndexError, KeyError):
                pass
        return figures(step, hw, tp, analysis=self.analysis, launch=launch, split=split)
