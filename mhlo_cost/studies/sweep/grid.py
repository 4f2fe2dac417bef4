"""The grid of a sweep: points (model, shape, parallel, devices, dtype, precision) from flags or a TOML spec,
the hardware profiles every point is estimated on, and which points cannot be built (skipped, with why).

A point is lowered and analysed once; each hardware profile is applied to that one analysis. The
strategies are the product of ``parallel`` and ``devices``, or an explicit list of ``PARALLEL:DEVICES``
pairs (``strategies``) where only some combinations are wanted (the published STDiT3 table).

``precision``: the precision recipes (:mod:`mhlo_cost.machines.precision`), crossed as the dtypes are; a point
with a recipe other than ``bf16`` lowers the bundled model's linears under it (:func:`recipe_reason` says where it
cannot: a tensor-parallel strategy, ``deployed``, a library model, a block size that does not divide).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

#: Model options of ``mhlo-cost lower`` that apply to the whole grid (make_config's keywords).
MODEL_OPTIONS = ("small", "depth", "hidden", "heads", "batch", "tokens", "layers", "scan", "deployed")
#: Keys a spec file may hold at its top level (``[options]`` holds MODEL_OPTIONS).
SPEC_KEYS = ("model", "shape", "parallel", "devices", "strategies", "hardware", "dtype", "steps", "fuse",
             "conv_padding", "options", "models", "execution", "precision")
DEFAULT_PRECISION = "bf16"
#: The sweep's ``fuse`` setting (its cache key) -> the execution model it estimates; ``eager`` and ``inductor``
#: are their own.
EXECUTION_OF_FUSE = {"none": "unfused", "elementwise": "compiled", "eager": "eager", "inductor": "inductor"}
FUSE_OF_EXECUTION = {v: k for k, v in EXECUTION_OF_FUSE.items()}
#: Keys of a ``[[models]]`` entry of a spec: your own or a library's model, as ``lower`` takes it.
LIBRARY_KEYS = ("name", "module", "hf", "diffusers", "timm", "config", "set", "kwarg", "inputs")
DEFAULT_SHAPE = "default"  # the shape column of a model run at its own default shape


class GridError(ValueError):
    """A grid that cannot be built (a bad spec file, an unknown option); one line."""


@dataclass(frozen=True)
class Point:
    """One lowering: what ``mhlo-cost lower --model M --shape S --parallel P --devices N --dtype D`` makes (with a
    ``precision`` recipe other than bf16: its linears as :mod:`mhlo_cost.lower.models.stdit3_quant` and
    :mod:`mhlo_cost.lower.models.gpt_quant` lower them)."""

    model: str
    shape: str
    parallel: str
    devices: int
    dtype: str
    source: tuple = ()  # a [[models]] entry's request: (key, value) pairs (module / hf / ..., config, set, kwarg)
    precision: str = DEFAULT_PRECISION

    def label(self) -> str:
        recipe = "" if self.precision == DEFAULT_PRECISION else f" {self.precision}"
        return f"{self.model} {self.shape} {self.parallel}:{self.devices} {self.dtype}{recipe}"


@dataclass
class Grid:
    points: list[Point]
    hardware: list[str]
    options: dict = field(default_factory=dict)  # MODEL_OPTIONS given (None values dropped)
    steps: int = 1
    fuse: str = "none"
    conv_padding: str = "xla"


def parse_strategy(text: str) -> tuple[str, int]:
    """``ulysses:8`` -> ("ulysses", 8)."""
    name, sep, n = str(text).partition(":")
    if not sep or not n.isdigit() or int(n) < 1:
        raise GridError(f"a strategy is PARALLEL:DEVICES (ulysses:8), got {text!r}")
    return name, int(n)


def library_points(entries: list, pairs: list, dtypes: list, precisions: tuple = (DEFAULT_PRECISION,)) -> list[Point]:
    """The points of a spec's ``[[models]]``: one per input set (the shape column), strategy, dtype and
    precision."""
    points = []
    for e in entries:
        kind = next(k for k in ("module", "hf", "diffusers", "timm") if k in e)
        source = ((kind, e[kind]), ("config", e.get("config")), ("set", tuple(e.get("set", ()))),
                  ("kwarg", tuple(e.get("kwarg", ()))))
        name = e.get("name") or (e[kind] if kind == "module" else f"{kind}:{e[kind]}")
        for inputs, (p, n), d, r in itertools.product(e["inputs"], pairs, dtypes, precisions):
            points.append(Point(str(name), " ".join(map(str, inputs)), p, int(n), d, source, r))
    return points


def _listed(settings: dict, key: str, default: list) -> list:
    """The values of list key ``key`` (``default`` where none), each once in the order given, no more than the
    ``values`` limit (:mod:`mhlo_cost.studies.limits`)."""
    from ..limits import count

    values = _unique(list(settings.get(key) or default))
    count(len(values), "values", key)
    return values


def make_grid(settings: dict) -> Grid:
    """The grid of ``settings`` (a spec's keys, flags already merged in): points in the order the lists
    give them (shape, then strategy, then dtype), every one of them, valid or not; each list and the
    grid within the limits of :mod:`mhlo_cost.studies.limits` (counted before any point is made)."""
    from ..limits import check, count

    model = "stdit3" if settings.get("model") is None else settings["model"]  # ('' refused, not the default)
    shapes = _listed(settings, "shape", [DEFAULT_SHAPE])
    if settings.get("strategies"):
        if settings.get("parallel") or settings.get("devices"):
            raise GridError("give either --strategies PARALLEL:DEVICES or --parallel and --devices, not both")
        pairs = [parse_strategy(s) for s in _listed(settings, "strategies", [])]
    else:
        parallel, devices = _listed(settings, "parallel", ["none"]), _listed(settings, "devices", [1])
        count(len(parallel) * len(devices), "values", "parallel x devices")
        pairs = list(itertools.product(parallel, devices))
    for name, n in pairs:
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise GridError(f"devices must be positive integers, got {n!r}")
        check("devices", n, "devices")
    dtypes = [_dtype(d) for d in _listed(settings, "dtype", ["bf16"])]
    precisions = _unique([_precision(r) for r in _listed(settings, "precision", [DEFAULT_PRECISION])])
    hardware = _listed(settings, "hardware", [])
    if not hardware:
        raise GridError("name at least one hardware profile: --hardware NAME ... (mhlo-cost hardware lists them)")
    steps = settings.get("steps")
    steps = 1 if steps is None else steps
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise GridError(f"steps must be a positive integer, got {steps!r}")
    fuse = _fuse(settings)
    inputs = sum(len(e.get("inputs") or ()) for e in settings.get("models") or ())
    count((len(shapes) + inputs) * len(pairs) * len(dtypes) * len(precisions) * max(1, len(hardware)), "points",
          "the sweep (points x hardware profiles)")
    points = [Point(model, str(s), p, int(n), d, (), r)
              for s, (p, n), d, r in itertools.product(shapes, pairs, dtypes, precisions)]
    if settings.get("models"):  # your own / library models; the bundled one only where named too
        points = (points if settings.get("model") else []) + library_points(settings["models"], pairs, dtypes,
                                                                            tuple(precisions))
    options = {k: v for k, v in (settings.get("options") or {}).items() if v is not None and v is not False}
    for key, limit in (("layers", "layers"), ("depth", "layers"), ("batch", "batch"), ("tokens", "positions")):
        if key in options:
            check(limit, options[key], key)
    return Grid(_unique(points), _unique(hardware), options, steps, fuse,
                settings.get("conv_padding") or "xla")


def _fuse(settings: dict) -> str:
    """The grid's fuse setting (its cache key) from ``fuse`` and ``execution``, each checked."""
    for key, known in (("fuse", ("none", "elementwise")), ("conv_padding", ("xla", "dense")),
                       ("execution", tuple(FUSE_OF_EXECUTION))):
        if settings.get(key) is not None and settings[key] not in known:
            raise GridError(f"{key} must be one of {', '.join(known)}, got {settings[key]!r}")
    fuse = settings.get("fuse") or "none"
    if settings.get("execution") is not None:
        if settings.get("fuse") not in (None, "none", FUSE_OF_EXECUTION[settings["execution"]]):
            raise GridError(f"fuse = {settings['fuse']!r} is execution = 'compiled'; it does not go with "
                            f"execution = {settings['execution']!r}")
        fuse = FUSE_OF_EXECUTION[settings["execution"]]
    return fuse


def _unique(items: list) -> list:
    return list(dict.fromkeys(items))


def _dtype(text: str) -> str:
    """The short name (bf16, f32...) of a dtype as --dtype takes it."""
    from ...lower.frontends import DTYPES
    from ...lower.frontends.inputs import dtype_name
    from ...machines.precision import dtype_hint

    if dtype_hint(str(text)):  # fp8, int8, int4...: a precision recipe, not a dtype of the whole model
        raise GridError(dtype_hint(str(text)))
    try:
        full = dtype_name(str(text))
    except Exception as e:  # noqa: BLE001 - the message of the dtype parser, as one line
        raise GridError(f"--dtype: {e}") from None
    short = {v: k for k, v in DTYPES.items()}
    return short.get(full, full)


def _precision(text) -> str:
    """The recipe's name as ``--precision`` takes it (``fp8-rowwise``); GridError names the accepted ones. A recipe
    that sets the KV cache is refused: a sweep lowers forwards, which keep none."""
    from ...machines.precision import KV_ONLY, PrecisionError, RECIPES, parse

    try:
        recipe = parse(str(text), "--precision")
    except PrecisionError as e:
        raise GridError(str(e)) from None
    if recipe.kv is not None:
        linears = ", ".join(n for n in RECIPES if n not in KV_ONLY)
        raise GridError(f"--precision {recipe.name}: a sweep lowers forwards, which keep no KV cache (serve lowers "
                        f"the fp8 cache); the recipes for the linears: {linears}")
    return recipe.name


def build_config(point: Point, options: dict):
    """(configuration, plan text) of ``point``: what ``lower`` builds. ValueError / FrontendError say why not.
    ``deployed`` (stdit3 as OpenSora 1.2 deploys it, lowered with torchax) takes no parallel strategy."""
    from ...lower.frontends.bundled import bundled_config, check_deployed

    options = dict(options)
    if options.pop("deployed", False):
        check_deployed(point.model, "torchax", point.parallel)
    devices = None if point.parallel == "none" and point.devices == 1 else point.devices
    shape = None if point.shape == DEFAULT_SHAPE else point.shape
    return bundled_config(point.model, parallel=point.parallel, devices=devices, shape=shape,
                          dtype=point.dtype, **options)


def skip_reason(point: Point, options: dict) -> str | None:
    """Why ``point`` cannot be lowered (a strategy on one device, a mesh or head count that does not divide,
    an option the model does not take), or None where it can."""
    from ...lower.frontends import FrontendError

    if point.source and (point.parallel, point.devices) != ("none", 1):
        return "parallel strategies apply to the bundled stdit3 only"
    if point.source:
        return (f"--precision {point.precision}: the recipes lower the bundled models' linears (stdit3, gpt); a "
                "[[models]] entry runs in its dtype") if point.precision != DEFAULT_PRECISION else None
    if point.parallel == "none" and point.devices != 1:
        return f"the unsharded model runs on one device, not {point.devices}"
    if point.parallel != "none" and point.devices == 1:
        return f"{point.parallel} on one device is the unsharded model (parallel none)"
    try:
        cfg, _ = build_config(point, options)
    except (FrontendError, ValueError) as e:
        return str(e)
    return recipe_reason(point, cfg, options)


def recipe_reason(point: Point, cfg, options: dict) -> str | None:
    """Why ``point``'s precision recipe cannot be lowered on its model (None: it can, or the point is bf16)."""
    from ...lower.frontends import FrontendError

    if point.precision == DEFAULT_PRECISION:
        return None
    if options.get("deployed"):
        return (f"--precision {point.precision}: --deployed is OpenSora's torch module as it ships (bf16); the "
                "recipes lower the JAX model's linears")
    plan = getattr(cfg, "plan", None)  # (a ShardedConfig: the configuration and its plan)
    try:
        lowering_of(point.model).check(getattr(cfg, "cfg", cfg), recipe_of(point), plan.strategy if plan else "none")
    except (FrontendError, ValueError) as e:
        return str(e)
    return None


def recipe_of(point: Point):
    """The point's :class:`~mhlo_cost.machines.precision.Recipe`."""
    from ...machines.precision import parse

    return parse(point.precision)


def lowering_of(model: str):
    """The module that lowers ``model``'s forward under a recipe: ``check(cfg, recipe, strategy)``,
    ``lower(cfg, recipe, plan)``."""
    from ...lower.models import gpt_quant, stdit3_quant

    return stdit3_quant if model == "stdit3" else gpt_quant
