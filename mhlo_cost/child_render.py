"""The whole answer of a ``report`` in the reader's child: where the child can compute all a request shows, it
renders the view itself and sends back the text and the lines to say, not the rows (their encoding, sending and
decoding cost more than the view itself on a large program).

:func:`spec` (the caller's side, standard library only) writes what is asked as JSON, carried by
:class:`mhlo_cost.worker.WalkOptions`; :func:`render_whole` (the child's side) answers it, or gives None where
the caller must see the rows: the analysis has warnings or unknown ops to say (``--strict`` may refuse them),
or the view failed (a filter no row matches: the caller makes it again and says why, as it would have).
The answer is JSON: ``[text, [[line, is_note], ...]]``, the lines said on stderr before the text is written.
"""
from __future__ import annotations

import json
from dataclasses import asdict

#: The formats the child renders whole (HTML pages tell the progress line their stages: the caller's).
FORMATS = ("table", "csv", "json", "markdown")
#: The views whose blocks the caller says (found, warnings), as :func:`mhlo_cost.cli.common.study_blocks` does.
SAYS_BLOCKS = ("block", "memory")
#: The study's options a spec carries (the program, the profile and the isolation stay with the caller).
STUDY_FIELDS = ("entry", "conv_padding", "training", "execution", "fuse", "attention", "sdpa", "steps", "blocks",
                "block_pattern", "norms_per_block")


def spec(options, request, fmt: str, wide: bool) -> str | None:
    """What the child is asked to render (JSON) for a study's ``options`` (a
    :class:`~mhlo_cost.study.StudyOptions`) and a :class:`~mhlo_cost.views.table.ViewRequest`, or None where
    the child cannot answer the whole request: a format not in :data:`FORMATS`, or a profile (resolved by the
    caller, from its own folder and environment)."""
    if fmt not in FORMATS or options.hardware is not None or options.hardware_file is not None:
        return None
    fields = {k: getattr(options, k) for k in STUDY_FIELDS}
    return json.dumps({"study": fields, "request": asdict(request), "format": fmt, "wide": bool(wide)},
                      sort_keys=True)


def render_whole(analysis, spec_json: str) -> bytes | None:
    """The rendered answer to ``spec_json`` for ``analysis`` (walked here), or None (see the module docstring)."""
    if analysis.warnings or any(r.kind == "unknown" for r in analysis.rows):
        return None
    try:
        text, lines = _render(analysis, json.loads(spec_json))
        return json.dumps([text, lines]).encode("utf-8")
    except Exception:  # noqa: BLE001 (MemoryError too: the rows go back, and the caller says what is wrong)
        return None


def _render(analysis, asked: dict) -> tuple[str, list]:
    from .study import Study
    from .views.by import view
    from .views.render import render
    from .views.table import ViewRequest

    study = Study.of(analysis, **asked["study"])
    req = ViewRequest(**asked["request"])
    table = view(study, req)
    lines = []
    if req.by in SAYS_BLOCKS:  # as mhlo_cost.cli.common.study_blocks says them
        blocks = study.blocks
        lines = [[f"warning: {w}", False] for w in blocks.warnings]
        if blocks.blocks:
            lines.append([blocks.found(), True])
    return render(table, asked["format"], req.unit, wide=asked["wide"]), lines
