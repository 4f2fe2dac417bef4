"""Inputs given by value (``--input-value``) as concrete tensors while torchax traces a forward.

A vision-language model reads some of its inputs in Python while it runs: Qwen2-VL iterates over
``image_grid_thw`` (``grid.tolist()``, ``torch.repeat_interleave(h * w, t)``) to lay out the patches of each
image, and counts the image tokens in ``input_ids`` to place the vision tower's output. Under ``jax.jit``
every operation is staged, so such a read fails (``ConcretizationTypeError``). While :func:`concrete_values`
is active:

- an operation whose tensor operands are all concrete (not JAX tracers: derived from the values alone) is
  computed at trace time (``jax.ensure_compile_time_eval``), so its result stays concrete; so is a tensor
  built from Python data (``torch.tensor([2])``, ``torch.as_tensor``). Operations that touch a traced tensor
  (a weight, an input given by shape) are staged as before, and an ``arange`` or ``zeros`` is staged too,
  so masks built from them stay operations, not constants;
- ``.tolist()`` of a torchax view of a concrete tensor reads it (torchax refuses ``tolist`` on views);
- ``aten._is_all_true`` (what ``torch._check_tensor_all`` asks, transformers' shape checks) is ``jnp.all``.

What a value is used for in the lowered program is a constant there (positions, cumulative lengths): the
index arithmetic over the values is done once, at lowering, as a data loader or processor would do it.
Nothing changes while no value is given.
"""
from __future__ import annotations

import contextlib

import jax

#: torch factories that make a tensor from Python data (made concrete; arange, zeros... stay staged)
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
    dispatch = env.dispatch
    from_data = {getattr(torch, n) for n in _FROM_DATA_NAMES}

    def eager_where_concrete(func, types, args, kwargs=None):
        if (func in from_data and not _has_tensor(args, kwargs)) or _all_concrete(args, kwargs, tx):
            with jax.ensure_compile_time_eval():
                return dispatch(func, types, args, kwargs)
        return dispatch(func, types, args, kwargs)

    had_tolist = "tolist" in vars(view)
    saved_tolist = vars(view).get("tolist")
    is_all_true = torch.ops.aten._is_all_true.default
    saved_op = env._ops.get(is_all_true)
    env.dispatch = eager_where_concrete
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


def _has_tensor(args, kwargs) -> bool:
    import torch

    return any(isinstance(t, torch.Tensor) for t in torch.utils._pytree.tree_flatten((args, kwargs))[0])


def _all_true_operator(op):
    import jax.numpy as jnp
    from torchax.ops import ops_registry

    return ops_registry.Operator(op, lambda x: jnp.all(x), is_jax_function=True, is_user_defined=True,
                                 needs_env=False, is_view_op=False)
