"""A serve sweep's steps without lowering every point: the batch x context grid's op tables fitted from a few
lowerings (:mod:`mhlo_cost.studies.gridfit`) and evaluated at the others, priced as a lowered step is.

A batch of 1 is its own program (the IR drops unit dimensions), so points of batch 1 are lowered one by one;
the others are fitted where that lowers fewer points than the grid has: nodes at the first two batches and
contexts (the counts of a step are bilinear in them), checked at the last batch and context, lowered too. Where
the model has more than three layers, each node is lowered at depths 2 and 3 only and its op table rebuilt at
full depth by repeating the layer's rows (:mod:`mhlo_cost.studies.layerfit`); the check point is lowered at full
depth, the independent reference of both the repetition and the fit. Where the layers do not repeat, the nodes
are lowered at full depth; where the op graph changes with the shape, or the fit misses the check point, or the
cache layout does not scale as :meth:`CacheLayout.at` says, every point is lowered; ``note`` says why.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

#: Node values per symbol: counts of a decode or prefill step are of degree 1 in the batch and in the context.
PER_SYMBOL = 2
#: The depths a node is lowered at, its table rebuilt at full depth from them: 2 and 3, not 1 and 2, as a
#: lowering keeps one copy of a constant every layer uses, in the first layer (torchax's programs).
DEPTHS = (2, 3)


def depth_key(base) -> tuple[str, int] | None:
    """(the configuration key of the model's depth, its depth) where the layers may be repeated (more than
    :data:`DEPTHS`' deeper), else None."""
    key = "layers" if base.model else "num_hidden_layers"
    try:
        layers = base.facts().layers
    except Exception:  # (a configuration the step cannot read: the lowering says why, at full depth)
        return None
    return (key, layers) if layers > DEPTHS[1] else None


def at_depth(req, key: str, layers: int):
    """``req`` with the model cut to ``layers`` layers."""
    return replace(req, overrides=tuple((k, v) for k, v in req.overrides if k != key) + ((key, layers),))


def fitted_steps(base, points: list, hw, cache, stage: Callable[[str], None],
                 note: Callable[[str], None] | None = None) -> dict:
    """(batch, context) -> (Step, Analysis) for the ``points`` (batch, context) of ``base``'s sweep that a fit
    gives or that were lowered to make it; the points it does not hold are lowered one by one by the caller."""
    from ..gridfit import FitFailed, plan_nodes

    domain = [(b, c) for b, c in points if b > 1]
    batches = list(dict.fromkeys(b for b, _ in domain))
    contexts = list(dict.fromkeys(c for _, c in domain))
    if len(domain) != len(batches) * len(contexts):
        return {}  # (part of the grid cached: not a grid)
    plan = plan_nodes({"batch": batches, "context": contexts}, PER_SYMBOL)
    if plan is None:
        return {}
    depth = depth_key(base)
    try:
        try:
            return _fit(base, domain, plan, (batches[0], contexts[0]), hw, cache, stage, depth)
        except _NotRepeated as e:
            if note is not None:
                note(f"serve: nodes lowered at full depth: {e}")
            return _fit(base, domain, plan, (batches[0], contexts[0]), hw, cache, stage, None)
    except FitFailed as e:
        if note is not None:
            note(f"serve: every point lowered: {e}")
        return {}


class _NotRepeated(ValueError):
    """The layers of the model do not repeat (:mod:`~mhlo_cost.studies.layerfit` says why)."""


def _fit(base, domain, plan, corner, hw, cache, stage, depth) -> dict:
    """:func:`fitted_steps`' steps, the nodes lowered at depths 2 and 3 and repeated (``depth``: (key, layers))
    or at full depth (``depth`` None)."""
    from ..gridfit import FitFailed, fit_tables

    nodes, checks = plan
    steps = {}

    def analyze_at(point):
        b, c = point.get("batch", corner[0]), point.get("context", corner[1])
        req = replace(base, batch=b, context=c)
        full = depth is None or point in checks
        stage(f"lowering batch {b}, context {c} (a node of the fit{'' if full else ', at depths 2 and 3'})")
        made = _lowered(req, hw, cache, depth, full)
        if full:
            step, analysis = made[None]
            steps[b, c] = step
            if depth is not None:
                _check_repeated(_repeated(made, depth)[0], analysis)
            return analysis, (step.weight_bytes, -1 if step.positions is None else step.positions)
        analysis, weights, positions = _repeated(made, depth)
        steps[b, c] = made[DEPTHS[0]][0]
        return analysis, (weights, -1 if positions is None else positions)

    table = fit_tables(analyze_at, nodes, checks)
    first = steps[checks[0].get("batch", corner[0]), checks[0].get("context", corner[1])]
    for (b, c), step in steps.items():
        if step.layout.layers[:1] != first.layout.at(batch=b, context=c).layers[:1] or (
                depth is None and step.layout != first.layout.at(batch=b, context=c)):
            raise FitFailed(f"the KV cache at batch {b}, context {c} is not the layout scaled")
    if depth is not None and len(set(first.layout.layers)) > 1:
        raise FitFailed("the KV cache differs between layers")
    out = {}
    for b, c in domain:
        stage(f"evaluating batch {b}, context {c}")
        analysis, (weights, positions) = table.at({s: v for s, v in (("batch", b), ("context", c)) if s in nodes})
        lowered = steps.get((b, c)) if depth is None or (b, c) == (first.request.batch, first.request.context) \
            else None
        req = replace(base, batch=b, context=c)
        step = lowered or replace(first, layout=first.layout.at(batch=b, context=c), request=req,
                                  weight_bytes=weights, positions=None if positions < 0 else positions)
        out[b, c] = (step, analysis)
    return out


def _lowered(req, hw, cache, depth, full: bool) -> dict:
    """depth (None: full) -> (step, analysis) of ``req`` at full depth (``full``) and at depths 2 and 3 (where
    ``depth`` is given), all lowered from this one call site (a lowering's locations hold the Python stack)."""
    from ...lower.frontends import FrontendError
    from ...lower.frontends.api import LowerFailed
    from .serve import step_study

    depths = ((None,) if full else ()) + (() if depth is None else DEPTHS)
    out = {}
    for d in depths:
        try:
            step, _ = cache.step(req if d is None else at_depth(req, depth[0], d))
        except (FrontendError, LowerFailed) as e:
            if d is None:
                raise
            raise _NotRepeated(f"the model cut to {d} layer(s) does not lower ({e})") from None
        out[d] = (step, step_study(step, hw).analysis)
    return out


def _repeated(made: dict, depth) -> tuple:
    """(the analysis rebuilt at full depth from the lowerings at depths 2 and 3 in ``made``, its weight bytes, its
    positions); :class:`_NotRepeated` says why where the layers do not repeat."""
    from ..gridfit import FitFailed
    from ..layerfit import repeat_layers

    layers = depth[1]
    d = DEPTHS[0]
    (s1, a1), (s2, a2) = made[d], made[d + 1]
    if s1.positions != s2.positions:
        raise _NotRepeated("the model's positions change with its depth")
    try:
        analysis = repeat_layers(a1, a2, layers, base=d)
    except FitFailed as e:
        raise _NotRepeated(str(e)) from None
    return analysis, s1.weight_bytes + (layers - d) * (s2.weight_bytes - s1.weight_bytes), s1.positions


def _check_repeated(rebuilt, lowered) -> None:
    """:class:`_NotRepeated` where the table rebuilt by repeating the layers is not the one lowered at full depth."""
    from ..gridfit import skeleton

    if skeleton(rebuilt) != skeleton(lowered):
        raise _NotRepeated("the table rebuilt by repeating layer 2 is not the one lowered at full depth")
