"""A serve sweep's steps without lowering every point: the batch x context grid's op tables fitted from a few
lowerings (:mod:`mhlo_cost.studies.gridfit`) and evaluated at the others, priced as a lowered step is.

A batch of 1 is its own program (the IR drops unit dimensions), so points of batch 1 are not in the grid fit;
the others are fitted where that lowers fewer points than the grid has: nodes at the first two batches and
contexts (the counts of a step are bilinear in them), checked at the last batch and context, lowered too.
Where the model has more than four layers, every point lowered (nodes, the check point, a batch of 1) is lowered
at depths 3 and 4 only (:data:`DEPTHS`) and priced at full depth from its priced layer repeated (:mod:`.onelayer`;
or its op table rebuilt at full depth by repeating the layer's rows, :mod:`mhlo_cost.studies.layerfit`, and priced
whole); the fit is made and checked on the tables at depths 3 and 4, and the repetition is checked once per
program (the grid's, batch 1's) against a lowering at depth 5, a depth not used to rebuild (the independent
reference): the table rebuilt there compared whole with the one lowered, and the figures priced from one layer
there with those of the lowering priced whole (per profile, tp and launch; where they differ, the program's
points are priced from their rebuilt tables). Where
the layers do not repeat (or the configuration says its layers differ), the points are lowered at full depth;
where the op graph changes with the shape, or the fit misses the check point, or the cache layout does not
scale as :meth:`CacheLayout.at` says, the grid is not fitted; ``note`` says why.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from .onelayer import Check, Layered

#: Node values per symbol: counts of a decode or prefill step are of degree 1 in the batch and in the context.
PER_SYMBOL = 2
#: The depths a point is lowered at, its table rebuilt (or its figures priced) at full depth from them: 3 and 4, not
#: 1 and 2, as a lowering keeps one copy of a constant every layer uses, in the first layer (torchax's programs), and
#: not 2 and 3, as the compiled execution's memory peak can sit elsewhere at depth 2 than deeper (Llama-2's decode
#: step: its peak grows by 4 bytes from depth 2 to 3, by 8 per layer from 3 on), which no repetition of layer 2
#: gives (the check at :data:`CHECK_DEPTH` sees it, and the points are then priced from the rebuilt table).
DEPTHS = (3, 4)
#: The depth the repetition is checked at: not one of :data:`DEPTHS`, lowered on its own, the cheapest such.
CHECK_DEPTH = 5


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


def layers_differ(base, layers: int) -> str | None:
    """Why the configuration of ``base`` says its layers after the first are not all alike (a per-layer list,
    ``layer_types``: a sliding window every sixth layer, which no cut to a few layers shows), or None."""
    if base.model:
        return None  # (the bundled gpt: one block repeated)
    from ...lower.frontends import hub

    try:
        cfg = hub.hf_model_config(base.hf, base.config, dict(base.overrides))
        text = cfg.get_text_config(decoder=True)
    except Exception:  # (the lowering says why)
        return None
    for name, value in sorted(vars(text).items()):
        if isinstance(value, (list, tuple)) and len(value) == layers and len({repr(v) for v in value[1:]}) > 1:
            return f"the configuration's {name} differs between layers"
    return None


def fitted_steps(base, points: list, hw, cache, stage: Callable[[str], None],
                 note: Callable[[str], None] | None = None, ready: Callable[[dict], None] | None = None) -> dict:
    """(batch, context) -> (Step, Analysis) for the ``points`` (batch, context) of ``base``'s sweep that a fit
    gives, that were rebuilt from shallow lowerings or lowered to make a fit; the points it does not hold are
    lowered one by one by the caller. ``ready(made)``: told of the grid's points as soon as they are made, before
    the points left are lowered (the caller prices them meanwhile)."""
    say = note or (lambda text: None)
    depth = depth_key(base)
    why = layers_differ(base, depth[1]) if depth is not None else None
    if why is not None:
        say(f"serve: points lowered at full depth: {why}")
        depth = None
    out, depth = _grid(base, points, hw, cache, stage, say, depth)
    if out and ready is not None:
        ready(dict(out))
    rest = [p for p in points if p not in out]
    if rest and depth is not None:
        out.update(_rebuilt(base, rest, hw, cache, stage, say, depth))
    return out


def _grid(base, points: list, hw, cache, stage, say, depth) -> tuple[dict, tuple | None]:
    """(the points of batch > 1 the grid fit gives, ``depth`` or None where the layers were found not to
    repeat)."""
    from ..gridfit import FitFailed

    grid = grid_plan(points)
    if grid is None:
        return {}, depth
    domain, plan, corner = grid
    try:
        if depth is not None:
            try:
                return _fit_shallow(base, domain, plan, corner, hw, cache, stage, depth), depth
            except _NotRepeated as e:
                say(f"serve: nodes lowered at full depth: {e}")
                depth = None
        return _fit_full(base, domain, plan, corner, hw, cache, stage), None
    except FitFailed as e:
        say(f"serve: every point lowered: {e}")
        return {}, depth


def grid_plan(points: list) -> tuple | None:
    """(the points of batch > 1 fitted as one grid, the fit's (nodes, checks), its corner: the first node) of a
    sweep's ``points`` ((batch, context) pairs), or None where they are not fitted as a grid (part of the grid
    cached, or fitting lowers as many points as the grid has)."""
    from ..gridfit import plan_nodes

    domain = [(b, c) for b, c in points if b > 1]
    batches = list(dict.fromkeys(b for b, _ in domain))
    contexts = list(dict.fromkeys(c for _, c in domain))
    if len(domain) != len(batches) * len(contexts):
        return None  # (part of the grid cached: not a grid)
    plan = plan_nodes({"batch": batches, "context": contexts}, PER_SYMBOL)
    return None if plan is None else (domain, plan, (batches[0], contexts[0]))


def planned(base, points: list) -> list:
    """The requests, each at its depth, that :func:`fitted_steps` lowers for ``points`` ((batch, context) pairs)
    where the layers repeat and the fit holds, in the order it asks for them (a second process lowers them
    meanwhile, :mod:`.warm`): the grid's nodes and check point at :data:`DEPTHS` (its corner at
    :data:`CHECK_DEPTH` too), then each point left at DEPTHS, the first of each program (a batch of 1, a larger
    batch) at CHECK_DEPTH too; none where the points are lowered at full depth."""
    from ..gridfit import fit_points

    depth = depth_key(base)
    if depth is None or layers_differ(base, depth[1]) is not None:
        return []
    wanted, fitted, checked = [], set(), set()
    grid = grid_plan(points)
    if grid is not None:
        domain, (nodes, checks), corner = grid
        for point in fit_points(nodes, checks)[1]:
            b, c = _at(point, corner)
            wanted += [(b, c, d) for d in DEPTHS + ((CHECK_DEPTH,) if (b, c) == corner else ())]
        fitted = set(domain)
    for b, c in points:
        if (b, c) not in fitted:
            wanted += [(b, c, d) for d in DEPTHS + (() if (b > 1) in checked else (CHECK_DEPTH,))]
            checked.add(b > 1)
    return [at_depth(replace(base, batch=b, context=c), depth[0], d) for b, c, d in wanted]


class _NotRepeated(ValueError):
    """The layers of the model do not repeat (:mod:`~mhlo_cost.studies.layerfit` says why)."""


def _at(point: dict, corner: tuple) -> tuple[int, int]:
    return point.get("batch", corner[0]), point.get("context", corner[1])


def _point(nodes: dict, b: int, c: int) -> dict:
    return {s: v for s, v in (("batch", b), ("context", c)) if s in nodes}


def _facts(step) -> tuple[int, int]:
    """The integers of a step beside its analysis that the fit carries: weight bytes, positions (-1: none)."""
    return step.weight_bytes, -1 if step.positions is None else step.positions


def _fit_full(base, domain, plan, corner, hw, cache, stage) -> dict:
    """:func:`fitted_steps`' grid, its nodes and check point lowered at full depth."""
    from ..gridfit import FitFailed, fit_tables

    nodes, checks = plan
    steps = {}

    def analyze_at(point):
        b, c = _at(point, corner)
        stage(f"lowering batch {b}, context {c} (a node of the fit)")
        step, analysis = _lowered(replace(base, batch=b, context=c), hw, cache, None, (None,))[None]
        steps[b, c] = step
        return analysis, _facts(step)

    table = fit_tables(analyze_at, nodes, checks)
    first = steps[corner]
    for (b, c), step in steps.items():
        if step.layout != first.layout.at(batch=b, context=c):
            raise FitFailed(f"the KV cache at batch {b}, context {c} is not the layout scaled")
    out = {}
    for b, c in domain:
        stage(f"evaluating batch {b}, context {c}")
        analysis, (weights, positions) = table.at(_point(nodes, b, c))
        step = steps.get((b, c)) or replace(first, layout=first.layout.at(batch=b, context=c),
                                            request=replace(base, batch=b, context=c), weight_bytes=weights,
                                            positions=None if positions < 0 else positions)
        out[b, c] = (step, analysis)
    return out


def _fit_shallow(base, domain, plan, corner, hw, cache, stage, depth) -> dict:
    """:func:`fitted_steps`' grid, its nodes and check point lowered at :data:`DEPTHS` (``depth``: (key, layers)),
    the repetition checked at the corner (the first node) at :data:`CHECK_DEPTH`, the tables at each depth fitted and
    checked, each point's table rebuilt at full depth from the two tables evaluated there."""
    from ..gridfit import FitFailed, fit_tables

    nodes, checks = plan
    made = {}

    def analyze(d):
        def analyze_at(point):
            b, c = _at(point, corner)
            if (b, c) not in made:
                check = (b, c) == corner  # (lowered from this same line: a lowering's locations hold the stack)
                stage(f"lowering batch {b}, context {c} (a node of the fit, at depths {DEPTHS[0]} and {DEPTHS[1]}"
                      f"{f', and {CHECK_DEPTH} to check the repetition' if check else ''})")
                made[b, c] = _lowered(replace(base, batch=b, context=c), hw, cache, depth,
                                      DEPTHS + ((CHECK_DEPTH,) if check else ()))
                if check:  # (first: where the layers do not repeat, no other node is lowered at DEPTHS)
                    _check_repeated(made[b, c], depth)
                    _uniform(made[b, c])
            step, analysis = made[b, c][d]
            return analysis, _facts(step)
        return analyze_at

    tables = {d: fit_tables(analyze(d), nodes, checks) for d in DEPTHS}
    first = _uniform(made[corner])
    for (b, c), m in made.items():
        if any(m[d][0].layout != made[corner][d][0].layout.at(batch=b, context=c) for d in DEPTHS):
            raise FitFailed(f"the KV cache at batch {b}, context {c} is not the layout scaled")
    check, out = Check(made[corner], DEPTHS[0], CHECK_DEPTH), {}
    for b, c in domain:
        stage(f"evaluating batch {b}, context {c}")
        (a2, f2), (a3, f3) = (tables[d].at(_point(nodes, b, c)) for d in DEPTHS)
        weights, positions = _grown(f2, f3, depth)
        step = _full_step(first, replace(base, batch=b, context=c), weights, positions, depth)
        out[b, c] = (step, Layered((None, a2), (None, a3), depth, check))  # (pricing reads the tables alone)
    return out


def _rebuilt(base, points: list, hw, cache, stage, say, depth) -> dict:
    """The ``points`` each lowered at :data:`DEPTHS` and rebuilt at full depth, the repetition checked at its depth
    once per program (as the op graph at the first of DEPTHS tells them apart: a batch of 1 is one); where it does not hold,
    the points left are not given (the caller lowers them at full depth) and ``say`` says why."""
    from ..gridfit import skeleton

    out, checked = {}, {}
    try:
        for b, c in points:
            req = replace(base, batch=b, context=c)
            made, wanted, program = {}, [DEPTHS], None
            while wanted:  # (every depth lowered from this one line: a lowering's locations hold the stack)
                depths = wanted.pop()
                stage(f"lowering batch {b}, context {c} (at depth{'s' if len(depths) > 1 else ''} "
                      f"{' and '.join(map(str, depths))}{'' if program is None else ' to check the repetition'})")
                made.update(_lowered(req, hw, cache, depth, depths))
                program = program or skeleton(made[DEPTHS[0]][1])[0]
                if program not in checked and CHECK_DEPTH not in made:
                    wanted.append((CHECK_DEPTH,))
            first = _uniform(made)
            (s2, a2), (s3, a3) = made[DEPTHS[0]], made[DEPTHS[1]]
            weights, positions = _grown(_facts(s2), _facts(s3), depth)
            if program not in checked:
                _check_repeated(made, depth)
                checked[program] = Check(made, DEPTHS[0], CHECK_DEPTH)
            out[b, c] = (_full_step(first, req, weights, positions, depth),
                         Layered(made[DEPTHS[0]], made[DEPTHS[1]], depth, checked[program]))
    except _NotRepeated as e:
        say(f"serve: points lowered at full depth: {e}")
    return out


def _lowered(req, hw, cache, depth, depths: tuple) -> dict:
    """depth (None: full) -> (step, analysis) of ``req`` at each of ``depths`` (``depth``: (key, layers)), all
    lowered from this one call site (a lowering's locations hold the Python stack)."""
    from ...lower.frontends import FrontendError
    from ...lower.frontends.api import LowerFailed
    from ...lower.frontends.torchax_once import layers_traced_once
    from .serve import step_study

    out = {}
    for d in depths:
        try:
            with layers_traced_once():  # (each kind of decoder layer traced once: the same ops and scope names)
                step, _ = cache.step(req if d is None else at_depth(req, depth[0], d))
        except (FrontendError, LowerFailed) as e:
            if d is None:
                raise
            raise _NotRepeated(f"the model cut to {d} layer(s) does not lower ({e})") from None
        out[d] = (step, step_study(step, hw).analysis)
    return out


def _uniform(made: dict):
    """The step at the first of :data:`DEPTHS` of ``made`` (depth -> (step, analysis)); :class:`_NotRepeated` where the KV cache
    differs between its layers."""
    s2, s3 = made[DEPTHS[0]][0], made[DEPTHS[1]][0]
    if len(set(s2.layout.layers)) != 1 or set(s3.layout.layers) != set(s2.layout.layers):
        raise _NotRepeated("the KV cache differs between layers")
    return s2


def _full_step(shallow, req, weights: int, positions: int | None, depth):
    """The step of ``req`` at full depth (``depth``: (key, layers)) from one at the first of :data:`DEPTHS` (its layers' cache
    repeated), with the weights and positions rebuilt."""
    from ...lower.inference.cache import CacheLayout

    layout = shallow.layout
    layout = CacheLayout(layout.layers[:1] * depth[1], layout.batch, layout.context, layout.dtype)
    return replace(shallow, layout=layout.at(batch=req.batch, context=req.context), request=req,
                   weight_bytes=weights, positions=positions, layers=depth[1])


def _grown(f2: tuple, f3: tuple, depth) -> tuple:
    """(the weight bytes, the positions) at full depth (``depth``: (key, layers)) from the facts (:func:`_facts`)
    at :data:`DEPTHS`; :class:`_NotRepeated` where the positions change with the depth."""
    layers, d = depth[1], DEPTHS[0]
    (w2, p2), (w3, p3) = f2, f3
    if p2 != p3:
        raise _NotRepeated("the model's positions change with its depth")
    return w2 + (layers - d) * (w3 - w2), None if p2 < 0 else p2


def _repeated(a2, a3, f2: tuple, f3: tuple, depth) -> tuple:
    """(the analysis rebuilt at full depth (``depth``: (key, layers)) from those at :data:`DEPTHS` and their
    facts (:func:`_facts`), its weight bytes, its positions); :class:`_NotRepeated` says why where the layers do
    not repeat."""
    from ..gridfit import FitFailed
    from ..layerfit import repeat_layers

    weights, positions = _grown(f2, f3, depth)
    try:
        analysis = repeat_layers(a2, a3, depth[1], base=DEPTHS[0])
    except FitFailed as e:
        raise _NotRepeated(str(e)) from None
    return analysis, weights, positions


def _check_repeated(made: dict, depth) -> None:
    """:class:`_NotRepeated` where the table (and step) rebuilt at :data:`CHECK_DEPTH` from ``made``'s tables at
    :data:`DEPTHS` (depth -> (step, analysis), all at one point) is not the one lowered there."""
    from ..gridfit import skeleton

    step, lowered = made[CHECK_DEPTH]
    (s2, a2), (s3, a3) = made[DEPTHS[0]], made[DEPTHS[1]]
    at4 = (depth[0], CHECK_DEPTH)
    rebuilt, weights, positions = _repeated(a2, a3, _facts(s2), _facts(s3), at4)
    if (skeleton(rebuilt) != skeleton(lowered) or (weights, positions) != (step.weight_bytes, step.positions)
            or _full_step(s2, step.request, weights, positions, at4).layout != step.layout):
        raise _NotRepeated(f"the table rebuilt at depth {CHECK_DEPTH} by repeating layer 2 is not the one lowered "
                           "there")
