"""``mhlo-cost sweep`` over training configurations: a spec with a ``[training]`` table, delegated to
:mod:`mhlo_cost.studies.plan`.

    model = "gpt-175b"          # a scale model (train-plan --model), or "gpt" with layers/hidden/... below
    devices = 64                # GPU count(s)
    hardware = "selene"         # system profile(s)
    [training]
    global_batch = 64
    tensor = [4, 8]             # each key optional; a list or one value
    pipeline = [4, 8, 16]
    data = 1
    micro_batch = [1, 2]
    recompute = ["full", "selective"]
    interleave = [1, 2, 3]

The configurations are :func:`mhlo_cost.studies.plan.search.splits` of each GPU count (the ones ``train-plan --sweep``
ranks; sequence parallelism wherever ``t > 1``), kept where their degrees are among those listed; each is
planned as ``train-plan`` plans it (one lowering per distinct layer shape, kept in the cache as
``train-plan`` keeps it, then arithmetic; no worker pool is needed). One row per (configuration, hardware) in
the sweep table's columns (``parallel``: the split; ``time_step_s``: the iteration; ``peak_bytes``: the first stage's
memory), so ``--best`` ranks them as ``train-plan --sweep`` does: by iteration time among those that fit.
"""
from __future__ import annotations

import pandas as pd

from .grid import GridError

_INT, _TEXT = "a whole number", "a string"
#: [training] key -> (what one value is, whether it takes a list)
KEYS = {"tensor": (_INT, True), "pipeline": (_INT, True), "data": (_INT, True), "micro_batch": (_INT, True),
        "recompute": (_TEXT, True), "interleave": (_INT, True), "global_batch": (_INT, False),
        "dp_comm": (_TEXT, False), "layers": (_INT, False), "hidden": (_INT, False), "heads": (_INT, False),
        "seq": (_INT, False), "vocab": (_INT, False), "ffn": (_INT, False)}
#: Top-level keys a training spec may hold besides [training].
TOP = ("model", "devices", "hardware", "training")
#: Top-level key -> (what one value is, whether it takes a list).
TOP_TYPES = {"model": (_TEXT, False), "devices": (_INT, True), "hardware": (_TEXT, True)}
DEFAULTS = {"micro_batch": [1, 2, 4], "recompute": ["full", "selective"], "interleave": [1, 2, 3]}


def _ok(v, kind: str) -> bool:
    if kind == _TEXT:
        return isinstance(v, str)
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def check_spec(spec: dict, path: str) -> dict:
    """A training spec's keys checked by name and type (``devices = "8"`` and ``8.0`` are not whole numbers);
    list keys made lists, each value once."""
    unknown = sorted(set(spec) - set(TOP))
    if unknown:
        raise GridError(f"{path}: a [training] spec takes {', '.join(TOP)}; unknown key(s) {', '.join(unknown)}")
    tr = spec["training"]
    if not isinstance(tr, dict):
        raise GridError(f"{path}: key 'training' must be a table ([training]), got {tr!r}")
    bad = sorted(set(tr) - set(KEYS))
    if bad:
        raise GridError(f"{path}: [training]: unknown key(s) {', '.join(bad)} (known: {', '.join(KEYS)})")
    for key, (kind, many) in KEYS.items():
        if key in tr:
            tr[key] = _typed(tr[key], kind, many, f"{path}: [training] key {key!r}", LIMIT_OF.get(key))
    for key, (kind, many) in TOP_TYPES.items():
        if key in spec:
            spec[key] = _typed(spec[key], kind, many, f"{path}: key {key!r}", LIMIT_OF.get(key))
    return spec


def _typed(v, kind: str, many: bool, what: str, limit: str | None = None):
    """``v`` checked to be one ``kind`` (or, ``many``, a non-empty list of them: made a list, each value once),
    each no more than ``limit`` (:mod:`mhlo_cost.studies.limits`)."""
    from ..limits import check, count

    if many and not isinstance(v, list):
        v = [v]
    if not (all(_ok(x, kind) for x in v) and v if many else _ok(v, kind)):
        want = f"{kind} (positive)" if kind == _INT else kind
        shown = repr(v[0] if many and len(v) == 1 else v)
        raise GridError(f"{what} must be {want}{' or a list of them' if many else ''}, got {shown}")
    for x in v if many else [v]:
        if limit is not None:
            check(limit, x, what)
    if many:
        v = list(dict.fromkeys(v))
        count(len(v), "values", what)
    return v


#: The limit of each whole-number key's values (:mod:`mhlo_cost.studies.limits`).
LIMIT_OF = {"devices": "devices", "tensor": "devices", "pipeline": "devices", "data": "devices",
            "micro_batch": "batch", "global_batch": "batch", "layers": "layers", "interleave": "layers",
            "seq": "positions"}


#: What a training sweep reads of the settings; a flag setting anything else would be dropped, so it is refused.
TRAINING_SETTINGS = ("model", "devices", "hardware", "training")


def check_settings(settings: dict) -> None:
    """The settings of a training spec with the flags merged in: nothing given that a training sweep would not
    read (a grid's shape, strategies, dtype, steps, execution; model options), and its counts within the limits
    (:mod:`mhlo_cost.studies.limits`: devices per configuration, configurations in all)."""
    from ...studies.limits import check, count
    from ..plan.search import split_count

    unread = sorted(k for k, v in settings.items() if k not in TRAINING_SETTINGS and v not in (None, {}, [], False))
    if unread:
        raise GridError(f"a [training] spec plans training configurations; {', '.join(unread)} "
                        f"{'does' if len(unread) == 1 else 'do'} not apply to it (it takes "
                        f"{', '.join(TRAINING_SETTINGS)})")
    devices = settings.get("devices") or []
    for n in devices:
        check("devices", n, "devices")
    kw = _split_options(settings["training"])
    total = sum(split_count(n, **kw) for n in devices) * len(settings.get("hardware") or [1])
    count(total, "points", "the training sweep (configurations x hardware)")


def _split_options(tr: dict) -> dict:
    """The keywords of :func:`mhlo_cost.studies.plan.search.splits` a [training] table sets: the lists of
    micro-batches, recomputes and interleavings, and the degrees kept (``only``)."""
    kw = {"micro_batches": tuple(tr.get("micro_batch", DEFAULTS["micro_batch"])),
          "recomputes": tuple(tr.get("recompute", DEFAULTS["recompute"])),
          "interleaves": tuple(tr.get("interleave", DEFAULTS["interleave"]))}
    if "tensor" in tr:
        kw["max_t"] = max(tr["tensor"])
    wanted = {"t": tr.get("tensor"), "p": tr.get("pipeline"), "d": tr.get("data")}
    if any(v is not None for v in wanted.values()):
        kw["only"] = lambda t, p, d: all(v is None or x in v for x, v in zip((t, p, d), wanted.values()))
    return kw


def base_config(settings: dict):
    """The model's :class:`~mhlo_cost.studies.plan.config.ScaleConfig` (the split left to the grid), clipping the
    gradients at 1.0 as train-plan does by default (every stack's default max norm: .plan.grad_clip)."""
    from ..plan.config import MODELS, ScaleConfig, model_config

    tr = settings["training"]
    dims = {k: tr[k] for k in ("layers", "hidden", "heads", "seq", "vocab", "ffn") if k in tr}
    extra = {k: tr[k] for k in ("global_batch", "dp_comm") if k in tr} | {"clip_grad": 1.0}
    model = "gpt" if settings.get("model") is None else settings["model"]  # ('' refused, not the default)
    if model in MODELS:
        return model_config(model, **dims, **extra)
    if model != "gpt":
        raise GridError(f"a training sweep takes model = one of {', '.join(MODELS)}, or \"gpt\" with its sizes "
                        f"in [training]; got {model!r}")
    return ScaleConfig(**dims, **extra)


def configurations(settings: dict, gpus: int):
    """(config, reason or None) of ``gpus`` devices: train-plan --sweep's splits, kept where their degrees
    are among the spec's lists."""
    from ..plan.search import splits

    yield from splits(base_config(settings), gpus, **_split_options(settings["training"]))


def training_frame(settings: dict, cache_dir=None, note=None) -> pd.DataFrame:
    """The sweep table of a training spec: one row per (configuration, hardware), grid order; the layers' costs
    kept under the cache root ``cache_dir`` (``note``: :func:`~mhlo_cost.studies.plan.costs.layer_cost`'s)."""
    from ...network import resolve_profile
    from ..plan.plan import plan

    devices = settings.get("devices") or []
    hardware = settings.get("hardware") or []
    if not devices or not hardware:
        raise GridError("a training sweep names devices (the GPU count) and hardware (a system profile)")
    check_settings(settings)
    try:
        why = base_config(settings).model_invalid()  # (what no split can mend: refused, not a table of skips)
        profiles = [(name, resolve_profile(name)) for name in hardware]
    except (TypeError, ValueError) as e:
        raise GridError(str(e)) from None
    if why:
        raise GridError(f"[training]: {why}")
    rows = []
    model = "gpt" if settings.get("model") is None else settings["model"]  # ('' refused, not the default)
    for n in devices:
        for cfg, why in configurations(settings, n):
            for name, hw in profiles:
                row = {"model": model, "shape": f"s{cfg.seq} gb{cfg.global_batch}", "parallel": cfg.label(),
                       "devices": n, "hardware": name, "dtype": "bf16"}
                if why:
                    row.update(status="skipped", reason=why)
                else:
                    row.update(_numbers(plan(cfg, hw, cache_dir, note)))
                rows.append(row)
    df = pd.DataFrame(rows)
    for c in df.columns:  # counts stay exact ints beside the skipped rows' blanks
        if c in INTS or c.startswith("mem_"):
            df[c] = pd.array([None if v is None or v != v else int(v) for v in df[c]], dtype="Int64")
    return df


INTS = ("devices", "t", "p", "v", "d", "micro_batch", "micro_batches", "steps", "peak_bytes", "hbm_bytes", "flops",
        "model_flops")


def _numbers(p) -> dict:
    r = p.row()
    it = p.iteration
    out = {"status": "ok", "reason": ""}
    out.update({k: r[k] for k in ("t", "sp", "p", "v", "d", "micro_batch", "micro_batches", "recompute")})
    out.update(time_step_s=it.total, steps=1, time_run_s=it.total, comm_exposed_s=it.tp_comm + it.p2p + it.dp_exposed,
               peak_bytes=p.memory["total"], hbm_bytes=p.memory.get("capacity"),
               fits="yes" if p.memory.get("fits", True) else "no", utilisation=r["mfu"], flops=r["hardware_flops"])
    out.update({k: r[k] for k in r if k.endswith("_s") or k.startswith("mem_") or k in ("model_flops", "mfu", "hfu")})
    return out
