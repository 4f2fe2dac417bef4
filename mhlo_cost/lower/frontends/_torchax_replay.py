"""The replay of :mod:`.torchax_once`: a decoder layer's call traced to a jaxpr once per kind, replayed for the
others (:class:`Replayer`)."""
from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass

#: Plain values an argument or a module attribute may hold that are told apart by value (others by identity).
_PLAIN = (type(None), bool, int, float, str, bytes)
_LOG = logging.getLogger(__name__)
#: A module attribute that differs between the layers of one kind: it names the layer's own cache entry, which
#: the replay passes in (:meth:`Replayer.call`).
_INDEX = "layer_idx"


class _Plain(Exception):
    """The layer is run as it is, traced (its call is not one the replay can take apart); says why."""


@dataclass
class _Recipe:
    """A kind of layer's traced call: the jaxpr (``None``: the kind runs plainly) and what its outputs are."""

    closed: object = None
    out_spec: object = None
    out_plain: tuple = ()  # (position, value) of each output leaf that is not a tensor
    n_results: int = 0
    replaced: tuple = ()  # per cache tensor: whether the layer put a new tensor there (else updated it in place)
    why: str = ""  # why the kind runs plainly (where ``closed`` is None)


class Replayer:
    """Decoder layers' forwards replaced (:meth:`install`) by :meth:`call`, which traces one layer per kind and
    replays the others from its jaxpr; ``env`` the torchax environment."""

    def __init__(self, env):
        self.env = env
        self.tensor = importlib.import_module("torchax.tensor").Tensor
        self.recipes: dict = {}
        self.installed: list = []
        self.plain: list = []  # why a layer's call could not be taken apart (each reason once)

    def install(self, layer) -> None:
        forward = layer.forward
        layer.__dict__["forward"] = lambda *args, **kwargs: self.call(layer, forward, args, kwargs)
        self.installed.append(layer)

    def remove(self) -> None:
        for layer in self.installed:
            layer.__dict__.pop("forward", None)
        self.installed.clear()

    def call(self, layer, forward, args: tuple, kwargs: dict):
        """``forward(*args, **kwargs)`` of ``layer``, replayed from its kind's jaxpr (traced here where it is
        the first of its kind); run as it is where the call cannot be taken apart or the kind reads a traced
        value it is not given."""
        try:
            parts = self._parts(layer, args, kwargs)
        except _Plain as e:
            why = f"{type(layer).__name__}: {e}"
            if why not in self.plain:
                self.plain.append(why)
                _LOG.info("runs as it is, traced: %s", why)
            return forward(*args, **kwargs)
        recipe = self.recipes.get(parts.key)
        if recipe is None:
            recipe = self.recipes[parts.key] = self._trace(forward, parts)
            if recipe.closed is None:
                _LOG.info("%s: its kind of layer runs as it is, traced layer by layer: %s", type(layer).__name__,
                          recipe.why)
        if recipe.closed is None:
            return forward(*args, **kwargs)
        return self._replay(recipe, parts)

    def said(self) -> list[str]:
        """Per kind of layer met, in order, "replayed" or why it ran as it is, then why a call could not be
        taken apart (each reason once)."""
        kinds = [f"{k[0].__name__}: {'replayed' if r.closed is not None else r.why}" for k, r in self.recipes.items()]
        return kinds + self.plain

    # -- taking a call apart ---------------------------------------------------------------------------------

    def _parts(self, layer, args: tuple, kwargs: dict) -> "_Parts":
        import torch
        from torch.utils import _pytree as pytree

        leaves, spec = pytree.tree_flatten((args, kwargs))
        dynamic, described = [], []
        for i, x in enumerate(leaves):
            if isinstance(x, self.tensor):
                dynamic.append(i)
                described.append(("tensor", _aval(x)))
            elif isinstance(x, torch.Tensor):
                raise _Plain("a tensor that is not a torchax tensor among the arguments (a view)")
            else:
                described.append(_describe(x))
        params = _state(layer, self.tensor)
        index = _index(layer)
        entries = [e for e in (_entry(x, index) for x in leaves) if e is not None]
        if len(entries) > 1:
            raise _Plain("more than one cache among the arguments")
        entry, names, entry_plain = entries[0] if entries else (None, (), ())
        key = (type(layer), spec, tuple(described), tuple((p, n, _aval(t)) for p, n, _m, t in params),
               _module_state(layer), type(entry), names, entry_plain,
               tuple(_aval(getattr(entry, n)) for n in names))
        return _Parts(key, leaves, spec, dynamic, params, entry, names, layer)

    # -- tracing the first of a kind ---------------------------------------------------------------------------

    def _trace(self, forward, parts: "_Parts") -> _Recipe:
        """The kind's recipe, its jaxpr traced from ``parts``' call (abstract inputs); a recipe without a jaxpr
        where the trace closes over a traced value it was not given."""
        import jax
        from torch.utils import _pytree as pytree

        recipe = _Recipe()
        env, tensor = self.env, self.tensor
        outer = parts.inputs()

        def traced(flat):
            inner = [tensor(x, env) for x in flat]
            watched, kept = parts.watch(), [(x, dict(vars(x))) for x in parts.watched()]
            saved = parts.swap(inner)
            try:
                leaves = list(parts.leaves)
                for i, t in zip(parts.dynamic, inner[len(parts.params):]):
                    leaves[i] = t
                args, kwargs = pytree.tree_unflatten(leaves, parts.spec)
                out = forward(*args, **kwargs)
                out_leaves, recipe.out_spec = pytree.tree_flatten(out)
                results = [x for x in out_leaves if isinstance(x, tensor)]
                recipe.out_plain = tuple((i, x) for i, x in enumerate(out_leaves) if not isinstance(x, tensor))
                recipe.n_results = len(results)
                after = parts.entry_tensors()
                if any(not isinstance(x, tensor) for x in after):
                    raise _Plain("the layer left a cache entry that is not a tensor")
                recipe.replaced = tuple(a is not b for a, b in zip(after, inner[len(inner) - len(after):]))
                changed = _changed(watched, parts.watch())
                if changed:  # (a replay would not do it again)
                    raise _Plain(f"the layer changed a plain value of its modules, its cache entry or an argument: "
                                 f"{changed}")
                return [x.jax() for x in results] + [t.jax() for t in inner[:len(inner) - len(after)]] + \
                    [x.jax() for x in after]
            finally:
                parts.swap(saved)
                for x, attributes in kept:  # (as they were: the layer may yet run as it is)
                    x.__dict__.clear()
                    x.__dict__.update(attributes)

        try:
            closed = jax.make_jaxpr(traced)([jax.ShapeDtypeStruct(x.shape, x.dtype) for x in outer])
        except _Plain as e:
            recipe.why = str(e)
            return recipe
        if closed.consts:
            # a traced value it is not given (another layer's cache entry) or a constant array the layer makes:
            # one such array per layer traced one by one, but one shared by every replay (the program would hold
            # fewer constants); every layer of the kind runs as it is
            recipe.why = "a constant in the trace: " + ", ".join(_const(c) for c in closed.consts[:4])
            return recipe
        recipe.closed = closed
        return recipe

    # -- replaying ---------------------------------------------------------------------------------------------

    def _replay(self, recipe: _Recipe, parts: "_Parts"):
        import jax
        from torch.utils import _pytree as pytree

        outer = parts.inputs()
        flat = jax.core.eval_jaxpr(recipe.closed.jaxpr, recipe.closed.consts, *outer)
        results, rest = flat[:recipe.n_results], flat[recipe.n_results:]
        objects = parts.input_objects()
        n_entry = len(parts.names)
        for obj, value in zip(objects[:len(objects) - n_entry], rest[:len(rest) - n_entry]):
            if obj._elem is not value:  # (updated in place by the layer)
                obj._elem = value
        for name, obj, value, replaced in zip(parts.names, objects[len(objects) - n_entry:],
                                              rest[len(rest) - n_entry:], recipe.replaced):
            if replaced:
                setattr(parts.entry, name, self.tensor(value, self.env))
            elif obj._elem is not value:
                obj._elem = value
        plain, it = dict(recipe.out_plain), iter(results)
        leaves = [plain[i] if i in plain else self.tensor(next(it), self.env)
                  for i in range(len(results) + len(plain))]
        return pytree.tree_unflatten(leaves, recipe.out_spec)


@dataclass
class _Parts:
    """One layer call taken apart: its kind's ``key``, the argument ``leaves`` (``dynamic``: the tensors'
    positions), the layer's ``params`` ((path, name, module, tensor)), its cache ``entry`` and the ``names`` of
    the entry's tensors."""

    key: tuple
    leaves: list
    spec: object
    dynamic: list
    params: list
    entry: object
    names: tuple
    layer: object

    def watched(self) -> list:
        """The objects whose attributes the call could change: the layer's modules, each object among the
        arguments (a cache), the layer's cache entry."""
        objects = [m for m in self.layer.modules()] + [x for x in self.leaves if _describe(x)[0] == "object"] + \
            ([self.entry] if self.entry is not None else [])
        return [x for x in objects if hasattr(x, "__dict__")]

    def watch(self) -> tuple:
        """The plain values of :meth:`watched`'s attributes (tensors aside; a container by identity)."""
        import torch

        return _module_state(self.layer), tuple(
            tuple(sorted((n, _describe(v)) for n, v in vars(x).items() if not isinstance(v, torch.Tensor)))
            for x in self.watched()[len(list(self.layer.modules())):])

    def input_objects(self) -> list:
        """The torchax tensors the jaxpr takes, in order: parameters, arguments, the cache entry's."""
        return [t for _p, _n, _m, t in self.params] + [self.leaves[i] for i in self.dynamic] + \
            self.entry_tensors()

    def inputs(self) -> list:
        return [t.jax() for t in self.input_objects()]

    def entry_tensors(self) -> list:
        return [getattr(self.entry, n) for n in self.names]

    def swap(self, tensors: list) -> list:
        """Put ``tensors`` (in :meth:`input_objects`' order, arguments aside) in place of the parameters and the
        cache entry's tensors; returns those they replaced (in the same form, to swap back)."""
        saved = self.input_objects()
        n = len(self.params)
        for (_p, name, mod, _t), t in zip(self.params, tensors[:n]):
            (mod._parameters if name in mod._parameters else mod._buffers)[name] = t
        for name, t in zip(self.names, tensors[len(tensors) - len(self.names):] if self.names else ()):
            setattr(self.entry, name, t)
        return saved


def _changed(before: tuple, after: tuple) -> str:
    """The first plain value :meth:`_Parts.watch` saw change, in words."""
    (mods_a, objs_a), (mods_b, objs_b) = before, after
    for (path, _t, attrs_a), (_p, _u, attrs_b) in zip(mods_a, mods_b):
        if attrs_a != attrs_b:
            return f"module {path or '(the layer)'}: {sorted(set(attrs_b) ^ set(attrs_a))[:2]}"
    for a, b in zip(objs_a, objs_b):
        if a != b:
            return f"an object's attributes: {sorted(set(b) ^ set(a))[:2]}"
    return "" if before == after else "the modules or objects watched differ"


def _const(c) -> str:
    """A constant of a trace in words: its type, shape and dtype, and its value where it is small."""
    shape, dtype = getattr(c, "shape", ()), getattr(c, "dtype", "")
    size = getattr(c, "size", 1)
    value = f" = {c!r}"[:80] if size <= 4 else ""
    return f"{type(c).__name__}{list(shape)} {dtype}{value}"


def _aval(t) -> tuple:
    return tuple(t.shape), str(t.dtype)


def _describe(x) -> tuple:
    """A plain argument by value, any other object by identity (the same object for every layer of a kind)."""
    import torch

    if isinstance(x, _PLAIN):
        return ("plain", type(x).__name__, x)
    if isinstance(x, (torch.device, torch.dtype)):  # (one per tensor: equal ones are told apart by value)
        return ("plain", type(x).__name__, str(x))
    return ("object", type(x).__qualname__, id(x))


def _state(layer, tensor) -> list:
    """(path, name, module, tensor) of every parameter and buffer under ``layer``; :class:`_Plain` where one is
    not a torchax tensor."""
    out = []
    for path, mod in layer.named_modules():
        for store in (mod._parameters, mod._buffers):
            for name, t in store.items():
                if t is None:
                    continue
                if not isinstance(t, tensor):
                    raise _Plain(f"{path}.{name} is not a torchax tensor")
                out.append((path, name, mod, t))
    return out


def _index(layer) -> int | None:
    """The layer's index (its modules' ``layer_idx``; None where none has one); :class:`_Plain` where they
    differ."""
    found = {getattr(m, _INDEX) for m in layer.modules() if isinstance(getattr(m, _INDEX, None), int)}
    if len(found) > 1:
        raise _Plain("the layer's modules name different layers")
    return next(iter(found), None)


def _entry(x, index):
    """(the cache entry of layer ``index`` in ``x``, the names of its tensors, its other attributes) where ``x``
    is a cache (a ``layers`` list), else None."""
    import torch

    layers = getattr(x, "layers", None)
    if not isinstance(layers, list) or isinstance(x, torch.nn.Module):
        return None
    if index is None or not 0 <= index < len(layers):
        raise _Plain("a cache without the layer's entry")
    entry = layers[index]
    names = tuple(sorted(n for n, v in vars(entry).items() if isinstance(v, torch.Tensor)))
    plain = tuple(sorted((n, _describe(v)) for n, v in vars(entry).items() if n not in names))
    return entry, names, plain


def _module_state(layer) -> tuple:
    """Every module's class and public attributes under ``layer`` (``layer_idx`` aside; torch's own, which start
    with ``_``, and the replaced ``forward`` too)."""
    import torch

    out = []
    for path, mod in layer.named_modules():
        attrs = []
        for name, v in sorted(vars(mod).items()):
            if name.startswith("_") or name in (_INDEX, "forward"):
                continue
            if isinstance(v, torch.Tensor):
                raise _Plain(f"{path}.{name}: a tensor attribute")
            attrs.append((name, _describe(v)))
        out.append((path, type(mod), tuple(attrs)))
    return tuple(out)
