"""What ``lower`` can check before its heavy imports (torch, a model library, tracing), and the file names
its IR carries.

:func:`check_request`: the extras a request needs are installed (one line naming the ``pip install`` to run,
where the import would fail after a minute of other imports), and a transformers / diffusers class name is
one the library exports (``dir()`` of its lazy top module: no torch import), with the closest names.
:func:`relative_locations`: while lowering, source files in op locations are written relative to the
``sys.path`` entry (or current folder) they are found under: ``transformers/models/llama/modeling_llama.py``,
never a site-packages or home prefix, so that the same model lowered on two machines gives the same bytes.
"""
from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.util
import os
import re
import sys

from . import FrontendError

#: module -> the extra of mhlo-cost that brings it
EXTRA_OF = {"torch": "torch", "torchax": "torch", "transformers": "models", "diffusers": "models",
            "timm": "models", "torch_xla": "torch-xla", "optax": "train", "flax": "models"}
LIBRARY_MODULES = {"hf": "transformers", "diffusers": "diffusers", "timm": "timm"}


def installed(module: str) -> bool:
    """Whether ``import module`` can find it, without importing it (a ``None`` in sys.modules: blocked)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def needed_modules(library: str | None, frontend: str | None, train: bool = False) -> list[tuple[str, str]]:
    """(module, extra) that a lowering of ``library`` (hf, diffusers, timm) with ``frontend`` imports."""
    needs = []
    if library is not None:
        lib = LIBRARY_MODULES[library]
        needs += [(lib, "models"), ("torch", "models"), ("torchax", "models")]
    elif frontend == "torchax":
        needs += [("torch", "torch"), ("torchax", "torch")]
    elif frontend == "torch-xla":
        needs += [("torch_xla", "torch-xla")]
    if train:
        needs.append(("optax", "train"))
    return needs


def check_extras(library: str | None, frontend: str | None, train: bool = False) -> None:
    for module, extra in needed_modules(library, frontend, train):
        if not installed(module):
            what = f"--{library}" if library else (f"--frontend {frontend}" if module != "optax" else "--train")
            raise FrontendError(f"{what} needs {module}, which is not installed: pip install 'mhlo-cost[{extra}]'")


def check_class_name(library: str, name: str) -> None:
    """A transformers / diffusers class name the library does not export: one line with the closest names,
    from the names its lazy top module lists (``dir()`` imports no submodule: seconds, not a minute)."""
    if library not in ("hf", "diffusers"):
        return  # timm's registry is filled by importing its models (torch): checked when it is built
    module = LIBRARY_MODULES[library]
    try:
        mod = importlib.import_module(module)
        names = [n for n in dir(mod) if n[:1].isupper()]
    except Exception:  # noqa: BLE001 - a library that does not import: the build says why, in one line
        return
    if name in names:
        return
    near = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if not near and library == "hf":
        return  # maybe a model type (llama): the build's message says what to give instead
    raise FrontendError(f"{module} has no class {name!r}" + (f" (did you mean {', '.join(near)}?)" if near else ""))


def check_request(req) -> None:
    """The checks of a LowerRequest that cost no heavy import."""
    check_extras(req.library, req.frontend if req.library is None else None, req.train is not None)
    if req.library is not None and req.name:
        check_class_name(req.library, req.name)


def path_roots() -> list[str]:
    """The folders source files are named relative to: every ``sys.path`` entry and the current folder,
    longest first (the most specific wins), each as given and resolved."""
    roots = set()
    for p in [*sys.path, os.getcwd()]:
        if p and os.path.isdir(p):
            roots.update({os.path.abspath(p), os.path.realpath(p)})
    return sorted((r for r in roots if r != os.sep), key=len, reverse=True)


def location_regex() -> str:
    """What jax removes from each source file name: a root's prefix, else every folder (a file found under
    no root keeps its name only): no absolute path is left."""
    alternatives = [re.escape(r.rstrip(os.sep) + os.sep) for r in path_roots()]
    return "^(?:" + "|".join([*alternatives, ".*" + re.escape(os.sep)]) + ")"


def driver_frames() -> list[str]:
    """The files of the command that drives a lowering (this package's command line, frontends and
    :mod:`mhlo_cost.lower.run`, ``python -m``'s runpy, the console script): frames of theirs say how the tool was started, not what the model
    computes, so they are kept out of op locations (the same file from ``mhlo-cost`` and ``python -m``)."""
    lower = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pkg = os.path.dirname(lower)
    paths = [os.path.join(pkg, "cli") + os.sep, os.path.join(lower, "frontends") + os.sep,
             os.path.join(lower, "run.py"), os.path.join(pkg, "__main__.py"), "<frozen runpy>", "<string>"]
    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if script and os.path.isfile(script) and not script.endswith(".py"):  # a console script
        paths.append(script)
    return paths


def _exclude_driver_frames() -> list[str]:
    """:func:`driver_frames` added to the paths jax's locations skip; the paths it added (those not there yet)."""
    try:  # jax's own list of paths its tracebacks and locations skip (it has no public name for it)
        from jax._src import source_info_util
    except ImportError:
        return []
    known = set(getattr(source_info_util, "_exclude_paths", ()))
    added = [path for path in driver_frames() if path not in known]
    for path in added:
        source_info_util.register_exclusion(path)
    return added


def _include_again(added: list[str]) -> None:
    """The paths :func:`_exclude_driver_frames` added taken out of jax's list again, and its caches of what the
    list says cleared (as ``register_exclusion`` in ``jax/_src/source_info_util.py`` clears them on adding)."""
    if not added:
        return
    from jax._src import source_info_util

    paths = source_info_util._exclude_paths
    for path in added:
        if path in paths:
            paths.remove(path)
    for cached in ("_exclude_path_regex", "is_user_filename"):
        clear = getattr(getattr(source_info_util, cached, None), "cache_clear", None)
        if clear is not None:
            clear()


@contextlib.contextmanager
def relative_locations():
    """While lowering with jax (torchax too): op locations name files relative to their package root, and
    carry no frame of the command that drives the lowering (:func:`driver_frames`). Both hold while it is
    active only: a lowering after it in the same process (the serve grid's steps, whose traced-once layers are
    traced from a file under ``frontends/``) records the frames it would record in a process of its own."""
    import jax

    added = _exclude_driver_frames()
    key = "jax_hlo_source_file_canonicalization_regex"
    saved = getattr(jax.config, key)
    jax.config.update(key, location_regex())
    try:
        yield
    finally:
        jax.config.update(key, saved)
        _include_again(added)
