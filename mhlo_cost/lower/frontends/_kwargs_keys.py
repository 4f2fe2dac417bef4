"""The keywords a class reads from its ``**kwargs`` by name while it is built, found in its source.

``def __post_init__(self, **kwargs): n = kwargs.get("global_attn_every_n_layers", 3)`` reads
``global_attn_every_n_layers``: :func:`construction_reads` finds ``kwargs.get("x")``, ``kwargs.pop("x")``,
``kwargs.setdefault("x")``, ``kwargs["x"]`` and ``"x" in kwargs`` (whatever the parameter is called) in
``__init__`` and ``__post_init__`` of the class and its bases, and in the methods they call on ``self``
(``self.convert_rope_params_to_dict(**kwargs)``); not in ``from_pretrained`` or ``save_pretrained``, whose
keywords are no part of a configuration. A class whose source cannot be read reads nothing.
"""
from __future__ import annotations

import ast
import functools
import inspect
import textwrap

_ROOTS = ("__init__", "__post_init__")


def construction_reads(klass: type) -> frozenset:
    """The names read from ``**kwargs`` by the methods that building ``klass`` runs (see the module's note)."""
    methods: dict[str, tuple[frozenset, frozenset]] = {}
    for k in reversed(klass.__mro__):  # a subclass's method replaces its base's
        if k is not object:
            methods.update(_methods(k))
    found, todo, seen = set(), list(_ROOTS), set()
    while todo:
        name = todo.pop()
        if name in seen or name not in methods:
            continue
        seen.add(name)
        reads, calls = methods[name]
        found |= reads
        todo.extend(calls)
    # a base's __init__ / __post_init__ runs too (super().__post_init__(**kwargs))
    for k in klass.__mro__:
        if k is not object:
            for root in _ROOTS:
                found |= _methods(k).get(root, (frozenset(), frozenset()))[0]
    return frozenset(found)


@functools.lru_cache(maxsize=None)
def _methods(klass: type) -> dict:
    """Method name -> (names read from its ``**kwargs``, names of the ``self.`` methods it calls), for the
    methods ``klass`` itself defines (not class or static methods)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    out = {}
    for fn in body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or _is_class_or_static(fn):
            continue
        reads = _reads(fn, fn.args.kwarg.arg) if fn.args.kwarg is not None else set()
        out[fn.name] = (frozenset(reads), frozenset(_self_calls(fn)))
    return out


def _is_class_or_static(fn) -> bool:
    return any(isinstance(d, ast.Name) and d.id in ("classmethod", "staticmethod") for d in fn.decorator_list)


def _self_calls(fn) -> set:
    return {n.func.attr for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"}


def _reads(fn, name: str) -> set:
    def is_kwargs(node) -> bool:
        return isinstance(node, ast.Name) and node.id == name

    def text(node) -> str | None:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    out = set()
    for node in ast.walk(fn):
        key = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_kwargs(node.func.value) \
                and node.func.attr in ("get", "pop", "setdefault") and node.args:
            key = text(node.args[0])
        elif isinstance(node, ast.Subscript) and is_kwargs(node.value):
            key = text(node.slice)
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) \
                and is_kwargs(node.comparators[0]):
            key = text(node.left)
        if key:
            out.add(key)
    return out
