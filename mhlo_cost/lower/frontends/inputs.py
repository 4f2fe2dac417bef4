"""Inputs and plain values as a user writes them on the command line.

``--input 2x128:int64`` is one positional input (a tensor of that shape and dtype), ``--input
attention_mask=2x128:int64`` a keyword one; ``--input t=scalar:int64`` (or ``t=:int64``) a 0-d tensor;
the dtype may be left out (the model's dtype, else float32). ``--kwarg return_dict=false`` passes a plain
Python value (``true``/``false``, ``none``, integers, floats, anything else a string; JSON lists and
objects too). The same value syntax serves ``--set key=value`` configuration overrides.

What comes out is framework-neutral: :class:`TensorSpec` (a shape and a numpy dtype name), which each
frontend turns into its own abstract value (``jax.ShapeDtypeStruct``, a meta tensor).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from . import FrontendError

#: dtype spellings -> numpy dtype names
DTYPE_ALIASES = {
    "f32": "float32", "float": "float32", "float32": "float32", "fp32": "float32",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "f16": "float16", "fp16": "float16", "half": "float16", "float16": "float16",
    "f64": "float64", "float64": "float64", "double": "float64",
    "i64": "int64", "int64": "int64", "long": "int64",
    "i32": "int32", "int32": "int32", "int": "int32",
    "i16": "int16", "int16": "int16", "i8": "int8", "int8": "int8", "u8": "uint8", "uint8": "uint8",
    "bool": "bool", "i1": "bool",
}

_NAME = re.compile(r"^[A-Za-z_]\w*$")


@dataclass(frozen=True)
class TensorSpec:
    """An abstract tensor: its shape and numpy dtype name (None: the model's dtype, else float32)."""

    shape: tuple[int, ...]
    dtype: str | None = None
    name: str | None = None  # keyword name; None for a positional input

    def describe(self) -> str:
        dims = "x".join(str(d) for d in self.shape) or "scalar"
        return f"{self.name + '=' if self.name else ''}{dims}{':' + self.dtype if self.dtype else ''}"


def dtype_name(text: str) -> str:
    """A dtype spelling (``bf16``, ``int64``, ``bool``, ...) -> numpy dtype name; FrontendError otherwise."""
    key = text.strip().lower().removeprefix("torch.").removeprefix("jnp.")
    if key in DTYPE_ALIASES:
        return DTYPE_ALIASES[key]
    raise FrontendError(f"unknown dtype {text!r} (known: {', '.join(sorted(set(DTYPE_ALIASES.values())))})")


#: The dtypes a model's weights may be cast to (``--dtype`` of lower and serve): an integer or boolean model
#: cannot be differentiated, normalised or attended over.
WEIGHT_DTYPES = ("bfloat16", "float16", "float32", "float64")


def weight_dtype(text: str, what: str = "--dtype") -> str:
    """A dtype for a model's weights (:data:`WEIGHT_DTYPES`, any spelling :func:`dtype_name` takes); FrontendError
    otherwise, naming ``what``."""
    name = dtype_name(text)
    if name not in WEIGHT_DTYPES:
        raise FrontendError(f"{what} {text}: a model's weights take a floating dtype ({', '.join(WEIGHT_DTYPES)})")
    return name


def parse_shape(text: str) -> tuple[int, ...]:
    """``2x128`` (also ``2,128``) -> (2, 128); ``scalar``, ``()`` or nothing -> ()."""
    t = text.strip()
    if t in ("", "scalar", "()"):
        return ()
    parts = re.split(r"[x,]", t.strip("()"))
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        raise FrontendError(f"bad shape {text!r}: write dimensions as 2x128 (or 'scalar')") from None
    if any(d < 0 for d in dims):
        raise FrontendError(f"bad shape {text!r}: dimensions must not be negative")
    return dims


def parse_input(text: str) -> TensorSpec:
    """``[NAME=]SHAPE[:DTYPE]`` -> TensorSpec (``attention_mask=2x128:int64``, ``2x3x224x224``)."""
    name = None
    body = text.strip()
    if "=" in body:
        name, _, body = body.partition("=")
        name = name.strip()
        if not _NAME.match(name):
            raise FrontendError(f"--input {text!r}: {name!r} is not a keyword argument name")
    shape_text, sep, dtype_text = body.partition(":")
    dtype = dtype_name(dtype_text) if sep else None
    return TensorSpec(parse_shape(shape_text), dtype, name)


def parse_value(text: str):
    """A plain Python value from its command-line spelling: true/false, none, int, float, JSON, else text."""
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    if t[:1] in "[{\"":
        try:
            return json.loads(t)
        except json.JSONDecodeError as e:
            raise FrontendError(f"bad value {text!r}: {e}") from None
    return t


def parse_assignments(items, what: str = "--kwarg") -> dict:
    """``['k=v', ...]`` -> {k: parse_value(v)}; a dotted key (``text_config.hidden_size``) stays dotted."""
    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not re.match(r"^[A-Za-z_][\w.]*$", key):
            raise FrontendError(f"{what} wants KEY=VALUE, got {item!r}")
        out[key] = parse_value(value)
    return out


def split_inputs(specs) -> tuple[list[TensorSpec], dict[str, TensorSpec]]:
    """Positional specs in order, keyword specs by name; a positional one after a keyword one is refused."""
    positional, keyword = [], {}
    for s in specs:
        if s.name is None:
            if keyword:
                raise FrontendError(f"positional --input {s.describe()} comes after keyword inputs; put "
                                    "positional inputs first")
            positional.append(s)
        elif s.name in keyword:
            raise FrontendError(f"--input {s.name}= is given twice")
        else:
            keyword[s.name] = s
    return positional, keyword
