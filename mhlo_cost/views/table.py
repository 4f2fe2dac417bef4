"""What every view produces and every renderer takes: one :class:`Table`, and the request that asks for it."""
from __future__ import annotations

from dataclasses import dataclass, field


class ViewError(ValueError):
    """A view cannot be made as asked (a block or scope no row has): one line for the user."""


@dataclass(frozen=True)
class ViewRequest:
    """Which view (``by``, a ``--by`` name; ``depth`` for scope and tree), which rows (``block``: a block's
    name; ``scope``: a regex of scope paths; ``top``: the N slowest ops), ``parts`` (blocks split into their
    parts), ``unit`` (the display unit the title names), ``headline`` (the block view: the program's
    headline above the table), ``bare`` (the ``blocks`` command's table: no title, no headline, and ``block`` /
    ``scope`` name the block rows kept, not the ops')."""

    by: str = "summary"
    depth: int | None = None
    block: str | None = None
    scope: str | None = None
    top: int | None = None
    parts: bool = False
    unit: str = "raw"
    headline: bool = True
    bare: bool = False


@dataclass
class Table:
    """One view's answer: the rows (``frame``, a DataFrame; the summary's ``pairs``, (metric, value) without
    pandas), its ``title``, ``notes`` (lines under the table), ``meta`` (the JSON's keys before the rows:
    tool, source, the headline, a training step's phases), ``summary`` (the program's counts, in JSON) and
    ``text_frame``: where the aligned text and Markdown show fewer columns (a training step's block table
    without the sums its phase columns add up to), those; CSV, JSON and HTML hold ``frame`` whole.

    Two kinds of table stand for more than rows: ``page(unit)``, where set, is the whole page the HTML renderer
    writes instead of the rows (the summary view: the study's report page); ``parts``, where set, are several
    programs' tables of one view, written as one table with a ``file`` column first (:mod:`.many`), ``after``
    holding the JSON's keys after the rows (each file's counts). ``appendix``: (heading, Table) pairs the text and
    Markdown show after the table (a sweep's skipped splits; JSON carries them in ``after``). ``exports``: the
formats (``dot``, ``graph``) of what a view stands for beside its rows (the task graph), each a function of
nothing."""

    title: str | None
    frame: object = None
    pairs: list | None = None
    notes: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    summary: dict | None = None
    text_frame: object = None
    page: object = None
    parts: list | None = None
    after: dict = field(default_factory=dict)
    appendix: list = field(default_factory=list)
    exports: dict = field(default_factory=dict)  # format -> the text of what the table stands for (a graph)

    @property
    def shown(self):
        """The frame the aligned text and Markdown show."""
        return self.frame if self.text_frame is None else self.text_frame


def meta(analysis) -> dict:
    """The JSON's first keys: the tool, its version, the program."""
    from .. import __version__

    return {"tool": "mhlo-cost", "version": __version__, "source": analysis.source, "entry": analysis.entry}
