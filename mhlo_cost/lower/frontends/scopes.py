"""Module paths as ``jax.named_scope`` names while a model is traced (torch modules, flax.nnx modules).

Each module's call runs under a scope of its path relative to the closest enclosing module that pushed
one: ``spatial_blocks.3`` then ``attn`` then ``qkv`` nest into ``spatial_blocks.3/attn/qkv``. Containers
(``nn.Sequential``, ``nn.ModuleList``, ``nn.ModuleDict`` and flax.nnx lists) push none, so their children
keep the container in their own name, written the same way whether the container is called
(``Sequential``) or only indexed (``ModuleList``): timm's ConvNeXt gives ``stages.1/blocks.2/conv_dw``,
never ``stages/1/blocks/2``. A module reached from outside a holder that also runs as a whole is named
``borrowed:<path>`` under its caller (see :data:`BORROWED`), so its ops count where they run, as
torch's FlopCounterMode attributes them, not in that holder's block.
"""
from __future__ import annotations

import contextlib
from typing import Any


#: Prefix of the scope of a module called from outside the module that holds it, where that holder also
#: runs as a whole (``borrowed:transformer_blocks.0.norm1.emb``): no block collector takes it for a block.
BORROWED = "borrowed:"


class ScopeStack:
    """The named scopes entered so far, innermost last; ``enter(path)`` / ``leave(path)`` pair up."""

    def __init__(self):
        import jax

        self._jax = jax
        self.stack: list[tuple[str, Any]] = []
        self.entered: set[str] = set()  # every module path whose call was entered so far

    def enter(self, path: str, name: str | None = None) -> None:
        parent = self.stack[-1][0] if self.stack else ""
        local = path[len(parent) + 1:] if parent and path.startswith(parent + ".") else path
        local = name or local
        if self._borrowed(parent, local):
            local = BORROWED + local
        self.entered.add(path)
        cm = self._jax.named_scope(local)
        cm.__enter__()
        self.stack.append((path, cm))

    def _borrowed(self, parent: str, local: str) -> bool:
        """Whether the call reaches into a module that runs as a whole elsewhere (DiT's final layer calls
        ``transformer_blocks.0.norm1.emb`` from the top): its ops are the caller's, not that module's."""
        parts = local.split(".")
        for i in range(1, len(parts)):
            inner = ".".join(parts[:i])
            if (f"{parent}.{inner}" if parent else inner) in self.entered:
                return True
        return False

    def leave(self, path: str) -> None:
        if self.stack and self.stack[-1][0] == path:
            _, cm = self.stack.pop()
            cm.__exit__(None, None, None)

    def close(self) -> None:  # a forward that raised leaves scopes open
        while self.stack:
            _, cm = self.stack.pop()
            cm.__exit__(None, None, None)


def is_torch_container(mod) -> bool:
    """A Sequential / ModuleList / ModuleDict that only holds children (its forward is the stock one)."""
    import torch.nn as nn

    if isinstance(mod, (nn.ModuleList, nn.ModuleDict)):
        return True
    return isinstance(mod, nn.Sequential) and type(mod).forward is nn.Sequential.forward


@contextlib.contextmanager
def torch_module_scopes(root, *, skip_root: bool = True, names: dict | None = None):
    """While active, each submodule of ``root`` (containers excepted) runs under its path's named scope;
    ``names`` maps a module path to the scope name it runs under instead (``""``: none, as a container)."""
    scopes = ScopeStack()
    handles = []
    names = names or {}
    for path, mod in root.named_modules():
        if (skip_root and path == "") or is_torch_container(mod) or names.get(path) == "":
            continue
        handles.append(mod.register_forward_pre_hook(lambda m, a, p=path: scopes.enter(p, names.get(p))))
        handles.append(mod.register_forward_hook(lambda m, a, o, p=path: scopes.leave(p)))
    try:
        yield
    finally:
        for h in handles:
            h.remove()
        scopes.close()


def nnx_paths(root) -> dict[int, str]:
    """id(module) -> dotted path of every flax.nnx Module under ``root`` (the root itself excluded)."""
    from flax import nnx

    out: dict[int, str] = {}
    for path, node in nnx.iter_graph(root):
        if path and isinstance(node, nnx.Module) and id(node) not in out:
            out[id(node)] = ".".join(str(p) for p in path)
    return out


@contextlib.contextmanager
def nnx_module_scopes(root):
    """While active, each flax.nnx Module under ``root`` runs its ``__call__`` under its path's scope.

    ``__call__`` is looked up on the class, so the classes of the modules found are wrapped (and restored
    on exit); a call on a module outside ``root`` goes through unchanged.
    """
    paths = nnx_paths(root)
    if not paths:
        yield
        return
    from flax import nnx

    scopes = ScopeStack()
    # The classes that define the __call__ each module runs (a subclass may inherit its parent's).
    owners = set()
    for _, node in nnx.iter_graph(root):
        if id(node) in paths:
            owner = next((k for k in type(node).__mro__ if "__call__" in k.__dict__), None)
            if owner is not None and owner is not object:
                owners.add(owner)
    saved = {cls: cls.__dict__["__call__"] for cls in owners}
    for cls, call in saved.items():
        def wrapped(self, *args, __call=call, **kwargs):
            path = paths.get(id(self))
            if path is None or (scopes.stack and scopes.stack[-1][0] == path):  # super().__call__ inside
                return __call(self, *args, **kwargs)
            scopes.enter(path)
            try:
                return __call(self, *args, **kwargs)
            finally:
                scopes.leave(path)

        cls.__call__ = wrapped
    try:
        yield
    finally:
        for cls, original in saved.items():
            cls.__call__ = original
        scopes.close()
