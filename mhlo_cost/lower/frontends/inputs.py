"""Inputs and plain values as a user writes them on the command line.

``--input 2x128:int64`` is one positional input (a tensor of that shape and dtype), ``--input
attention_mask=2x128:int64`` a keyword one; ``--input t=scalar:int64`` (or ``t=:int64``) a 0-d tensor;
the dtype may be left out (the model's dtype, else float32). ``--kwarg return_dict=false`` passes a plain
Python value (``true``/``false``, ``none``, integers, floats, anything else a string; JSON lists and
objects too). The same value syntax serves ``--set key=value`` configuration overrides.

``--input-value image_grid_thw=[[1,16,16]]:int64`` is a keyword input given by its value (a number or a
rectangular JSON list of numbers; dtype default int64 for integers, bool for true/false, else float32): the
model's Python reads it while tracing (a grid of patches, token ids that place an image), so it is a
constant of the lowered program, never an argument (:class:`ValueSpec`).

What comes out is framework-neutral: :class:`TensorSpec` (a shape and a numpy dtype name), which each
frontend turns into its own abstract value (``jax.ShapeDtypeStruct``, a meta tensor).
"""
from __future__ import annotations

import json
import math
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
    otherwise, naming ``what`` (a quantised precision's spelling: the precision recipes that run it)."""
    from ...machines.precision import dtype_hint

    hint = dtype_hint(text)
    if hint is not None:
        raise FrontendError(hint.replace("--dtype", what, 1))
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


@dataclass(frozen=True)
class ValueSpec:
    """A keyword input given by its value: ``data`` nested tuples of numbers (rectangular), ``dtype`` a numpy
    dtype name. Frontends make it a concrete tensor the model's code can read while it is traced."""

    name: str
    data: object
    dtype: str

    @property
    def shape(self) -> tuple[int, ...]:
        shape, d = [], self.data
        while isinstance(d, tuple):
            shape.append(len(d))
            d = d[0] if d else None
        return tuple(shape)

    def array(self):
        """The value as a numpy array of its dtype."""
        import numpy as np

        if self.dtype == "bfloat16":  # numpy's own dtypes lack it; ml_dtypes (a JAX dependency) has it
            import ml_dtypes

            return np.array(self.data, dtype=ml_dtypes.bfloat16)
        return np.array(self.data, dtype=self.dtype)

    def describe(self) -> str:
        """``image_grid_thw=[[1,16,16]]:int64``; a long value by its shape: ``input_ids=<1x300 value>:int64``."""
        text = json.dumps(self.data, separators=(",", ":"))
        if len(text) > 40:
            text = f"<{'x'.join(str(d) for d in self.shape)} value>"
        return f"{self.name}={text}:{self.dtype}"


#: The most elements one --input-value may hold (it is written into the lowered program as a constant).
MAX_VALUE_ELEMENTS = 1 << 20


def parse_input_value(text: str) -> ValueSpec:
    """``NAME=VALUE[:DTYPE]`` -> ValueSpec (``image_grid_thw=[[1,16,16]]:int64``, ``input_ids=[[1,2,3]]``)."""
    name, sep, body = text.partition("=")
    name = name.strip()
    if not sep or not _NAME.match(name):
        raise FrontendError(f"--input-value wants NAME=VALUE[:DTYPE] (image_grid_thw=[[1,16,16]]:int64), got {text!r}")
    value_text, dtype = body.strip(), None
    head, colon, tail = value_text.rpartition(":")
    if colon and head.strip() and not tail.strip().endswith(("]", "}")):
        try:
            value_text, dtype = head.strip(), dtype_name(tail)
        except FrontendError as e:
            raise FrontendError(f"--input-value {name}: {e}") from None
    try:
        data = json.loads(value_text)
    except json.JSONDecodeError as e:
        raise FrontendError(f"--input-value {name}: {value_text!r} is not a number or a JSON list ({e})") from None
    data, kinds = _nested(data, name), set()
    _kinds(data, kinds)
    if dtype is None:
        dtype = "bool" if kinds == {bool} else "int64" if kinds <= {int, bool} and kinds else "float32"
    if float in kinds and not dtype.startswith(("float", "bfloat")):
        raise FrontendError(f"--input-value {name}: a fraction does not fit dtype {dtype}")
    spec = ValueSpec(name, data, dtype)
    if math.prod(spec.shape) > MAX_VALUE_ELEMENTS:
        raise FrontendError(f"--input-value {name}: more than {MAX_VALUE_ELEMENTS:,} elements")
    return spec


def _nested(data, name: str):
    """JSON -> nested tuples, checked: numbers only, rectangular, no empty list."""
    if isinstance(data, (bool, int, float)):
        return data
    if not isinstance(data, list):
        raise FrontendError(f"--input-value {name}: a value is a number or a list of numbers, not "
                            f"{type(data).__name__}")
    if not data:
        raise FrontendError(f"--input-value {name}: an empty list has no shape to take")
    items = tuple(_nested(d, name) for d in data)
    shapes = {ValueSpec(name, i, "int64").shape for i in items}
    if len(shapes) != 1:
        raise FrontendError(f"--input-value {name}: rows of different lengths (a value must be rectangular)")
    return items


def _kinds(data, out: set) -> None:
    if isinstance(data, tuple):
        for d in data:
            _kinds(d, out)
    else:
        out.add(type(data))


def jax_dtype(dtype):
    """A torch dtype, a numpy/jax dtype or a name -> the numpy dtype JAX lowers it as (64-bit types become
    32-bit unless ``jax_enable_x64`` is on, as everywhere in JAX)."""
    import jax
    import torch

    if isinstance(dtype, torch.dtype):
        dtype = str(dtype).removeprefix("torch.")
    return jax.dtypes.canonicalize_dtype(jax.numpy.dtype(dtype))
