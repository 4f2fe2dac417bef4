"""The lowering behind ``mhlo-cost lower``, as a library: what to lower and how, in one request.

:class:`LowerRequest` names the model (a bundled one, a ``package.module:factory``, a transformers /
diffusers / timm class built from a configuration, or an object in hand), its inputs and the frontend;
:func:`lower_request` turns it into a :class:`~mhlo_cost.lower.frontends.Lowered` (MLIR text or bytecode and
an ``info`` dict); :func:`mhlo_cost.lower.frontends.write` puts that in a file. :func:`lower_model` is the one call for a model in
hand: ``lower_model(model, "1x128:int64").analyze().summary``.

The steps: build the model (``meta`` tensors or flax.nnx abstract state: never weights), make a JAX
function of it and its abstract arguments (a "traceable": torchax for torch modules, the function
itself for JAX; both in :mod:`.build`), apply the request's ``transforms`` to that pair, lower it with
``jax.jit(...).lower``. A bundled model's configuration and the deployed STDiT3's checks are in :mod:`.bundled`.
Transforms are where options that change *what* is lowered plug in (a training step around the
forward, issue 15): each is ``f(fn, args, info) -> (fn, args)``.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

from . import FrontendError, Lowered, get_frontend
from .build import build_object, is_torch_module, traceable
from .bundled import check_deployed

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
    stage(f"making a JAX function of it ({req.frontend or ('torchax' if is_torch_module(obj) else 'jax')})")
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
