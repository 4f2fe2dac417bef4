"""The whole answer of a one-file ``report`` in the reader's child: the child renders the view itself and sends
back the text, the progress stages and the lines to say, not the rows (their encoding, sending and decoding
cost more than the view itself on a large program).

:func:`spec` (the caller's side, standard library only) writes what is asked as JSON, carried by
:class:`mhlo_cost.analysis.isolated.WalkOptions`; :func:`render_whole` (the child's side) answers it, or gives None where
the caller must see the rows: the analysis has warnings or unknown ops to say (``--strict`` may refuse them),
or the view failed (a filter no row matches: the caller makes it again and says why, as it would have).
The answer is JSON: ``[text, [[line, is_note], ...], [stage, ...]]``: the stages the progress line is told
(``grouping`` among them, where the caller's own loop tells it), then the lines said on stderr, then the text.
"""
from __future__ import annotations

import json
from dataclasses import asdict

#: The study's options a spec carries (the program and the isolation stay with the caller).
STUDY_FIELDS = ("entry", "conv_padding", "training", "execution", "fuse", "attention", "sdpa", "steps", "blocks",
                "block_pattern", "norms_per_block")


def spec(options, request, fmt: str, wide: bool) -> str | None:
    """What the child is asked to render (JSON) for a study's ``options`` (a
    :class:`~mhlo_cost.studies.study.StudyOptions`), a :class:`~mhlo_cost.views.table.ViewRequest` and a format; None
    where the options hold a profile: then the caller has imported the estimate (and pandas) already, while
    the child walked, and the rows go back (the child importing them after its walk is no faster)."""
    if options.hardware is not None or options.hardware_file is not None:
        return None
    fields = {k: getattr(options, k) for k in STUDY_FIELDS}
    return json.dumps({"study": fields, "request": asdict(request), "format": fmt, "wide": bool(wide)},
                      sort_keys=True)


def render_whole(analysis, spec_json: str) -> bytes | None:
    """The rendered answer to ``spec_json`` for ``analysis`` (walked here), or None (see the module docstring)."""
    if analysis.warnings or any(r.kind == "unknown" for r in analysis.rows):
        return None
    try:
        return json.dumps(_render(analysis, json.loads(spec_json))).encode("utf-8")
    except Exception:  # noqa: BLE001 (MemoryError too: the rows go back, and the caller says what is wrong)
        return None


def _render(analysis, asked: dict) -> list:
    """As :func:`mhlo_cost.cli.cmd_report.cmd_report` does for one file: the estimate, the view, the blocks
    said, the text."""
    from .study import Study
    from ..views.by import view
    from ..views.render import render
    from ..views.table import ViewRequest

    stages: list[str] = []
    study = Study.of(analysis, **asked["study"])
    study.stage = stages.append
    req, fmt = ViewRequest(**asked["request"]), asked["format"]
    study.roofline  # noqa: B018 (as the caller's loop asks for it before grouping: None without a profile)
    stages.append("grouping")
    table = view(study, req)
    lines = []
    if req.by in ("block", "memory") or (req.by, fmt) == ("summary", "html"):  # as study_blocks says them
        blocks = study.blocks
        lines = [[f"warning: {w}", False] for w in blocks.warnings]
        if blocks.blocks:
            lines.append([blocks.found(), True])
    told = list(stages)  # (the caller's progress is done before it renders: no stage after this one is shown)
    return [render(table, fmt, req.unit, wide=asked["wide"]), lines, told]
