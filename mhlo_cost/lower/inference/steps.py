"""What to lower for inference (:class:`StepRequest`) and the lowering (:func:`lower_step`): the prefill of a
prompt or one decode step, of the bundled GPT (``model="gpt"``) or a transformers causal LM (``hf=CLASS``,
built from a model type or config.json with ``--set`` overrides, as :mod:`mhlo_cost.lower.frontends.hub` does).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..frontends import FrontendError, Lowered

MODES = ("decode", "prefill")
#: The KV caches a transformers step can hold: ``static`` (``StaticCache``, an argument updated in place: what
#: compiled stacks run) or ``dynamic`` (``DynamicCache``, grown by concatenation: what plain ``generate`` runs;
#: :mod:`.hf_dynamic`).
CACHES = ("static", "dynamic")
#: GPTConfig fields a step takes from ``--set`` (the batch is ``batch``, the dtype ``dtype``; the layers are
#: never scanned in a step), each a positive whole number.
GPT_FIELDS = ("vocab", "hidden", "heads", "layers", "seq", "mlp_ratio")
#: What the other GPTConfig fields are given as instead.
GPT_OTHER = {"batch": "--batch", "dtype": "--dtype", "scan": "nothing: a step runs its layers one by one"}


@dataclass(frozen=True)
class ModelFacts:
    """What a step's checks read of its model before it is lowered: layers, attention heads and key/value heads
    (grouped-query attention: fewer), hidden size."""

    layers: int
    heads: int
    kv_heads: int
    hidden: int


@dataclass(frozen=True)
class StepRequest:
    """One inference step: ``mode`` decode (``batch`` sequences, one token each, against ``context`` cached
    positions) or prefill (``tokens`` prompt positions per sequence into a cache of ``context``, at least
    ``tokens``; default the prompt's length)."""

    mode: str = "decode"
    batch: int = 1
    context: int = 2048
    tokens: int = 1
    model: str | None = None  # "gpt": the bundled GPT
    hf: str | None = None  # a transformers class name
    config: str | None = None  # hf: a model type or config.json
    overrides: tuple = ()  # hf: (key, value) pairs; gpt: GPTConfig fields
    dtype: str | None = None  # None: the configuration's (hf), else bfloat16
    locations: bool = True
    routing: str | None = None  # hf: a mixture of experts' routing assumption (None: dropless; see frontends.moe)
    precision: str | None = None  # a precision recipe (machines.precision; None: bf16, the model's dtype)
    cache: str = "static"  # one of CACHES
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def check(self) -> None:
        if self.mode not in MODES:
            raise FrontendError(f"unknown inference step {self.mode!r} (decode or prefill)")
        if (self.model is None) == (self.hf is None):
            raise FrontendError("name one model for the inference step: --model gpt or --hf CLASS")
        if self.model not in (None, "gpt"):
            raise FrontendError(f"the inference steps know the bundled gpt, not {self.model!r}")
        for name, v in (("--batch", self.batch), ("--context", self.context), ("--tokens", self.tokens)):
            if not isinstance(v, int) or v < 1:
                raise FrontendError(f"{name} must be a positive integer, got {v!r}")
        if self.mode == "prefill" and self.tokens > self.context:
            raise FrontendError(f"the prompt ({self.tokens} tokens) does not fit the cache ({self.context})")
        from ..frontends.inputs import weight_dtype

        if self.dtype is not None:
            weight_dtype(self.dtype)
        if self.model:
            gpt_config(self)  # the --set fields, checked without building anything
            if self.routing is not None:
                raise FrontendError("--routing applies to mixture-of-experts models (--hf), not to the bundled gpt")
        if self.routing is not None:
            from ..frontends.moe import Routing

            Routing.parse(self.routing)
        self.recipe()
        self._check_cache()

    def _check_cache(self) -> None:
        """A dynamic cache is transformers' (``--hf``) at the model's own widths, its prefill's cache the prompt."""
        if self.cache not in CACHES:
            raise FrontendError(f"unknown KV cache {self.cache!r}: choose one of {', '.join(CACHES)}")
        if self.cache == "static":
            return
        if not self.hf:
            raise FrontendError("transformers' dynamic cache (plain generate) needs a transformers model (--hf); "
                                "the bundled gpt is a JAX model with a static cache")
        if self.precision is not None:
            raise FrontendError("--precision lowers the linears and cache of the static-cache step; plain generate "
                                "with a dynamic cache is priced at the model's dtype")
        if self.mode == "prefill" and self.context != self.tokens:
            raise FrontendError(f"a dynamic cache holds what it has seen: a prefill of {self.tokens} tokens makes a "
                                f"cache of {self.tokens}, not --context {self.context}")

    def recipe(self):
        """The step's :class:`~mhlo_cost.machines.precision.Recipe`; FrontendError for an unknown one, or one the
        model's path cannot lower (a transformers model: :func:`.hf_quant.check`)."""
        from ...machines.precision import PrecisionError, parse

        try:
            recipe = parse(self.precision)
        except PrecisionError as e:
            raise FrontendError(str(e)) from None
        if self.hf:
            from .hf_quant import check

            check(recipe)
        return recipe

    def facts(self) -> ModelFacts:
        """The model's layers, heads and hidden size, from its configuration (a transformers model's is read,
        its weights never built). FrontendError where the configuration is not one the step can lower."""
        self.check()
        if self.model:
            cfg = gpt_config(self)
            return ModelFacts(cfg.layers, cfg.heads, cfg.heads, cfg.hidden)
        from ..frontends import hub

        cfg = hub.hf_model_config(self.hf, self.config, dict(self.overrides))
        text = cfg.get_text_config(decoder=True)
        heads = getattr(text, "num_attention_heads", None)
        kv = getattr(text, "num_key_value_heads", None) or heads
        layers, hidden = getattr(text, "num_hidden_layers", None), getattr(text, "hidden_size", None)
        for name, v in (("num_hidden_layers", layers), ("num_attention_heads", heads),
                        ("num_key_value_heads", kv), ("hidden_size", hidden)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise FrontendError(f"{self.hf}: {name} must be a positive whole number, got {v!r}")
        return ModelFacts(layers, heads, kv, hidden)

    def describe(self) -> str:
        what = f"{self.hf} ({self.config or 'default config'})" if self.hf else "the bundled gpt"
        sets = ", ".join(f"{k}={v}" for k, v in self.overrides)
        step = (f"decode step, batch {self.batch}, context {self.context}" if self.mode == "decode" else
                f"prefill of {self.tokens} tokens, batch {self.batch}, cache {self.context}")
        dtype = self.dtype or ("the configuration's dtype (else bfloat16)" if self.hf else "bfloat16")
        routing = f", routing {self.routing}" if self.routing is not None else ""
        precision = f", precision {self.recipe().name}" if self.precision else ""
        cache = ", transformers' DynamicCache (plain generate)" if self.cache == "dynamic" else ""
        return (f"{what}{' with ' + sets if sets else ''}: {step}, {dtype}{precision}{routing}{cache}"
                f"{self._grown()}")

    def _grown(self) -> str:
        """The bundled GPT's position table grown to the context, said (``--set seq=N`` sets it)."""
        if self.model != "gpt":
            return ""
        from ..models.gpt import GPTConfig

        seq = dict(self.overrides).get("seq", GPTConfig.seq)
        if not isinstance(seq, int) or self.context <= seq:
            return ""
        return f" (the position table grown from {seq} to {self.context} rows to hold the context; --set seq=N)"

    def key(self) -> dict:
        """What the lowering depends on (for a cache of lowerings)."""
        key = {"mode": self.mode, "batch": self.batch, "context": self.context,
               "tokens": self.tokens if self.mode == "prefill" else 1, "model": self.model, "hf": self.hf,
               "config": self.config, "overrides": [list(kv) for kv in self.overrides], "dtype": self.dtype,
               "locations": self.locations, "routing": self.routing}
        key |= {"cache": self.cache} if self.cache != "static" else {}  # (static keys unchanged)
        return key | ({"precision": self.recipe().name} if self.precision else {})  # (bf16 keys unchanged)


@dataclass
class Step:
    """A lowered inference step: the IR, the cache it holds, the parameters' bytes and the model's facts
    (``hidden``, ``layers``) the tensor-parallel estimate needs; ``positions``: the longest context the model
    takes (the bundled GPT's position table, a configuration's ``max_position_embeddings``; None: none
    declared)."""

    lowered: Lowered
    layout: object  # CacheLayout
    weight_bytes: int
    hidden: int
    layers: int
    request: StepRequest | None = None
    positions: int | None = None


def gpt_config(req: StepRequest):
    """The bundled GPT's configuration of ``req`` (its ``--set`` fields: :data:`GPT_FIELDS`, each a positive whole
    number; heads dividing hidden). FrontendError names the field."""
    from ..models.gpt import GPTConfig

    sets = dict(req.overrides)
    for key, value in sets.items():
        if key in GPT_OTHER:
            raise FrontendError(f"--set {key}: the bundled gpt's step takes it as {GPT_OTHER[key]}")
        if key not in GPT_FIELDS:
            raise FrontendError(f"--set {key}: the bundled gpt has no field {key!r} (its fields: "
                                f"{', '.join(GPT_FIELDS)})")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise FrontendError(f"--set {key}={value!r}: must be a positive whole number")
    cfg = GPTConfig(dtype=req.dtype or "bfloat16", **sets)
    if cfg.hidden % cfg.heads:
        raise FrontendError(f"the bundled gpt: heads {cfg.heads} do not divide hidden {cfg.hidden}")
    if cfg.vocab > 2**31 - 1:  # its token ids are int32
        raise FrontendError(f"--set vocab={cfg.vocab}: the bundled gpt's token ids are int32, so its vocabulary "
                            "holds at most 2,147,483,647 tokens")
    return cfg


def _gpt(req: StepRequest, info: dict):
    from . import gpt_steps

    cfg = gpt_config(req)
    low, layout, weights = gpt_steps.lower_step(cfg, req.mode, req.batch, req.context, req.tokens, req.recipe())
    return low, layout, weights, cfg.hidden, cfg.layers, gpt_steps.gpt_config(cfg, req.context).seq


def _hf(req: StepRequest, info: dict):
    """The step of a transformers model; ``info`` gets what the lowering says of it (``moe``: the routing and the
    expert loads of a mixture of experts)."""
    import torch

    from ..frontends import hub
    from ..frontends.moe import Routing
    from . import hf_steps

    model = hub.build_hf(req.hf, req.config, dict(req.overrides))  # in the configuration's dtype, if it names one
    dtype = req.dtype or (None if hub.config_dtype(model.config) else "bfloat16")
    model = (model.to(getattr(torch, dtype)) if dtype else model).eval()
    text = model.config.get_text_config(decoder=True)
    routing = None if req.routing is None else Routing.parse(req.routing)
    if req.cache == "dynamic":
        from . import hf_dynamic

        low, layout, weights = hf_dynamic.lower_step(model, req.mode, req.batch, req.context, req.tokens,
                                                     locations=req.locations, routing=routing, info=info)
    else:
        low, layout, weights = hf_steps.lower_step(model, req.mode, req.batch, req.context, req.tokens,
                                                   locations=req.locations, routing=routing, info=info,
                                                   recipe=req.recipe())
    experts = expert_weight_bytes(model)  # (after the lowering: at the recipe's widths)
    if experts:
        info["expert_weight_bytes"] = experts
    positions = getattr(text, "max_position_embeddings", None)  # none declared: rotary models without a limit
    positions = positions if isinstance(positions, int) and not isinstance(positions, bool) else None
    return low, layout, weights, text.hidden_size, text.num_hidden_layers, positions


def expert_weight_bytes(model) -> int:
    """Bytes of the routed experts' parameters (those under a module whose path has an ``experts`` part, not
    ``shared_experts``): what expert parallelism splits."""
    total = 0
    for name, p in model.named_parameters():
        if "experts" in name.split("."):
            total += p.numel() * p.element_size()
    return int(total)


def lower_step(req: StepRequest) -> Step:
    """Lower ``req``'s step from shapes (no weights). FrontendError for what cannot be."""
    import os

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    req.check()
    from ..frontends.api import LowerFailed, quiet

    t0 = time.perf_counter()
    said: dict = {}
    with quiet():
        try:
            low, layout, weights, hidden, layers, positions = (_gpt if req.model else _hf)(req, said)
        except (FrontendError, LowerFailed):
            raise
        except Exception as e:  # the model's code or the frameworks tracing it
            if os.environ.get("MHLO_COST_DEBUG"):
                raise
            first = (str(e).strip().splitlines() or [""])[0][:300]
            raise LowerFailed(f"lowering the {req.mode} step of {req.hf or req.model} failed: "
                              f"{type(e).__name__}: {first} (MHLO_COST_DEBUG=1 shows the traceback)") from e
    text = low.as_text(debug_info=req.locations)
    info = {"frontend": "torchax" if req.hf else "jax", "model": req.hf or req.model, "step": req.mode,
            "seconds": time.perf_counter() - t0} | said
    return Step(Lowered(text=text, info=info), layout, weights, hidden, layers, req, positions)
