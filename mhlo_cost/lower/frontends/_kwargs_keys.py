"""The keywords a class's own code reads from its ``**kwargs`` by name, found in its source.

``def __post_init__(self, **kwargs): n = kwargs.get("global_attn_every_n_layers", 3)`` reads
``global_attn_every_n_layers``: :func:`kwargs_read` finds ``kwargs.get("x")``, ``kwargs.pop("x")``,
``kwargs.setdefault("x")``, ``kwargs["x"]`` and ``"x" in kwargs`` in every function of the class that takes
``**kwargs`` (whatever the parameter is called). A class whose source cannot be read reads nothing.
"""
from __future__ import annotations

import ast
import functools
import inspect
import textwrap


@functools.lru_cache(maxsize=None)
def kwargs_read(klass: type) -> frozenset:
    """The names ``klass``'s own methods read from their ``**kwargs`` (not those of its bases)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return frozenset()
    found: set[str] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.args.kwarg is not None:
            found |= _reads(fn, fn.args.kwarg.arg)
    return frozenset(found)


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
