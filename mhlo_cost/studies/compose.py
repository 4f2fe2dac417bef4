"""The one composition: (programs, the study's options, a view request, a format) -> the rendered text, and the
lines said on stderr on the way. ``report`` and ``blocks`` call :func:`compose`; so does the Python API
(``mhlo_cost.compose``); the reader's child calls :func:`answer_in_child`, which runs the same :func:`answer`
on the analysis it walked, so that the same text is made on one path.

One program in the reader's child (the default) and no profile: the child is asked for the whole answer (the
rows cost more to encode, send and decode than the view itself on a large program). What crosses the process
boundary is the :class:`~mhlo_cost.studies.study.StudyOptions` itself, every field but :data:`LOCAL` (made by
:func:`wire`, rebuilt with ``StudyOptions(**fields)``), the :class:`~mhlo_cost.views.table.ViewRequest` and the
format. The child gives back None (the rows then come back) where the caller has more to say: the analysis has
warnings or unknown ops (``--strict`` may refuse them), or the view failed (a filter no row matches: the caller
makes it again and says why). Its answer is JSON ``[text, [[line, is_note], ...], [stage, ...]]``.

:func:`open_study` is the first half of the composition, for the commands that draw or compare what they read
(``plot``, ``baseline``, ``check``, ``diff``): the study walked, jaxlib's version checked, its warnings said.
"""
from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Callable

from ..files.console import silent
from ..views.table import ViewRequest
from .study import Study, StudyOptions

#: The study's options that stay with the caller: the program (the child has it already), its name (the
#: analysis carries it) and the isolation (the child walks where it is).
LOCAL = frozenset({"source", "name", "isolate"})
#: What the summary and the block views import, imported while the reader's child parses and walks.
VIEW_MODULES = ("mhlo_cost.memory.profile", "mhlo_cost.analysis.collectors.repeat",
                "mhlo_cost.analysis.collectors.scope", "mhlo_cost.views.figures", "mhlo_cost.views.headline",
                "mhlo_cost.views.pairs")

Say = Callable[[str, bool], None]


def _warn(line: str, note: bool = False) -> None:
    """The Python API's default: a warning line is a Python warning; a note is dropped."""
    if not note:
        import warnings

        warnings.warn(line, stacklevel=3)


def compose(programs, request: ViewRequest | None = None, fmt: str = "table", *, wide: bool = False,
            strict: bool = False, stage: Callable[[str], None] | None = None, say: Say | None = None) -> str:
    """The text that answers ``request`` (default: the summary) about ``programs`` in the format ``fmt`` (a key
    of :data:`mhlo_cost.views.render.RENDERERS`). ``programs``: a :class:`StudyOptions`, a source (a path,
    MLIR text or bytes) or a list of them (several: one table with a ``file`` column). ``say(line, is_note)``
    hears the warnings and notes (default: warnings as Python warnings), ``stage(text)`` the stages;
    ``strict``: an op no rule knows is an error."""
    stage, say = stage or silent, say or _warn
    request = request if request is not None else ViewRequest()
    programs = [programs] if isinstance(programs, (StudyOptions, str, bytes)) else list(programs)
    programs = [p if isinstance(p, StudyOptions) else StudyOptions(p) for p in programs]
    tables = []
    for options in programs:
        asked = wire(options, request, fmt, wide) if len(programs) == 1 else None
        study, whole = open_study(options, strict=strict, stage=stage, say=say, asked=asked)
        if whole is not None:
            text, lines, stages = json.loads(whole)
            for told in stages:
                stage(told)
            for line, note in lines:
                say(line, note)
            return text
        tables.append(answer(study, request, fmt, say))
    from ..views.render import render

    if len(tables) == 1:
        return render(tables[0], fmt, request.unit, wide=wide)
    from ..views.many import joined

    return render(joined(tables, request), fmt, request.unit, wide=wide)


def answer(study: Study, request: ViewRequest, fmt: str, say: Say):
    """The one answer of one program: the estimate made (its unknown ops said), the view's Table, the blocks
    said where the view shows them. The caller's path and the child's (:func:`answer_in_child`) both run it."""
    estimate_said(study, say)
    study.stage("grouping")
    table = study.view(request)
    if request.by in ("block", "memory") or (request.by, fmt) == ("summary", "html"):
        blocks_said(study, say)  # the blocks shown: what was found
    return table


def estimate_said(study: Study, say: Say):
    """The study's estimate (None without a profile), its unknown ops said."""
    rf = study.roofline
    if rf is not None and rf.unknown_ops:
        say(f"warning: {rf.unknown_ops} unknown op(s) are estimated at 0 s", False)
    return rf


def blocks_said(study: Study, say: Say):
    """The study's blocks, their warnings and what was found said."""
    blocks = study.blocks
    for w in blocks.warnings:
        say(f"warning: {w}", False)
    if blocks.blocks:  # where none was found, the table's rows say so (grouped by scope)
        say(blocks.found(), True)
    return blocks


def open_study(options: StudyOptions, *, strict: bool = False, stage: Callable[[str], None] | None = None,
               say: Say | None = None, asked: str | None = None) -> tuple[Study, bytes | None]:
    """(the study of ``options``, walked, its warnings said (``strict``: an op no rule knows is an
    :class:`~mhlo_cost.walk.row.AnalysisError`), None); or, where ``asked`` (:func:`wire`) is given and the
    reader's child answers it whole, (the study without its analysis, the child's answer)."""
    stage, say = stage or silent, say or _warn
    meanwhile = _Meanwhile(views=asked is None)
    study = Study(options, stage=stage, meanwhile=meanwhile)
    if not study.isolated():  # MHLO_COST_ISOLATE=0: parsed and walked here (jaxlib's version checked first)
        _said(study.analysis, strict, say)
        return study, None
    from ..ir.guard import prestart

    prestart(walk=True)  # (started already by the command line; harmless)
    try:  # parsed and walked once, in the child: this process imports no jaxlib
        whole = study.answer(asked) if asked is not None else None
        analysis = study.analysis if whole is None else None
    except Exception:
        meanwhile.check()  # a jaxlib too old (or none) says so first
        raise
    meanwhile.check()
    if whole is None:
        _said(analysis, strict, say)
    return study, whole


def _said(analysis, strict: bool, say: Say) -> None:
    """The analysis' warnings and unknown ops said (``strict``: an error)."""
    from ..walk.row import EMPTY_ENTRY, AnalysisError

    for w in analysis.warnings:  # a fact about the counts (shard_map: per device) is a note
        if w.startswith(EMPTY_ENTRY) and strict:
            raise AnalysisError(f"{analysis.source}: {w} (--strict)")
        say(f"note: {w}" if "per device" in w else f"warning: {w}", "per device" in w)
    unknown = sum(r.multiplicity for r in analysis.rows if r.kind == "unknown")
    if unknown:
        names = ", ".join(analysis.unknown[:5]) + (" ..." if len(analysis.unknown) > 5 else "")
        if strict:
            raise AnalysisError(f"{analysis.source}: {unknown} op(s) no rule knows: {names} (--strict)")
        say(f"warning: {unknown} op(s) no rule knows, counted as unknown: {names}", False)


class _Meanwhile:
    """What the caller does while the reader's child parses and walks: jaxlib's version read (its error kept
    for :meth:`check`: its metadata is slow to read) and, unless the child renders, the views imported."""

    def __init__(self, views: bool):
        self.views, self.done, self.error = views, False, None

    def __call__(self) -> None:
        from ..ir.loader import LoadError, require_jax

        try:
            require_jax()
        except LoadError as e:
            self.error = e
        self.done = True
        if self.views:
            import importlib

            for module in VIEW_MODULES:
                try:
                    importlib.import_module(module)
                except ImportError:  # said where it is needed
                    pass

    def check(self) -> None:
        """Raise the version check's error (made now where it was not made meanwhile)."""
        if not self.done:
            from ..ir.loader import require_jax

            require_jax()
        elif self.error is not None:
            raise self.error


# -- across the process boundary -------------------------------------------------------------------------------


def wire(options: StudyOptions, request: ViewRequest, fmt: str, wide: bool = False) -> str | None:
    """What the reader's child is asked to answer (JSON): every field of ``options`` but :data:`LOCAL`, the
    request and the format; None where the options hold a profile (the caller has imported the estimate, and
    pandas, while the child walked: the rows go back, the child importing them after its walk is no faster)."""
    if options.hardware is not None or options.hardware_file is not None:
        return None
    study = {f.name: getattr(options, f.name) for f in fields(options) if f.name not in LOCAL}
    return json.dumps({"study": study, "request": asdict(request), "format": fmt, "wide": bool(wide)},
                      sort_keys=True)


def answerable(analysis) -> bool:
    """Whether :func:`answer_in_child` may answer for ``analysis`` (no warnings, no unknown op: those the caller
    says, from the analysis); cheap, asked before anything is computed for the answer."""
    return not analysis.warnings and not any(r.kind == "unknown" for r in analysis.rows)


def answer_in_child(analysis, asked: str) -> bytes | None:
    """The whole answer to ``asked`` (:func:`wire`) for ``analysis`` (walked in the reader's child), or None
    (see the module docstring)."""
    if not answerable(analysis):
        return None
    try:
        return json.dumps(_answered(analysis, json.loads(asked))).encode("utf-8")
    except Exception:  # noqa: BLE001 (MemoryError too: the rows go back, and the caller says what is wrong)
        return None


answer_in_child.answerable = answerable  # (mhlo_cost.analysis.isolated asks it before it forks)


def _answered(analysis, asked: dict) -> list:
    from ..views.render import render

    stages: list[str] = []
    lines: list[list] = []
    study = Study.of(analysis, **asked["study"])
    study.stage = stages.append
    request, fmt = ViewRequest(**asked["request"]), asked["format"]
    table = answer(study, request, fmt, lambda line, note: lines.append([line, note]))
    return [render(table, fmt, request.unit, wide=asked["wide"]), lines, stages]

