"""Framework calls of the eager execution model (:mod:`.eager`): the IR's rows grouped into the calls a program
made, from the call-site locations torchax, torch-xla and JAX write (:func:`groups`).

The rows of one call share a location: the module path (the scope) and the source position of the call
(:attr:`~mhlo_cost.walk.locations.LocationInfo.site`). A row without a source position (the ops of a function the
IR calls: their locations are the callee's own, ``max``, ``neg``) is a helper of the call before it (a
decomposition's ``jit(_where)``, ``jit(_var)``), unless it begins a call of its own (:func:`own_call`): where the
module scope changes (``bn1`` then ``act1``: an activation module called by itself) or where one of jax.nn's
activations begins (torchax lowers ``F.relu`` / ``F.silu`` to ``jit(relu)`` / ``jit(silu)``: one aten op, which
PyTorch eager runs as one kernel of its own, in place or not).
"""
from __future__ import annotations

import re

from ..walk.row import Row, short_name


def call_key(r: Row):
    """The call a row belongs to, as its location says: (scope, source position), None without a position."""
    site = getattr(r.loc, "site", 0)
    return (r.scope, site) if site else None


#: jax.nn's activations, each a jitted function (``@jax.jit``): torchax lowers ``F.relu`` / ``nn.SiLU`` (one aten
#: op, one eager kernel) to a call of one, whose ops carry no source position of their own (the callee's ops are
#: named ``max``, ``neg``...). Matched on the callee's name, its ``_<n>`` suffix (one function per shape) dropped.
ACTIVATION_FUNCS = frozenset({"relu", "relu6", "silu", "swish", "sigmoid", "gelu", "elu", "celu", "selu",
                              "leaky_relu", "hard_tanh", "hard_sigmoid", "hard_silu", "hard_swish", "softplus",
                              "soft_sign", "log_sigmoid", "mish", "glu", "softmax", "log_softmax"})
_SUFFIX = re.compile(r"_\d+$")


def _activation(r: Row) -> bool:
    return _SUFFIX.sub("", r.func or "") in ACTIVATION_FUNCS


def own_call(prev: Row, r: Row) -> bool:
    """Whether a row without a source position begins a call of its own rather than being a helper of the call
    before it (``prev``: that call's last row): where the module scope changes (``bn1`` then ``act1``: the
    module is called by itself, an aten op of its own) or where a jax.nn activation's function begins
    (:data:`ACTIVATION_FUNCS`; ``x + shortcut`` then ``F.relu`` in one scope)."""
    if r.scope != prev.scope:
        return True
    return _activation(r) and r.func != prev.func


def groups(rows, times, preset: set) -> list[list[int]]:
    """Rows grouped into framework calls (program order); collectives, unknown ops and constants (free: a
    call's constants are hoisted between its ops) are left out. A row without a source position is a helper of
    the call before it (a decomposition's ``jit(_where)``, ``jit(_var)``), unless it begins a call of its own
    (:func:`own_call`)."""
    out: list[list[int]] = []
    last_key = None
    for i, r in enumerate(rows):
        if short_name(r.op) == "constant":
            continue
        if r.kind in ("collective", "unknown") or i in preset:
            last_key = None
            continue
        key = call_key(r)
        prev = rows[out[-1][-1]] if out else None
        same = prev is not None and prev.multiplicity == r.multiplicity
        follows = last_key is not None and same
        if follows and (key == last_key or key is None and not own_call(prev, r)):
            out[-1].append(i)  # the same call; a row without a position: a helper the call runs
            continue
        out.append([i])
        # a call begun by rows without a position after another call (own_call) takes their helpers; where no
        # call came before, each such row stays a call of its own
        last_key = ("", r.scope, r.func) if key is None and follows else key
    return out
