"""The on-disk cache of a sweep, so that a sweep stopped and started again resumes and a second sweep that
shares points reuses them.

Two small JSON files per point, written by the process that runs the sweep (never by a worker):

- ``lowered/<K>.json``: K is a hash of what is lowered (the point, the model configuration it resolves to,
  the versions of mhlo-cost, its source files, jax and jaxlib); it holds the sha256 of the IR that lowering
  made.
- ``results/<R>.json``: R is a hash of the IR's sha256 and the settings of the analysis (conv padding,
  fusion, steps); it holds the point's rows, one per hardware profile, keyed by a hash of the profile in full.
  A sweep on any list of profiles whose rows are there (a subset of an earlier sweep's) reads them; one that
  needs a profile not there computes the point and adds its rows.

A point whose two files are there is not lowered again; deleting its ``results`` file recomputes it (and
only it). The default folder is the user's cache folder (``$XDG_CACHE_HOME/mhlo-cost/sweep``, else
``~/.cache/mhlo-cost/sweep``).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path

from .point import Result, Task

FORMAT = 3  # bumped when a row's meaning changes: old entries are then never read


def default_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mhlo-cost" / "sweep"


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=repr).encode()).hexdigest()


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    from ... import __version__

    out = {"mhlo-cost": __version__, "format": FORMAT, "code": _code_hash()}
    for pkg in ("jax", "jaxlib"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def _code_hash() -> str:
    """A hash of the package's own source files: a changed rule or estimate (an editable install between
    releases) is a new key, never a stale row."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*")):
        if f.suffix in (".py", ".toml") and "__pycache__" not in f.parts:
            h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


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
    return {"config": repr(config), "plan": repr(plan)}


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


class Cache:
    """The cache under ``root`` (None: a cache that holds nothing and keeps nothing)."""

    def __init__(self, root: str | os.PathLike | None):
        self.root = Path(root) if root is not None else None
        self._versions = _versions()
        self._profiles: dict = {}

    def lowering_key(self, task: Task) -> str:
        return _hash({"point": asdict(task.point), "lowered": _lowered(task), "versions": self._versions})

    def profile_keys(self, task: Task) -> list[str]:
        """A hash per hardware profile of the task, of the profile in full: a changed figure is a new key (its
        ``source`` aside: for a --hardware-file profile without one, a temporary file's name)."""
        which = (tuple(task.hardware), task.hardware_toml)
        if which not in self._profiles:
            self._profiles[which] = [_hash(repr(replace(h, source=""))) for h in task.profiles()]
        return self._profiles[which]

    def result_key(self, ir_sha256: str, task: Task) -> str:
        """The key of the point's rows: its IR and the analysis settings (the profiles are keys inside)."""
        settings = {"ir": ir_sha256, "steps": task.steps, "fuse": task.fuse, "conv_padding": task.conv_padding,
                    "versions": self._versions}
        return _hash(settings)

    def result_path(self, task: Task) -> Path | None:
        """Where the point's rows are (or would be), None where its IR is not known yet."""
        if self.root is None:
            return None
        entry = _read(self.root / "lowered" / f"{self.lowering_key(task)}.json")
        if entry is None or not isinstance(entry.get("ir_sha256"), str):
            return None
        return self.root / "results" / f"{self.result_key(entry['ir_sha256'], task)}.json"

    def _entry(self, path: Path | None, task: Task) -> dict | None:
        entry = _read(path) if path is not None else None
        if entry is None or entry.get("point") != json.loads(json.dumps(asdict(task.point))) or not isinstance(
                entry.get("rows"), dict) or not isinstance(entry.get("ir_sha256"), str):
            return None
        return entry

    def get(self, task: Task) -> Result | None:
        """The point's rows where the cache holds a row for every profile of the task (any subset of the
        profiles a sweep of the point computed), else None."""
        entry = self._entry(self.result_path(task), task)
        keys = self.profile_keys(task) if entry is not None else []
        if entry is None or not all(k in entry["rows"] for k in keys):
            return None
        return Result(task.point, "ok", "", entry["ir_sha256"], [entry["rows"][k] for k in keys], 0.0)

    def put(self, task: Task, result: Result) -> None:
        """Keep an ``ok`` result, beside the rows of other profiles kept for the point (a failure is tried
        again next time)."""
        if self.root is None or result.status != "ok":
            return
        try:
            _write(self.root / "lowered" / f"{self.lowering_key(task)}.json", {"ir_sha256": result.ir_sha256})
            path = self.root / "results" / f"{self.result_key(result.ir_sha256, task)}.json"
            old = self._entry(path, task)
            rows = dict(old["rows"]) if old is not None and old["ir_sha256"] == result.ir_sha256 else {}
            rows.update(zip(self.profile_keys(task), result.rows))
            _write(path, {"point": asdict(task.point), "ir_sha256": result.ir_sha256, "rows": rows})
        except OSError as e:  # (a full disk mid-sweep): the sweep goes on without keeping its results
            print(f"mhlo-cost: warning: {self.root}: cannot keep results there ({e.strerror or e}); "
                  "the sweep goes on without its cache", file=sys.stderr)
            self.root = None


def _read(path: Path) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None  # missing or torn: computed again
    return data if isinstance(data, dict) else None


def _write(path: Path, data: dict) -> None:
    """Write atomically (a temporary file renamed), so a sweep stopped mid-write leaves no torn entry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
