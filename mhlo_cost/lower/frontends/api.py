"""The lowering behind ``mhlo-cost lower``, as a library: what to lower and how, in one request.

:class:`LowerRequest` names the model (a bundled one, a ``package.module:factory``, a transformers /
diffusers / timm class built from a configuration, or an object in hand), its inputs and the frontend;
:func:`lower_request` turns it into a :class:`~mhlo_cost.lower.frontends.Lowered` (MLIR text or bytecode and
an ``info`` dict); :func:`mhlo_cost.lower.frontends.write` puts that in a file. :func:`lower_model` is the one call for a model in
hand: ``lower_model(model, "1x128:int64").analyze().summary``.

The steps: build the model (``meta`` tensors or flax.nnx abstract state: never weights), make a JAX
function of it and its abstract arguments (a "traceable": torchax for torch modules, the function
itself for JAX), apply the request's ``transforms`` to that pair, lower it with ``jax.jit(...).lower``.
Transforms are where options that change *what* is lowered plug in (a training step around the
forward, issue 15): each is ``f(fn, args, info) -> (fn, args)``.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

from . import FrontendError, Lowered, get_frontend, resolve_spec

Transform = Callable[[Callable, tuple, dict], tuple]


class LowerFailed(RuntimeError):
    """The model's own code failed while it was built or traced; the message is one line with a hint."""


@dataclass
class LowerRequest:
    """What to lower. Exactly one of ``model`` (bundled), ``module`` (``'pkg.mod:factory'`` or an object
    in hand: ``nn.Module``, JAX function, flax.nnx Module) and ``library`` + ``name`` (``hf`` /
    ``diffusers`` / ``timm``) names the model."""

    model: str | None = None
    module: Any = None
    library: str | None = None
    name: str | None = None
    config: Any = None  # bundled: its configuration object; hf / diffusers: a config.json or model type
    overrides: dict = field(default_factory=dict)  # --set key=value on the library configuration
    inputs: tuple = ()  # positional inputs: TensorSpec, shapes, (shape, dtype), tensors, ShapeDtypeStructs
    input_kwargs: dict = field(default_factory=dict)  # keyword inputs (traced), name -> spec
    input_values: dict = field(default_factory=dict)  # keyword inputs by value, name -> ValueSpec (torch modules)
    kwargs: dict = field(default_factory=dict)  # plain keyword values (static)
    frontend: str | None = None  # None: torchax for torch modules, jax for JAX functions and bundled models
    dtype: str | None = None  # cast the model (and bare-shape inputs) to this dtype
    locations: bool = True
    transforms: tuple = ()  # Transform functions applied to the traceable before lowering
    train: Any = None  # a mhlo_cost.lower.training.TrainOptions: lower a whole training step instead of the forward
    verbose: bool = False  # let the libraries' warnings and log messages through
    routing: str | None = None  # mixture of experts: dropless (default) or capacity:F (see .moe)
    deployed: bool = False  # bundled stdit3: the torch module as OpenSora 1.2 deploys it (torchax only)
    amp: str | None = None  # float16 / bfloat16: the forward under CUDA autocast (torch modules; .autocast)

    def source(self) -> str:
        if self.model is not None:
            return self.model
        if self.library is not None:
            return f"{self.library}:{self.name}"
        return self.module if isinstance(self.module, str) else type(self.module).__name__


@contextlib.contextmanager
def quiet(verbose: bool = False):
    """While active (unless ``verbose``), the libraries' Python warnings and log messages are dropped."""
    if verbose:
        yield
        return
    saved = {k: os.environ.get(k) for k in ("TF_CPP_MIN_LOG_LEVEL", "TRANSFORMERS_VERBOSITY")}
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = saved["TF_CPP_MIN_LOG_LEVEL"] or "2"
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _is_torch_module(obj) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def build_object(req: LowerRequest):
    """The model object the request names (torch modules on ``meta``)."""
    if req.library is not None:
        from . import hub

        return hub.build(req.library, req.name, req.config, req.overrides)
    if req.overrides:
        raise FrontendError("--set applies to --hf, --diffusers and --timm models")
    obj = req.module
    if isinstance(obj, str):
        return build_factory(resolve_spec(obj))
    return obj


def _frameworks_of(factory) -> set:
    """Which of torch and flax the factory's own module uses (names a module or a class of theirs)."""
    found = set()
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(factory, type) and issubclass(factory, torch.nn.Module):
        found.add("torch")
    module = sys.modules.get(getattr(factory, "__module__", "") or "")
    for v in vars(module).values() if module is not None else ():
        name = v.__name__ if isinstance(v, type(sys)) else getattr(v, "__module__", None)
        root = name.split(".", 1)[0] if isinstance(name, str) else ""
        if root in ("torch", "flax"):
            found.add(root)
        elif root in ("transformers", "diffusers", "timm", "torchvision"):  # torch models
            found.add("torch")
    return found


def build_factory(factory):
    """Call a user's factory so that no weight is allocated: under ``nnx.eval_shape`` where its module
    uses flax (a flax.nnx Module comes back with abstract state), under ``torch.device('meta')`` where it
    uses torch; a factory of a plain JAX function is just called. A module instance is returned as is."""
    if _is_torch_module(factory):
        return factory
    uses = _frameworks_of(factory)
    if "flax" in uses:
        from flax import nnx

        from .jax_frontend import is_nnx_module

        try:
            obj = nnx.eval_shape(factory)
        except Exception:  # noqa: BLE001 - not a module (a function): called plainly below
            obj = None
        if is_nnx_module(obj):
            return obj
    if "torch" in uses:
        import torch

        with torch.device("meta"):
            return factory()
    return factory()


def traceable(req: LowerRequest, obj):
    """``(fn, args, info)`` of the object: its JAX function and abstract arguments."""
    from .inputs import TensorSpec, parse_input, parse_input_value

    inputs = [parse_input(s) if isinstance(s, str) else s for s in req.inputs]
    values = {k: parse_input_value(f"{k}={v}") if isinstance(v, str) else v for k, v in req.input_values.items()}
    if any(isinstance(s, TensorSpec) and s.name for s in inputs):
        raise FrontendError("keyword inputs go in input_kwargs, not among the positional inputs")
    kw_inputs = {k: parse_input(v) if isinstance(v, str) else v for k, v in req.input_kwargs.items()}
    info = {"model": req.source()}
    if _is_torch_module(obj):
        frontend = req.frontend or "torchax"
        if frontend != "torchax":
            raise FrontendError(f"a torch module in hand lowers with torchax, not {frontend} (torch-xla "
                                "lowers a 'package.module:factory' in its own environment)")
        from . import torchax_frontend as tf

        module = obj if req.dtype is None else obj.to(tf._torch_dtype(req.dtype))
        fn, args = tf.traceable(module.eval(), inputs, input_kwargs=kw_inputs, kwargs=req.kwargs,
                                locations=req.locations, values=values, amp=req.amp)
        from .moe import Routing, wrap

        fn = wrap(fn, module, None if req.routing is None else Routing.parse(req.routing), info)
        info.update(frontend="torchax", model_class=type(obj).__name__)
        dtype = lowered_dtype(req, module)
        if dtype:
            info["dtype"] = dtype + (f", under CUDA autocast to {req.amp}" if req.amp else "")
        if req.amp:
            info["amp"] = req.amp
        return fn, args, info
    if req.amp:
        raise FrontendError(f"--amp {req.amp} runs a torch module under torch.autocast; "
                            f"{info['model']} is not a torch.nn.Module")
    if (req.frontend or "jax") != "jax":
        raise FrontendError(f"{info['model']} is not a torch.nn.Module: it lowers with the jax frontend")
    if values:
        raise FrontendError("--input-value applies to torch modules (a JAX function reads a plain --kwarg)")
    from . import jax_frontend as jf

    fn, args = jf.traceable(obj, inputs, input_kwargs=kw_inputs, kwargs=req.kwargs, locations=req.locations,
                            dtype=req.dtype or "float32")
    info.update(frontend="jax")
    return fn, args, info


def lowered_dtype(req: LowerRequest, module) -> str:
    """The dtype a torch module is lowered in (that of most of its floating parameters) and why:
    ``bfloat16 (the configuration's dtype)``; "" for a module without floating parameters."""
    counts: dict[str, int] = {}
    for p in module.parameters():
        if p.is_floating_point():
            name = str(p.dtype).removeprefix("torch.")
            counts[name] = counts.get(name, 0) + p.numel()
    if not counts:
        return ""
    name = max(sorted(counts), key=counts.get)
    if req.dtype is not None:
        why = "--dtype"
    elif req.library == "hf" and _config_dtype(module) is not None:
        why = "the configuration's dtype"
    else:
        why = "as the model is built; --dtype casts it"
    return f"{name} ({why})"


def _config_dtype(module):
    from .hub import config_dtype

    return config_dtype(getattr(module, "config", None))


def lower_request(req: LowerRequest, stage: Callable[[str], None] | None = None) -> Lowered:
    """Lower the forward of what ``req`` names; FrontendError (one sentence) for what cannot be. ``stage(text)``
    hears what it does as it goes (importing, building, tracing and lowering). A training step (``req.train``
    set) is lowered by :func:`mhlo_cost.lower.run.lower_request`, which knows both."""
    if req.train is not None:
        raise FrontendError("a training step is lowered by mhlo_cost.lower.run.lower_request")
    return run_request(req, stage, _lower_forward)


def run_request(req: LowerRequest, stage: Callable[[str], None] | None,
                lower: Callable[[LowerRequest, Callable[[str], None]], Lowered]) -> Lowered:
    """``lower(req, stage)`` once ``req`` names one model and its extras are there, with the frameworks'
    chatter quieted and source locations made relative; ``info["seconds"]`` says how long it took."""
    from .preflight import check_request, relative_locations

    t0 = time.perf_counter()
    stage = stage or (lambda text: None)
    names = [n for n, v in (("model", req.model), ("module", req.module), ("library", req.library)) if v is not None]
    if len(names) != 1:
        raise FrontendError("name one model: a bundled --model, a --module, or --hf / --diffusers / --timm")
    check_request(req)  # the extras, a library's class name: before a minute of imports
    with quiet(req.verbose), relative_locations():
        low = lower(req, stage)
    low.info.setdefault("seconds", time.perf_counter() - t0)
    return low


def _lower_forward(req: LowerRequest, stage: Callable[[str], None]) -> Lowered:
    if req.amp and (req.model is not None or req.frontend == "torch-xla"):
        raise FrontendError(f"--amp {req.amp} runs a torch module's forward through torchax under autocast, "
                            f"not {req.model or 'torch-xla'}")
    if req.model is not None or req.frontend == "torch-xla":
        stage(f"tracing and lowering with {req.frontend or 'jax'}")
        return _lower_by_frontend(req)
    try:
        return _lower_object(req, stage)
    except (FrontendError, LowerFailed):
        raise
    except Exception as e:  # the model's code, or the frameworks tracing it
        if os.environ.get("MHLO_COST_DEBUG"):
            raise
        raise LowerFailed(failure_message(req, e)) from e


def _lower_object(req: LowerRequest, stage: Callable[[str], None]) -> Lowered:
    from .jax_frontend import lower_traceable

    if req.library is not None:
        stage(f"importing {req.library if req.library != 'hf' else 'transformers'} and torch")
        from . import hub

        hub.import_library(req.library)
    stage("building the model (meta device: no weights)" if req.library or isinstance(req.module, str)
          else "preparing the model")
    obj = build_object(req)
    stage(f"making a JAX function of it ({req.frontend or ('torchax' if _is_torch_module(obj) else 'jax')})")
    fn, args, info = traceable(req, obj)
    for transform in req.transforms:
        fn, args = transform(fn, args, info)
    stage("tracing and lowering to StableHLO")
    return lower_traceable(fn, args, locations=req.locations, info=info)


def failure_message(req: LowerRequest, e: Exception) -> str:
    """One line: what failed, the exception's first line, and what to do where that is known."""
    from .attributes import meta_hint

    first = (str(e).strip().splitlines() or [""])[0]
    if len(first) > 300:
        first = first[:300] + "..."
    msg = f"lowering {req.source()} failed: {type(e).__name__}: {first}"
    if not req.inputs and not req.input_kwargs and not req.input_values:
        msg += " (no input was given: --input SHAPE:DTYPE, by keyword --input NAME=SHAPE:DTYPE)"
    elif isinstance(e, TypeError) and ("required positional argument" in first or "missing" in first):
        msg += " (give the model's inputs with --input SHAPE:DTYPE, by keyword with --input NAME=SHAPE:DTYPE)"
    elif type(e).__name__ in _READS_VALUES or "_is_all_true" in first:
        msg += " (the model reads an input in Python: give it by value, --input-value NAME=[[...]]:DTYPE; a " \
               "vision-language model's image grid, the token ids that place an image)"
    elif meta_hint(first):
        msg += f" ({meta_hint(first)})"
    return msg + " (MHLO_COST_DEBUG=1 shows the traceback)"


#: JAX's errors for a traced value read in Python (a tensor the model's code needs concrete)
_READS_VALUES = ("ConcretizationTypeError", "NonConcreteBooleanIndexError", "TracerBoolConversionError",
                 "TracerIntegerConversionError", "TracerArrayConversionError")


def describe_request(req: LowerRequest) -> str:
    """``LlamaForCausalLM (hf) with inputs 2x16:int64, attention_mask=2x16:int64 with torchax``."""
    if req.model is not None:
        from . import describe

        as_deployed = ", as OpenSora 1.2 deploys it," if req.deployed else ""
        return f"{describe(req.model, getattr(req.config, 'cfg', req.config))}{as_deployed} with {req.frontend or 'jax'}"
    from .inputs import TensorSpec

    def text(s, name=None):
        if isinstance(s, TensorSpec):
            return s.describe()
        shape = getattr(s, "shape", s)
        return f"{name + '=' if name else ''}{'x'.join(str(d) for d in shape) if shape != () else 'scalar'}"

    parts = [text(s) for s in req.inputs] + [text(v, k) for k, v in req.input_kwargs.items()]
    parts += [f"{k}={v}" if isinstance(v, str) else v.describe() for k, v in req.input_values.items()]
    parts += [f"{k}={v!r}" for k, v in req.kwargs.items()]
    what = f"{req.name} ({req.library})" if req.library else req.source()
    frontend = req.frontend or ("torchax" if req.library else "its framework's frontend")
    amp = f" under CUDA autocast to {req.amp}" if req.amp else ""
    return f"{what} with inputs {', '.join(parts) or '(none)'} with {frontend}{amp}"


#: Why the deployed STDiT3 takes no parallel strategy: a user-facing sentence (lower, sweep).
DEPLOYED_NO_PARALLEL = ("the parallel strategies are written in JAX (shard_map with explicit all_to_all, "
                        "all_gather, ppermute); the deployed torch module has no collectives of its own: lower "
                        "the JAX model with --parallel (its counts are the counting module's)")


def check_deployed(model: str, frontend: str, parallel: str = "none", train: bool = False) -> None:
    """FrontendError unless a ``deployed`` request can be lowered: stdit3, through torchax, one device, a forward."""
    if model != "stdit3":
        raise FrontendError(f"--deployed applies to --model stdit3 only, not {model}")
    if frontend != "torchax":
        raise FrontendError(f"--deployed is the torch module as OpenSora 1.2 runs it: it lowers with torchax, "
                            f"not {frontend}")
    if parallel != "none":
        raise FrontendError(f"--deployed takes no --parallel: {DEPLOYED_NO_PARALLEL}")
    if train:
        raise FrontendError("--deployed is OpenSora 1.2's sampling forward (no training step): drop --train, "
                            "or lower the training step of the JAX model")


def _lower_by_frontend(req: LowerRequest) -> Lowered:
    """Bundled models, and torch-xla (its own interpreter): the frontend modules' own entry points."""
    if req.transforms:
        raise FrontendError("transforms apply to --module and library models, not to bundled models yet")
    frontend = req.frontend or "jax"
    if req.model is not None:
        from . import default_config

        cfg = req.config if req.config is not None else default_config(req.model)
        if req.deployed:
            check_deployed(req.model, frontend, "sharded" if hasattr(cfg, "plan") else "none")
            return get_frontend(frontend).lower(req.model, cfg, locations=req.locations, deployed=True)
        return get_frontend(frontend).lower(req.model, cfg, locations=req.locations)
    if not isinstance(req.module, str) or req.input_kwargs or req.kwargs or req.input_values:
        raise FrontendError("torch-xla lowers a 'package.module:factory' with positional inputs only")
    if any(getattr(s, "dtype", None) not in (None, req.dtype) for s in req.inputs):
        raise FrontendError("torch-xla makes random inputs of --dtype (default float32): give shapes without "
                            "a dtype of their own, or lower with torchax")
    shapes = [getattr(s, "shape", s) for s in req.inputs]
    return get_frontend(frontend).lower_module(req.module, shapes, req.dtype or "float32",
                                               locations=req.locations)


def lower_model(model, *inputs, frontend: str | None = None, dtype: str | None = None, locations: bool = True,
                verbose: bool = False, **kwargs) -> Lowered:
    """Lower a model in hand in one call: ``model`` is a ``torch.nn.Module`` (best built on the ``meta``
    device), a JAX function or a flax.nnx Module; ``inputs`` its positional inputs as example tensors
    or arrays, ``jax.ShapeDtypeStruct``, shape tuples, or ``'2x128:int64'`` strings. Keyword arguments
    that are tensors or specs (strings like ``'2x128:int64'`` too) become keyword inputs, the others plain
    values (``return_dict=False``). Returns a Lowered: ``.text`` is the MLIR, ``.analyze()`` its counts.
    """
    from .inputs import TensorSpec

    def is_tensor_like(v):
        return isinstance(v, (str, TensorSpec)) or (hasattr(v, "shape") and hasattr(v, "dtype"))

    req = LowerRequest(module=model, inputs=tuple(inputs), frontend=frontend, dtype=dtype, locations=locations,
                       verbose=verbose, input_kwargs={k: v for k, v in kwargs.items() if is_tensor_like(v)},
                       kwargs={k: v for k, v in kwargs.items() if not is_tensor_like(v)})
    return lower_request(req)


def bundled_config(model: str, *, frontend: str = "jax", parallel: str = "none", devices: int | None = None,
                   mesh: str | None = None, **overrides):
    """(configuration, text) of a bundled model: ``make_config`` overrides (``shape``, ``small``,
    ``depth``...), wrapped with its parallel plan where ``parallel`` names a strategy (stdit3, jax)."""
    from . import make_config

    cfg = make_config(model, **overrides)
    if parallel == "none":
        if devices is not None or mesh is not None:
            raise FrontendError("--devices and --mesh need a --parallel strategy")
        return cfg, ""
    if model != "stdit3":
        raise FrontendError(f"--parallel applies to stdit3 only, not {model}")
    if frontend != "jax":
        raise FrontendError("--parallel needs the jax frontend")
    from ..models import parallel as par

    if devices is None:
        if mesh is None:
            raise FrontendError(f"--parallel {parallel} needs --devices N")
        nx, ny = par.parse_mesh(mesh)
        devices = nx * ny
    plan = par.make_plan(parallel, devices, mesh, cfg)
    return par.ShardedConfig(cfg, plan), f", {plan.describe()}"
