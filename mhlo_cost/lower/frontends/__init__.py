"""Frontends: turn a model into StableHLO / MHLO.

Each frontend is a module exposing ``lower(model: str, cfg, *, locations: bool = True) -> Lowered`` for
the bundled models. Modules are imported lazily (``importlib``) so the jax path never imports torch.
``mhlo-cost lower`` goes through :mod:`.api` (``LowerRequest``: bundled models, a user's module,
transformers / diffusers / timm from :mod:`.hub`), then :func:`write` (the format the file name asks for);
:func:`dump` is the two in one call for bundled models.
"""
from __future__ import annotations

import gzip
import importlib
import io
import os
import resource
import time
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

#: frontend name -> module path (imported on first use)
FRONTENDS = {
    "jax": "mhlo_cost.lower.frontends.jax_frontend",
    "torchax": "mhlo_cost.lower.frontends.torchax_frontend",
    "torch-xla": "mhlo_cost.lower.frontends.torch_xla_frontend",
}

#: bundled models (every frontend may support a subset)
MODELS = ("stdit3", "gpt")

#: pip extra that brings each frontend's dependencies
_EXTRAS = {"torchax": "torch", "torch-xla": "torch-xla"}

DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}


class FrontendError(RuntimeError):
    """A frontend cannot be used (unknown, not written, or a dependency missing) or a bad request."""


@dataclass
class Lowered:
    """What a frontend returns: the module as text or as MLIR bytecode (one of the two is set)."""

    text: str | None = None
    bytecode: bytes | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if (self.text is None) == (self.bytecode is None):
            raise ValueError("Lowered needs exactly one of text and bytecode")

    def analyze(self, entry: str | None = None):
        """The :class:`~mhlo_cost.analysis.Analysis` of this module."""
        from ...analysis import analyze

        return analyze(self.text if self.text is not None else self.bytecode, entry=entry)


def get_frontend(name: str) -> ModuleType:
    """Import the frontend module; FrontendError with one clear sentence if that is impossible."""
    if name not in FRONTENDS:
        raise FrontendError(f"unknown frontend {name!r} (known: {', '.join(FRONTENDS)})")
    modname = FRONTENDS[name]
    try:
        return importlib.import_module(modname)
    except ModuleNotFoundError as e:
        missing = e.name or ""
        if missing == modname:
            raise FrontendError(f"frontend {name!r} is not available in this installation "
                                f"(module {modname} is missing)") from None
        extra = _EXTRAS.get(name)
        hint = f"; install it with: pip install 'mhlo-cost[{extra}]'" if extra else ""
        raise FrontendError(f"frontend {name!r} needs the package {missing!r}, which is not installed{hint}") \
            from None


def lower(frontend: str, model: str, cfg=None, *, locations: bool = True) -> Lowered:
    from .preflight import relative_locations

    with relative_locations():  # file names relative to their package in the op locations
        return get_frontend(frontend).lower(model, cfg, locations=locations)


# --------------------------------------------------------------------------------------------------------
# Configurations
# --------------------------------------------------------------------------------------------------------


def default_config(model: str):
    if model == "stdit3":
        from ..models.config import STDiT3Config

        return STDiT3Config()
    if model == "gpt":
        from ..models.gpt import GPTConfig

        return GPTConfig()
    raise FrontendError(f"unknown model {model!r} (known: {', '.join(MODELS)})")


def make_config(model: str, *, shape: str | None = None, small: bool = False, batch: int | None = None,
                tokens: int | None = None, dtype: str | None = None, depth: int | None = None,
                hidden: int | None = None, heads: int | None = None, layers: int | None = None,
                scan: bool = False):
    """A model configuration from the command-line style overrides (None: keep the default)."""
    cfg = default_config(model)
    if dtype is not None:
        from .inputs import weight_dtype

        dtype = weight_dtype(DTYPES.get(dtype, dtype))
    if model == "stdit3":
        if layers is not None:
            raise FrontendError("--layers applies to gpt; use --depth for stdit3")
        if scan:
            raise FrontendError("--scan applies to gpt only")
        if small:
            cfg = cfg.small()
        if shape is not None or not small:
            from ..models.config import VideoShape

            try:
                cfg = cfg.with_shape(VideoShape.parse("204_640_360" if shape is None else shape))  # ("" refused)
            except ValueError as e:
                raise FrontendError(str(e)) from None
        over = {"batch": batch, "caption_tokens": tokens, "dtype": dtype, "depth": depth, "hidden": hidden,
                "heads": heads}
    else:
        if shape is not None:
            raise FrontendError("--shape applies to stdit3 only (use --tokens for the gpt sequence length)")
        if depth is not None:
            raise FrontendError("--depth applies to stdit3; use --layers for gpt")
        if small:
            raise FrontendError("--small applies to stdit3 only (gpt is small already)")
        over = {"batch": batch, "seq": tokens, "dtype": dtype, "layers": layers, "hidden": hidden,
                "heads": heads, "scan": scan or None}
    cfg = replace(cfg, **{k: v for k, v in over.items() if v is not None})
    for name in ("batch", "hidden", "heads", "depth", "layers", "seq", "caption_tokens"):
        v = getattr(cfg, name, None)
        if v is not None and (not isinstance(v, int) or v <= 0):
            raise FrontendError(f"{name} must be a positive integer, got {v!r}")
    if cfg.hidden % cfg.heads:
        raise FrontendError(f"hidden ({cfg.hidden}) must be a multiple of heads ({cfg.heads})")
    if model == "stdit3" and (cfg.head_dim % 2 or cfg.hidden % 4):
        raise FrontendError(f"stdit3 needs an even head dim and hidden % 4 == 0 (RoPE, 2-D position "
                            f"embedding), got hidden {cfg.hidden}, heads {cfg.heads}")
    return cfg


def describe(model: str, cfg) -> str:
    if model == "stdit3":
        return (f"stdit3 latent {cfg.latent_t}x{cfg.latent_h}x{cfg.latent_w} (T={cfg.tokens_t}, "
                f"S={cfg.tokens_s}), B={cfg.batch}, depth {cfg.depth}, hidden {cfg.hidden}, heads {cfg.heads}, "
                f"caption {cfg.caption_tokens} tokens, {cfg.dtype}")
    return (f"gpt {cfg.layers} layers{' (scan)' if cfg.scan else ''}, hidden {cfg.hidden}, heads {cfg.heads}, "
            f"seq {cfg.seq}, B={cfg.batch}, vocab {cfg.vocab}, {cfg.dtype}")


# --------------------------------------------------------------------------------------------------------
# Format conversions (through jax's MLIR bindings, which register the StableHLO / MHLO dialects)
# --------------------------------------------------------------------------------------------------------


def _ir_context():
    from ...ir.loader import make_context  # func, stablehlo, chlo, mhlo, sdy: the analyzer's own context

    return make_context()


def _strip(module) -> None:
    from jaxlib.mlir.passmanager import PassManager

    PassManager.parse("builtin.module(strip-debuginfo)").run(module.operation)


def to_bytecode(text: str, *, locations: bool = True) -> bytes:
    from jaxlib.mlir import ir

    with _ir_context():
        module = ir.Module.parse(text)
        if not locations:
            _strip(module)
        buf = io.BytesIO()
        module.operation.write_bytecode(buf)
        return buf.getvalue()


def to_text(bytecode: bytes, *, locations: bool = True) -> str:
    from jaxlib.mlir import ir

    with _ir_context():
        module = ir.Module.parse(bytecode)
        if not locations:
            _strip(module)
        return module.operation.get_asm(enable_debug_info=locations, large_elements_limit=None)


# --------------------------------------------------------------------------------------------------------
# dump
# --------------------------------------------------------------------------------------------------------


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (Linux reports KiB, macOS bytes)."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / (1024 * 1024) if os.uname().sysname == "Darwin" else r / 1024


@dataclass
class DumpResult:
    path: str | None
    format: str  # "text" or "bytecode"
    nbytes: int
    seconds: float  # lowering (+ conversion)
    peak_rss_mb: float
    text: str | None = None  # kept when writing to stdout / when asked


def output_format(path: str | None) -> tuple[str, bool]:
    """("text" | "bytecode", gzip?) from the file name: .mlirbc -> bytecode, a trailing .gz -> gzip."""
    if path is None:
        return "text", False
    base, gz = (path[:-3], True) if path.endswith(".gz") else (path, False)
    return ("bytecode" if base.endswith(".mlirbc") else "text"), gz


def resolve_spec(spec: str):
    """The object named by ``'package.module:attr'`` (``attr`` may be dotted); FrontendError otherwise.

    The current folder is searched first, as ``python -m`` does, so a user's own package is found when
    the command runs from their project."""
    import sys

    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise FrontendError(f"expected 'package.module:factory', got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        obj = importlib.import_module(mod_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except ImportError as e:
        raise FrontendError(f"cannot load {spec}: {e} (searched the current folder {cwd} and sys.path)") from None
    except AttributeError as e:
        raise FrontendError(f"cannot load {spec}: {e}") from None
    return obj


def lower_module(frontend: str | None, spec, input_shapes, dtype: str | None = "float32", *,
                 locations: bool = True) -> Lowered:
    """A user's own model, ``'package.module:factory'`` (or the object): an ``nn.Module`` (torchax,
    torch-xla), a JAX function or a flax.nnx Module (jax), lowered with inputs of ``input_shapes``
    (bare shapes in ``dtype``). The general form is :func:`mhlo_cost.lower.frontends.api.lower_request`."""
    from .api import LowerRequest, lower_request

    return lower_request(LowerRequest(module=spec, inputs=tuple(input_shapes), frontend=frontend, dtype=dtype,
                                      locations=locations))


def check_output(path: str | None, force: bool = False) -> None:
    """Refuse, before any work, an output that exists (without ``force``) or whose folder does not."""
    if path is None:
        return
    if os.path.exists(path) and not force:
        raise FileExistsError(f"{path} exists; pass --force to overwrite it")
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise FileNotFoundError(f"directory {os.path.dirname(os.path.abspath(path))} does not exist")


def write(low: Lowered, path: str | None, *, locations: bool = True, keep_text: bool = False,
          seconds: float | None = None) -> DumpResult:
    """Write a Lowered to ``path`` in the format its name asks for (None: keep the text only)."""
    fmt, gz = output_format(path)
    t0 = time.perf_counter()
    if fmt == "bytecode":
        data = low.bytecode if low.bytecode is not None else to_bytecode(low.text, locations=locations)
        text = None
    else:
        text = low.text if low.text is not None else to_text(low.bytecode, locations=locations)
        data = text.encode()
    if path is not None:  # through the one writer (atomic, recorded as mhlo-cost's); gzip without a time stamp
        from ...files.write import write as write_file

        write_file(path, gzip.compress(data, compresslevel=6, mtime=0) if gz else data)
    spent = (low.info.get("seconds", 0.0) if seconds is None else seconds) + time.perf_counter() - t0
    return DumpResult(path=path, format=fmt, nbytes=len(data), seconds=spent, peak_rss_mb=peak_rss_mb(),
                      text=text if (keep_text or path is None) else None)


def dump(model: str, cfg=None, path: str | None = None, *, frontend: str = "jax", locations: bool = True,
         force: bool = False, keep_text: bool = False, module: str | None = None, input_shapes=(),
         dtype: str | None = None) -> DumpResult:
    """Lower ``model`` (or a user's ``module``) with ``frontend`` and write it to ``path`` (None: return
    the text only)."""
    if module is None and model not in MODELS:
        raise FrontendError(f"unknown model {model!r} (known: {', '.join(MODELS)})")
    check_output(path, force)
    t0 = time.perf_counter()
    if module is not None:
        low = lower_module(frontend, module, input_shapes, dtype, locations=locations)
    else:
        low = lower(frontend, model, cfg if cfg is not None else default_config(model), locations=locations)
    return write(low, path, locations=locations, keep_text=keep_text, seconds=time.perf_counter() - t0)
