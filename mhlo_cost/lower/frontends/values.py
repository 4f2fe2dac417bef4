"""Inputs given by value (``--input-value``) as concrete tensors while torchax traces a forward.

A vision-language model reads some of its inputs in Python while it runs: Qwen2-VL iterates over
``image_grid_thw`` (``grid.tolist()``, ``torch.repeat_interleave(h * w, t)``) to lay out the patches of each
image, and counts the image tokens in ``input_ids`` to place the vision tower's output. Under ``jax.jit``
every operation is staged, so such a read fails (``ConcretizationTypeError``). While :func:`concrete_values`
is active:

- an operation whose tensor operands are all concrete (not JAX tracers: derived from the values alone) is
  computed at trace time (``jax.ensure_compile_time_eval``), so its result stays concrete; so is a tensor
  built from Python data (``torch.tensor([2])``, ``torch.as_tensor``), and a factory (``arange``, ``zeros``,
  ``full``...) of at most :data:`SMALL` elements (Qwen2.5-VL selects window indices of ``arange`` by a
  boolean mask). Operations that touch a traced tensor (a weight, an input given by shape) are staged as
  before, and so is a result of more than :data:`SMALL` elements (a causal mask stays operations, not a
  dense constant), unless the operation works in place;
- ``.tolist()`` of a torchax view of a concrete tensor reads it (torchax refuses ``tolist`` on views);
- ``aten._is_all_true`` (what ``torch._check_tensor_all`` asks, transformers' shape checks) is ``jnp.all``.

What a value is used for in the lowered program is a constant there (positions, cumulative lengths): the
index arithmetic over the values is done once, at lowering, as a data loader or processor would do it.
Nothing changes while no value is given.
"""
from __future__ import annotations

import contextlib

import jax

#: torch factories that make a tensor from Python data (always made concrete)
_FROM_DATA_NAMES = ("tensor", "as_tensor")


def concrete(values: dict) -> dict:
    """name -> ``jax.Array`` made at trace time (concrete, not a tracer) from :class:`~.inputs.ValueSpec`."""
    import jax.numpy as jnp

    with jax.ensure_compile_time_eval():
        return {name: jnp.asarray(spec.array()) for name, spec in values.items()}


def _source(t, tx):
    """The JAX array behind a torchax tensor or view; None for anything else (a plain torch tensor)."""
    if isinstance(t, tx.tensor.Tensor):
        return t._elem
    if isinstance(t, tx.view.View):
        return t.source_jax()
    return None


def _all_concrete(args, kwargs, tx) -> bool:
    import torch

    leaves = [t for t in torch.utils._pytree.tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
    if not leaves:
        return False
    sources = [_source(t, tx) for t in leaves]
    return all(s is not None and not isinstance(s, jax.core.Tracer) for s in sources)


def _view_tolist(self):
    with jax.ensure_compile_time_eval():
        return self.jax().tolist()


@contextlib.contextmanager
def concrete_values(env, enabled: bool = True):
    """While active, torchax's ``env`` keeps concrete what is computed from concrete tensors alone (above)."""
    if not enabled:
        yield
        return
    import torch

    from ._torch_shim import import_torchax

    tx = import_torchax()
    from torchax.view import View as view

    own_dispatch = vars(env).get("dispatch")
    had_tolist = "tolist" in vars(view)
    saved_tolist = vars(view).get("tolist")
    is_all_true = torch.ops.aten._is_all_true.default
    saved_op = env._ops.get(is_all_true)
    env.dispatch = _Eager(env.dispatch, tx)
    view.tolist = _view_tolist
    env._ops[is_all_true] = _all_true_operator(is_all_true)
    try:
        yield
    finally:
        if own_dispatch is None:
            del env.dispatch  # the class's method again
        else:
            env.dispatch = own_dispatch
        if had_tolist:
            view.tolist = saved_tolist
        else:
            del view.tolist
        if saved_op is None:
            env._ops.pop(is_all_true, None)
        else:
            env._ops[is_all_true] = saved_op


#: The most elements a result computed at trace time may have: a factory (``arange``...) or an operation on
#: concrete tensors whose result is larger is staged (a causal mask stays operations, not a dense constant).
SMALL = 1 << 16
#: torch factories of values that depend on their arguments alone (no randomness)
_FACTORY_NAMES = ("arange", "zeros", "ones", "full", "empty", "eye", "linspace", "logspace")


class _Eager:
    """torchax's ``dispatch`` computing at trace time what depends on concrete values alone (see above)."""

    def __init__(self, dispatch, tx):
        import torch

        self.dispatch, self.tx = dispatch, tx
        self.from_data = {getattr(torch, n) for n in _FROM_DATA_NAMES}
        self.factories = {getattr(torch, n) for n in _FACTORY_NAMES}

    def eager(self, func, types, args, kwargs):
        with jax.ensure_compile_time_eval():
            return self.dispatch(func, types, args, kwargs)

    def __call__(self, func, types, args, kwargs=None):
        if not _has_tensor(args, kwargs) and func in self.from_data:
            return self.eager(func, types, args, kwargs)
        if not _has_tensor(args, kwargs) and func in self.factories:
            staged = self.dispatch(func, types, args, kwargs)  # its shape; unused if made again below
            return self.eager(func, types, args, kwargs) if _numel(staged) <= SMALL else staged
        if _all_concrete(args, kwargs, self.tx):
            out = self.eager(func, types, args, kwargs)
            if _numel(out) <= SMALL or _in_place(func):
                return out
        return self.dispatch(func, types, args, kwargs)


def _numel(out) -> int:
    import torch

    return sum(t.numel() for t in torch.utils._pytree.tree_flatten(out)[0] if isinstance(t, torch.Tensor))


def _in_place(func) -> bool:
    """``add_``, ``masked_fill_``, ``__setitem__``: done once, never again staged."""
    name = str(getattr(func, "__name__", "")).split(".")[0]
    if name.startswith("__"):  # a dunder: only item assignment and the augmented operators write in place
        return name == "__setitem__" or name.startswith("__i") and name not in ("__index__", "__int__", "__invert__")
    return name.endswith("_")


def _has_tensor(args, kwargs) -> bool:
    import torch

    return any(isinstance(t, torch.Tensor) for t in torch.utils._pytree.tree_flatten((args, kwargs))[0])


def _all_true_operator(op):
    import jax.numpy as jnp
    from torchax.ops import ops_registry

    return ops_registry.Operator(op, lambda x: jnp.all(x), is_jax_function=True, is_user_defined=True,
                                 needs_env=False, is_view_op=False)
