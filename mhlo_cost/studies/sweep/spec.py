"""A sweep's TOML spec: read, and every key checked by name and type before any point runs.

Keys are named as the flags of ``mhlo-cost sweep``; a key that takes a list also takes one value. A key of the
wrong type (``models = 5``, ``steps = true``, ``devices = ["8"]``) is one line naming the key and the type it
takes, never a failure later in a worker.
"""
from __future__ import annotations

import tomllib

from ...files.read import FileRefused, read_settings
from .grid import LIBRARY_KEYS, MODEL_OPTIONS, SPEC_KEYS, GridError

_TEXT, _INT, _BOOL = "a string", "a whole number", "true or false"
#: key -> (what one value is, whether a list of them is taken)
_TYPES = {
    "model": (_TEXT, False), "shape": (_TEXT, True), "parallel": (_TEXT, True), "devices": (_INT, True),
    "strategies": (_TEXT, True), "hardware": (_TEXT, True), "dtype": (_TEXT, True), "steps": (_INT, False),
    "fuse": (_TEXT, False), "conv_padding": (_TEXT, False), "execution": (_TEXT, False), "precision": (_TEXT, True),
}
_OPTION_TYPES = {"small": _BOOL, "scan": _BOOL, "depth": _INT, "hidden": _INT, "heads": _INT, "batch": _INT,
                 "tokens": _INT, "layers": _INT}
_ENTRY_TYPES = {"name": (_TEXT, False), "module": (_TEXT, False), "hf": (_TEXT, False),
                "diffusers": (_TEXT, False), "timm": (_TEXT, False), "config": (_TEXT, False),
                "set": (_TEXT, True), "kwarg": (_TEXT, True)}


def _is(value, kind: str) -> bool:
    if kind == _TEXT:
        return isinstance(value, str)
    if kind == _BOOL:
        return isinstance(value, bool)
    return isinstance(value, int) and not isinstance(value, bool)


def _check(key: str, value, kind: str, many: bool, path: str) -> None:
    if _is(value, kind) or (many and isinstance(value, list) and value and all(_is(v, kind) for v in value)):
        return
    want = f"{kind} or a non-empty list of them" if many else kind
    raise GridError(f"{path}: key {key!r} must be {want}, got {_shown(value)}")


def _shown(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_spec(path: str) -> dict:
    """The settings of a TOML spec file (keys as the flags: model, shape, parallel, devices, strategies,
    hardware, dtype, precision, steps, fuse, conv_padding; model options under ``[options]``; ``[[models]]``), each
    checked by type; lists where a key takes them."""
    try:
        spec = tomllib.loads(read_settings(path, "a sweep spec").decode("utf-8"))
    except FileRefused as e:
        raise GridError(str(e)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise GridError(f"{path}: not valid TOML: {e}") from None
    if "training" in spec:  # training configurations at scale (mhlo_cost.studies.plan): their own keys
        from .training import check_spec

        return check_spec(spec, path)
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise GridError(f"{path}: unknown key(s) {', '.join(unknown)} (known: {', '.join(SPEC_KEYS)})")
    for key, (kind, many) in _TYPES.items():
        if key in spec:
            _check(key, spec[key], kind, many, path)
            if many and not isinstance(spec[key], list):
                spec[key] = [spec[key]]
    opts = spec.get("options", {})
    if not isinstance(opts, dict):
        raise GridError(f"{path}: key 'options' must be a table ([options]), got {_shown(opts)}")
    bad = sorted(set(opts) - set(MODEL_OPTIONS))
    if bad:
        raise GridError(f"{path}: unknown model option(s) {', '.join(bad)} (known: {', '.join(MODEL_OPTIONS)})")
    for key, value in opts.items():
        _check(f"options.{key}", value, _OPTION_TYPES[key], False, path)
    models = spec.get("models", [])
    if not isinstance(models, list):
        raise GridError(f"{path}: key 'models' must be a list of tables ([[models]]), got {_shown(models)}")
    for entry in models:
        _check_entry(entry, path)
    return spec


def _check_entry(entry, path: str) -> None:
    if not isinstance(entry, dict):
        raise GridError(f"{path}: key 'models' must be a list of tables ([[models]]), got an item {_shown(entry)}")
    bad = sorted(set(entry) - set(LIBRARY_KEYS))
    if bad:
        raise GridError(f"{path}: [[models]]: unknown key(s) {', '.join(bad)} (known: {', '.join(LIBRARY_KEYS)})")
    named = [k for k in ("module", "hf", "diffusers", "timm") if k in entry]
    if len(named) != 1:
        raise GridError(f"{path}: each [[models]] entry names one of module, hf, diffusers, timm")
    for key, (kind, many) in _ENTRY_TYPES.items():
        if key in entry:
            if many and isinstance(entry[key], list) and not entry[key]:
                continue  # set = [] is no setting
            _check(f"models.{key}", entry[key], kind, many, path)
            if many and not isinstance(entry[key], list):
                entry[key] = [entry[key]]
    inputs = entry.get("inputs")
    if not isinstance(inputs, list) or not inputs or not all(
            isinstance(i, list) and i and all(isinstance(s, str) for s in i) for i in inputs):
        raise GridError(f"{path}: [[models]] {entry[named[0]]}: key 'inputs' must be a list of input sets, "
                        'each a non-empty list of strings: inputs = [["1x128:int64"], ["4x128:int64"]]')
