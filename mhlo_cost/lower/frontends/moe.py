"""Mixture-of-experts layers lowered with static shapes, under a routing assumption named by the user.

A router decides at run time which ``k`` of ``E`` experts each token goes to, so a library's expert layer
gathers a data-dependent number of tokens per expert (``torch.where``, ``nonzero``) or runs a grouped GEMM
whose group sizes are data (``aten::_grouped_mm``): neither has a static shape, and a cost estimate made
before the model runs cannot know the decisions anyway. While lowering, every expert layer of a
transformers model (a module made by ``use_experts_implementation``: 3-D ``gate_up_proj`` / ``up_proj`` and
``down_proj`` weights, called as ``experts(hidden, top_k_index, top_k_weights)``) runs :func:`static_forward`
instead, which dispatches by an assumption with the same total work:

- ``dropless`` (the default): every token goes to exactly ``k`` experts, spread evenly, so expert ``e``
  takes ``tokens * k / E`` token copies (the first ``tokens * k mod E`` experts one more). A dropless
  router computes ``tokens * k`` expert rows whatever it decides, so the total is exact.
- ``capacity:F``: every expert computes ``ceil(F * tokens * k / E)`` rows (padding where fewer reach it);
  the token copies beyond ``E`` times that are dropped (they skip the experts, as in Switch and GShard).

The router, the shared experts and everything around the layer run as the library wrote them; the router's
choice of experts is left unused (its probabilities still weigh the outputs). Inside the layer, a scope
named for the routing (``dropless``, ``capacity_1p25``) holds the steps ``dispatch``, ``gate_up_proj``
(or ``up_proj``), ``down_proj`` and ``combine``; each projection is one batched GEMM over the experts
(``dot_general`` with the experts as batch dimension).

Llama 4's expert layer takes no routing (its holder runs every expert on every token): it is routed the same
way by replacing its holder's forward (:mod:`.moe_llama4`).
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass
from fractions import Fraction

from . import FrontendError
from . import moe_llama4

ROUTINGS = ("dropless", "capacity:F")


@dataclass(frozen=True)
class Routing:
    """How token copies reach the experts: ``dropless`` (even spread) or a capacity ``factor``."""

    factor: Fraction | None = None  # None: dropless

    @classmethod
    def parse(cls, text: str | None) -> "Routing":
        """``dropless`` (or None) / ``capacity:1.25``; FrontendError for anything else."""
        if text is None or text == "dropless":
            return cls()
        kind, _, value = text.partition(":")
        if kind == "capacity":
            try:
                factor = Fraction(value)
            except (ValueError, ZeroDivisionError):
                factor = None
            if factor is not None and factor > 0:
                return cls(factor)
        raise FrontendError(f"unknown routing {text!r} (known: dropless, capacity:F with a factor F > 0 "
                            "such as capacity:1.25)")

    def name(self) -> str:
        if self.factor is None:
            return "dropless"
        f = self.factor
        return f"capacity:{f.numerator if f.denominator == 1 else float(f)}"

    def scope(self) -> str:
        """The scope the expert layer's work runs under, naming the assumption in the IR's locations
        (``dropless``, ``capacity_1p25``: no dot, which block names would read as an index)."""
        return self.name().replace(":", "_").replace(".", "p")

    def describe(self) -> str:
        if self.factor is None:
            return "dropless top-k, token copies spread evenly over the experts"
        return f"capacity factor {self.name().partition(':')[2]}, token copies beyond capacity dropped"


@dataclass(frozen=True)
class Load:
    """The work of one expert layer under a routing: token copies each expert takes (``routed``), rows each
    expert computes (``rows``: its load, or the capacity with padding) and copies ``dropped``."""

    tokens: int
    top_k: int
    routed: tuple[int, ...]
    rows: tuple[int, ...]
    dropped: int

    @property
    def experts(self) -> int:
        return len(self.routed)

    def describe(self) -> str:
        lo, hi = min(self.routed), max(self.routed)
        each = f"{lo}" if lo == hi else f"{lo}-{hi}"
        text = f"{self.tokens} tokens x top-{self.top_k} over {self.experts} experts: {each} per expert"
        if self.rows != self.routed:
            text += f", {self.rows[0]} rows computed per expert (capacity)"
        return text + f", {self.dropped} dropped"


def expert_loads(tokens: int, top_k: int, experts: int, routing: Routing) -> Load:
    """The per-expert work of ``tokens`` tokens routed to ``top_k`` of ``experts`` under ``routing``."""
    copies = tokens * top_k
    if routing.factor is None:
        rows = tuple(copies // experts + (e < copies % experts) for e in range(experts))
        return Load(tokens, top_k, rows, rows, 0)
    cap = math.ceil(routing.factor * copies / experts)
    kept = min(copies, cap * experts)
    routed = tuple(kept // experts + (e < kept % experts) for e in range(experts))
    return Load(tokens, top_k, routed, (cap,) * experts, copies - kept)


def is_experts(mod) -> bool:
    """A transformers expert layer (``use_experts_implementation``: 3-D expert weights, a routed call), or
    Llama 4's (:mod:`.moe_llama4`)."""
    down = getattr(mod, "down_proj", None)
    return moe_llama4.is_experts(mod) or hasattr(mod, "_is_expert_parallel") \
        and isinstance(getattr(mod, "num_experts", None), int) and getattr(down, "ndim", 0) == 3


def experts_layers(module) -> list[tuple[str, object]]:
    """(path, module) of every expert layer under ``module``, in order."""
    return [(p, m) for p, m in module.named_modules() if is_experts(m)]


def _project(mod, x, name: str):
    """x [E, C, in] through the experts' weight ``name`` ([E, out, in], or [E, in, out] transposed)."""
    import torch

    quantised = getattr(mod, "quantised_project", None)
    if quantised is not None:  # experts stored under a precision recipe (lower/inference/hf_experts_quant.py)
        return quantised(x, name, getattr(mod, "_start", 0))
    w = getattr(mod, name)
    y = torch.einsum("eci,eio->eco" if mod.is_transposed else "eci,eoi->eco", x, w.to(x.dtype))
    bias = getattr(mod, name + "_bias", None) if mod.has_bias else None
    return y if bias is None else y + bias[:, None, :]


def _experts_mlp(mod, x, offset: int = 0):
    """The expert MLP on x [E', C, h], for experts ``offset .. offset + E'`` (their weights sliced)."""
    import jax

    sliced = _Slice(mod, offset, x.shape[0]) if offset or x.shape[0] != mod.num_experts else mod
    up = "gate_up_proj" if mod.has_gate else "up_proj"
    with jax.named_scope(up):
        y = _project(sliced, x, up)
        y = mod._apply_gate(y) if mod.has_gate else mod.act_fn(y)
    with jax.named_scope("down_proj"):
        y = _project(sliced, y, "down_proj")
        if getattr(mod, "has_post_expert_norm", False):
            y = mod.post_expert_norm(y)
    return y


class _Slice:
    """The weights of experts ``start .. start + n`` of an expert layer (the remainder group)."""

    def __init__(self, mod, start: int, n: int):
        self._mod, self._start, self._n = mod, start, n

    def __getattr__(self, name):
        v = getattr(self._mod, name)
        if name.endswith(("proj", "proj_bias")) and getattr(v, "ndim", 0) >= 2:
            return v[self._start:self._start + self._n]
        return v


def _grouped(mod, x, cap: int):
    """x [E * cap, h] in slot order (slot s goes to expert s mod E) -> the experts' outputs, same order."""
    e, h = mod.num_experts, x.shape[-1]
    y = _experts_mlp(mod, x.reshape(cap, e, h).transpose(0, 1))
    return y.transpose(0, 1).reshape(cap * e, -1)


def static_forward(mod, routing: Routing, record: list, weigh_inputs: bool = False):
    """A forward for expert layer ``mod`` with static shapes under ``routing`` (see the module docstring);
    each call appends its :class:`Load` to ``record``. ``weigh_inputs``: each token copy is scaled by its
    routing weight before the experts and the copies summed after them (Llama 4), else the outputs are weighed."""
    import jax
    import torch

    def forward(hidden_states, top_k_index, top_k_weights):
        with jax.named_scope(routing.scope()):
            return routed(hidden_states, top_k_index, top_k_weights)

    def routed(hidden_states, top_k_index, top_k_weights):
        tokens, h = hidden_states.shape
        k, e = top_k_index.shape[-1], mod.num_experts
        load = expert_loads(tokens, k, e, routing)
        record.append((load, h, hidden_states.dtype.itemsize))
        copies = tokens * k
        with jax.named_scope("dispatch"):
            x = hidden_states[:, None, :].expand(tokens, k, h).reshape(copies, h)
            if weigh_inputs:
                x = x * top_k_weights.reshape(copies, 1).to(x.dtype)
        if routing.factor is None:
            even, rest = copies // e, copies % e
            parts = [_grouped(mod, x[:even * e], even)] if even else []
            if rest:  # the first `rest` experts take one more copy each
                parts.append(_experts_mlp(mod, x[even * e:, None, :].contiguous(), 0)[:, 0, :])
            y = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
        else:
            cap, kept = load.rows[0], copies - load.dropped
            with jax.named_scope("dispatch"):
                pad = x.new_zeros(cap * e - kept, h) if cap * e > kept else None
                x = x[:kept] if pad is None else torch.cat([x[:kept], pad], dim=0)
            y = _grouped(mod, x, cap)[:kept]
            if load.dropped:
                y = torch.cat([y, y.new_zeros(load.dropped, y.shape[-1])], dim=0)
        with jax.named_scope("combine"):
            if not weigh_inputs:
                y = y * top_k_weights.reshape(copies, 1).to(y.dtype)
            out = y.reshape(tokens, k, -1).sum(dim=1)
        return out.to(hidden_states.dtype)

    return forward


@contextlib.contextmanager
def static_experts(module, routing: Routing, record: list):
    """While active, every expert layer under ``module`` runs :func:`static_forward` (restored on exit)."""
    patched = []
    mods = dict(module.named_modules())
    for path, mod in experts_layers(module):
        if moe_llama4.is_experts(mod):  # routed by its holder, which runs every expert on every token
            holder = mods[path.rpartition(".")[0]]
            mod.forward = static_forward(moe_llama4.ExpertsView(mod), routing, record, weigh_inputs=True)
            holder.forward = moe_llama4.holder_forward(holder)
            patched += [mod, holder]
        else:
            mod.forward = static_forward(mod, routing, record)
            patched.append(mod)
    try:
        yield
    finally:
        for mod in patched:
            vars(mod).pop("forward", None)


def unrouted(module) -> list[tuple[str, str]]:
    """(path, class name) of the modules under ``module`` named like an expert layer (``...Experts``, shared
    experts aside) that :func:`static_experts` does not route (DBRX's, JetMoE's, ...): they run as the library
    wrote them, a data-dependent dispatch or every expert on every token."""
    return [(p, type(m).__name__) for p, m in module.named_modules() if type(m).__name__.endswith("Experts")
            and "Shared" not in type(m).__name__ and not is_experts(m)]


def _unrouted_said(fn, module, escaped: list, info: dict):
    """``fn`` where ``module``'s expert layers are not routed: ``info["unrouted"]`` names them once traced, and a
    failed trace is one FrontendError that names them."""
    name = type(module).__name__
    layers = f"{escaped[0][1]} ({escaped[0][0]}{f' and {len(escaped) - 1} more' if len(escaped) > 1 else ''})"

    @functools.wraps(fn)
    def traced(*args, **kwargs):
        import os

        try:
            out = fn(*args, **kwargs)
        except FrontendError:  # already one line, with its own hint
            raise
        except Exception as e:  # the library's dispatch, most likely: data-dependent shapes
            if os.environ.get("MHLO_COST_DEBUG"):
                raise
            first = (str(e).strip().splitlines() or [""])[0][:300]
            raise FrontendError(f"{name}: its expert layers {layers} are not ones mhlo-cost routes with static "
                                "shapes (transformers' use_experts_implementation layers and Llama 4's are), and "
                                f"lowering the model failed: {type(e).__name__}: {first} (MHLO_COST_DEBUG=1 shows "
                                "the traceback)") from e
        info["unrouted"] = [f"{c} ({p})" for p, c in escaped]
        return out

    return traced


def wrap(fn, module, routing: Routing | None, info: dict):
    """``fn`` (a JAX function tracing ``module``) run with :func:`static_experts`; ``info["moe"]`` gets the
    routing and the loads once traced. ``fn`` itself where ``module`` has no expert layer; where its expert
    layers are not ones this module routes (:func:`unrouted`), ``fn`` saying so."""
    if not experts_layers(module):
        escaped = unrouted(module)
        name = type(module).__name__
        if routing is not None and escaped:
            raise FrontendError("--routing applies to the expert layers mhlo-cost routes with static shapes; "
                                f"{name}'s ({escaped[0][1]}) are not among them")
        if routing is not None:
            raise FrontendError(f"--routing applies to mixture-of-experts models; {name} has no expert layer")
        return _unrouted_said(fn, module, escaped, info) if escaped else fn
    routing = routing or Routing()
    record: list = []

    @functools.wraps(fn)
    def traced(*args, **kwargs):
        record.clear()
        with static_experts(module, routing, record):
            out = fn(*args, **kwargs)
        info["moe"] = summary(routing, record)
        return out

    return traced


def summary(routing: Routing, record: list) -> dict:
    """The routing and the per-layer loads as plain values (for ``Lowered.info`` and the lower summary):
    ``record`` holds a (:class:`Load`, hidden size, bytes per element) per expert layer, in order."""
    loads = [x for x, _, _ in record]
    return {"routing": routing.name(), "assumption": routing.describe(), "layers": len(loads),
            "experts": [x.experts for x in loads], "per_expert": [list(x.routed) for x in loads],
            "rows": [list(x.rows) for x in loads], "dropped": sum(x.dropped for x in loads),
            "hidden": [h for _, h, _ in record], "dtype_bytes": [b for _, _, b in record],
            "text": "; ".join(dict.fromkeys(x.describe() for x in loads))}


def _role(name: str, child, experts: int) -> str | None:
    """The role of a child of a mixture-of-experts block: its experts, shared experts or router."""
    if is_experts(child):
        return "experts"
    if "shared_expert" in name:
        return "shared_experts"
    w = getattr(child, "weight", None)
    if name in ("gate", "router") or (getattr(w, "ndim", 0) == 2 and w.shape[0] == experts):
        return "router"
    return None


def scope_names(root) -> dict[str, str]:
    """Scope names for the parts of every mixture-of-experts block under ``root`` (the module holding an
    expert layer): the block itself pushes no scope, its router, experts and shared experts (with their
    gate) run under ``router``, ``experts`` and ``shared_experts``, so that a decoder layer's parts are
    ``self_attn``, ``router``, ``experts``, ``shared_experts``, as the block table shows them."""
    names: dict[str, str] = {}
    mods = dict(root.named_modules())
    for path, mod in experts_layers(root):
        holder = path.rpartition(".")[0]
        if not holder or holder in names:
            continue
        roles = {f"{holder}.{n}": _role(n, c, mod.num_experts) for n, c in mods[holder].named_children()}
        if list(roles.values()).count("router") > 1:
            continue  # no single router: the block keeps its own scope
        names[holder] = ""
        names.update({p: r for p, r in roles.items() if r})
    return names
