"""The on-disk cache of a sweep, so that a sweep stopped and started again resumes and a second sweep that
shares points reuses them: two kinds of entry of the one cache (:mod:`mhlo_cost.files.cache`, keyed by the
request and the code hash), read and written by the process that runs the sweep (never by a worker):

- ``sweep/lowered`` (:data:`LOWERED`): what a point lowers (the point, the model configuration it resolves
  to; for a ``[[models]]`` entry its files and libraries) -> the sha256 of the IR its rows are made from (for a point priced from one layer, depths 2 and 3,
  not the depth-4 lowering of its check).
- ``sweep/results`` (:data:`RESULTS`): the point, its IR's sha256 and the analysis settings (conv padding,
  fusion, steps) -> the point's rows, one per hardware profile, keyed by a hash of the profile in full. A
  sweep on any list of profiles whose rows are there (a subset of an earlier sweep's) reads them; one that
  needs a profile not there computes the point and adds its rows; with them, for a point priced from one layer,
  whether its repetition's check ran and held (the first point of a program read from here counts as checked
  only where it did run). A point priced from one layer has one IR key whether its check ran or not (the
  lowerings its rows are made from), so rows made again unchecked (a later sweep where the point is not the first
  of its program) land in the entry of the checked ones and keep its check.

A point whose two entries are there is not lowered again; deleting its ``results`` entry recomputes it (and
only it); a damaged one is computed again with a note. The folder is the cache root's ``sweep/``
(:func:`mhlo_cost.files.cache.default_root`, or ``--cache-dir``).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable

from ...files.cache import AMOUNT, COUNT, POSITIVE, SHA256, TEXT, DiskCache, MapOf, Maybe, OneOf, Record, \
    Schema, digest
from .point import Result, Task

_YES_NO = OneOf(("yes", "no"))
#: One row of a point on one profile (:func:`mhlo_cost.views.sweep_row.sweep_row`).
ROW = Record(
    {"gemm_flops": COUNT, "conv_flops": COUNT, "vector_flops": COUNT, "comm_bytes": COUNT, "flops": COUNT,
     "peak_bytes": COUNT, "hbm_bytes": COUNT, "fits": _YES_NO, "est_time_s": AMOUNT, "bound": TEXT,
     "accuracy_error": Maybe(AMOUNT), "steps": POSITIVE, "time_step_s": AMOUNT, "time_run_s": AMOUNT},
    optional={"peak_bytes_fused": COUNT, "fits_fused": _YES_NO, "est_time_overlap_s": AMOUNT,
              "est_time_fused_s": AMOUNT, "est_time_fused_overlap_s": AMOUNT, "comm_time_s": AMOUNT,
              "comm_exposed_s": AMOUNT, "comm_exposed_fused_s": AMOUNT, "utilisation": AMOUNT,
              "utilisation_fused": AMOUNT})
LOWERED = Schema("sweep/lowered", 1, Record({"ir_sha256": SHA256}))
#: ``checked`` (by profile key): whether the rows were priced from one layer with the repetition checked at the
#: check depth and the check held (``yes``) or not (``no``: the rows are the full path's); absent where no check
#: ran. The first point of a program read from here counts as checked only with a ``yes`` for every profile.
RESULTS = Schema("sweep/results", 1, Record({"rows": MapOf(ROW)}, optional={"checked": MapOf(_YES_NO)}))


def _lowered(task: Task):
    """What a point lowers: for the bundled models, the configuration and plan ``lower`` builds (so an option
    given at its default value is the same point); for the others, the options as given."""
    if task.point.source:
        return {"options": task.options, "files": _source_files(dict(task.point.source)),
                "libraries": _library_versions()}
    from .grid import build_config

    try:
        config, plan = build_config(task.point, task.options)
    except Exception:  # noqa: BLE001 - an invalid point is skipped before it is looked up
        return task.options
    deployed = {"deployed": True} if task.options.get("deployed") else {}  # another module, another IR
    return {"config": repr(config), "plan": repr(plan), **deployed}


def _source_files(src: dict) -> dict:
    """Hashes of the files a ``[[models]]`` entry reads: a ``module``'s source (its file; a package's every
    ``.py``) and a ``config`` that is a file or folder, so that editing them is a new key."""
    import importlib.util
    import sys

    paths: list[Path] = []
    if src.get("module"):
        name = str(src["module"]).split(":")[0]
        sys.path.insert(0, os.getcwd())  # found from the current folder, as `lower --module` finds it
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        finally:
            sys.path.pop(0)
        origin = Path(spec.origin) if spec is not None and spec.origin else None
        if origin is not None and origin.is_file():
            paths += sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else [origin]
    config = src.get("config")
    if isinstance(config, str) and os.path.exists(config):
        c = Path(config)
        paths += sorted(f for f in c.rglob("*") if f.is_file()) if c.is_dir() else [c]
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in paths}


def _library_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("torch", "torchax", "transformers", "diffusers", "timm", "flax"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def _point_key(point) -> dict:
    """The point as a key; its precision only where it is not bf16 (a bf16 point's keys are those kept before
    the sweep took recipes)."""
    from .grid import DEFAULT_PRECISION

    key = asdict(point)
    if key["precision"] == DEFAULT_PRECISION:
        del key["precision"]
    return key


class Cache:
    """The sweep's entries under the cache root ``root`` (None: a cache that holds nothing and keeps nothing);
    ``note(text)``: told of an entry not trusted or not kept."""

    def __init__(self, root: str | os.PathLike | None, note: Callable[[str], None] | None = None):
        self.lowered = DiskCache(root, LOWERED, note)
        self.results = DiskCache(root, RESULTS, note)
        self._profiles: dict = {}

    def holds_no_rows(self) -> bool:
        """Whether no point's rows are kept (no cache, or no ``results`` entry yet): every point is computed."""
        folder = self.results.folder
        return folder is None or not folder.is_dir() or next(folder.iterdir(), None) is None

    def lowering_request(self, task: Task) -> dict:
        return {"point": _point_key(task.point), "lowered": _lowered(task)}

    def profile_keys(self, task: Task) -> list[str]:
        """A hash per hardware profile of the task, of the profile in full: a changed figure is a new key (its
        ``source`` aside: for a --hardware-file profile without one, a temporary file's name)."""
        which = (tuple(task.hardware), task.hardware_toml)
        if which not in self._profiles:
            self._profiles[which] = [digest(repr(replace(h, source=""))) for h in task.profiles()]
        return self._profiles[which]

    def result_request(self, ir_sha256: str, task: Task) -> dict:
        """What the point's rows depend on: the point, its IR and the analysis settings (the profiles are
        keys inside)."""
        return {"point": _point_key(task.point), "ir": ir_sha256, "steps": task.steps, "fuse": task.fuse,
                "conv_padding": task.conv_padding}

    def _entry(self, task: Task) -> tuple[str, dict] | None:
        """(the IR's sha256, the entry: rows and check markers by profile key) kept for the point, or None."""
        if self.lowered.folder is None:  # nothing kept: nothing to resolve either
            return None
        lowered = self.lowered.get(self.lowering_request(task))
        if lowered is None:
            return None
        entry = self.results.get(self.result_request(lowered["ir_sha256"], task))
        return (lowered["ir_sha256"], entry) if entry is not None else None

    def get(self, task: Task) -> Result | None:
        """The point's rows where the cache holds a row for every profile of the task (any subset of the
        profiles a sweep of the point computed), else None; a point that checks its program's repetition
        (``task.check``, priced from one layer) only where the check's outcome is kept for every profile."""
        from .point import repeats

        entry = self._entry(task)
        keys = self.profile_keys(task) if entry is not None else []
        if entry is None or not all(k in entry[1]["rows"] for k in keys):
            return None
        check = ""
        if task.check and repeats(task):
            marks = entry[1].get("checked", {})
            if not all(k in marks for k in keys):
                return None  # computed without the check (or before it was kept): computed again, with it
            check = "passed" if all(marks[k] == "yes" for k in keys) else "failed"
        return Result(task.point, "ok", "", entry[0], [entry[1]["rows"][k] for k in keys], 0.0, check)

    def put(self, task: Task, result: Result) -> None:
        """Keep an ``ok`` result, beside the rows of other profiles kept for the point (a failure is tried
        again next time), with its check's outcome per profile."""
        if result.status != "ok" or self.lowered.folder is None:
            return
        self.lowered.put(self.lowering_request(task), {"ir_sha256": result.ir_sha256})
        request = self.result_request(result.ir_sha256, task)
        old = self.results.get(request)
        rows = dict(old["rows"]) if old is not None else {}
        checked = dict(old.get("checked", {})) if old is not None else {}
        keys = self.profile_keys(task)
        rows.update(zip(keys, result.rows))
        if result.check:  # (rows made again unchecked are the same rows: a check kept for them still holds)
            checked.update((k, "yes" if result.check == "passed" else "no") for k in keys)
        self.results.put(request, {"rows": rows, **({"checked": checked} if checked else {})})
