"""Plain tensor attributes of torch modules, handled like buffers.

A module may keep a tensor as a plain attribute rather than as a parameter or a registered buffer:
diffusers' QwenImage keeps its complex rotary tables as ``self.pos_freqs = torch.cat(...)`` (a buffer would
be cast by ``.to(dtype)``), Lumina2 keeps one table per axis in a list, ``self.freqs_cis = [...]``. Built on
the meta device such a tensor holds no data, and a forward that uses it (``self.pos_freqs.to(device)``)
fails with "Cannot copy out of meta tensor".

The rule: a plain tensor attribute without data (on ``meta``), held directly or in a list, tuple or dict
(nested), is an argument of the lowered function like a buffer, named by its path
(``buffers['pos_embed.pos_freqs']``, ``buffers['rope_embedder.freqs_cis.0']``), and put in its place while
the forward is traced (then the module is as it was); a tensor held under several names is one argument.
One that holds data (made on a real device) is left alone and becomes a constant of the program, as torchax
makes it. What is left (a meta tensor held by a global, a closure or another object) fails with the line
:func:`meta_hint` gives.
"""
from __future__ import annotations

import contextlib


def _leaves(value, path: tuple):
    """(path, tensor) of every meta tensor in ``value``: a tensor, or lists, tuples and dicts of them."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_meta and not isinstance(value, torch.nn.Parameter):
            yield path, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _leaves(item, path + (i,))
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, (str, int)):
                yield from _leaves(item, path + (key,))


def _attributes(module) -> list:
    """(every (submodule, path) that holds it, tensor) of each plain meta tensor of ``module`` and its
    submodules (parameters and buffers are not plain attributes), in module order; path[0] is the attribute."""
    found: dict[int, tuple[list, object]] = {}
    for prefix, sub in module.named_modules(remove_duplicate=False):
        for key, value in list(vars(sub).items()):
            if key in ("_parameters", "_buffers", "_modules"):
                continue
            for path, t in _leaves(value, (key,)):
                name = ".".join(str(p) for p in ((prefix,) if prefix else ()) + path)
                found.setdefault(id(t), ([], t))[0].append((name, sub, path))
    return list(found.values())


def tensor_attributes(module) -> dict[str, list[str]]:
    """First dotted name -> every dotted name of each plain meta tensor attribute (see the module)."""
    return {holders[0][0]: [h[0] for h in holders] for holders, _ in _attributes(module)}


def attribute_specs(module) -> dict:
    """First name -> ``jax.ShapeDtypeStruct`` of each plain meta tensor attribute (see the module)."""
    import jax

    from .inputs import jax_dtype

    return {holders[0][0]: jax.ShapeDtypeStruct(tuple(t.shape), jax_dtype(t.dtype))
            for holders, t in _attributes(module)}


def split(state: dict, module) -> tuple[dict, dict]:
    """``state`` (name -> tensor) as (what ``functional_call`` takes, the plain attributes' tensors)."""
    names = set(tensor_attributes(module))
    return ({k: v for k, v in state.items() if k not in names}, {k: v for k, v in state.items() if k in names})


def _replaced(value, path: tuple, new):
    """``value`` with the item at ``path`` (indices and keys) replaced by ``new``; containers copied."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], rest, new)}
    items = list(value)
    items[head] = _replaced(items[head], rest, new)
    if isinstance(value, list) or type(value) is tuple:
        return type(value)(items)
    return type(value)(*items)  # a named tuple


@contextlib.contextmanager
def bound(module, tensors: dict):
    """While active, each plain meta tensor attribute of ``module`` is the tensor ``tensors`` gives for its
    first name (every name that holds it); afterwards the module holds what it held."""
    saved = []
    for holders, _ in _attributes(module):
        if holders[0][0] not in tensors:
            continue
        for _, sub, path in holders:
            saved.append((sub, path[0], vars(sub)[path[0]]))
            vars(sub)[path[0]] = _replaced(vars(sub)[path[0]], path[1:], tensors[holders[0][0]])
    try:
        yield
    finally:
        for sub, key, value in reversed(saved):
            vars(sub)[key] = value


def meta_hint(first_line: str) -> str | None:
    """What to say after a failure whose first line names a meta tensor (None for any other)."""
    low = first_line.lower()
    if "meta" not in low or "tensor" not in low:
        return None
    return ("the model is built on the meta device, so a tensor it makes while being built holds no data; "
            "parameters, buffers and tensors held by module attributes (directly or in lists, tuples, dicts) "
            "become inputs of the lowered function, but this one is held elsewhere (a global, a closure, "
            "another object) or its values are read")
