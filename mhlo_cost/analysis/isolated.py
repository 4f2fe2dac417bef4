"""The whole analysis in the MLIR reader's child process (:mod:`mhlo_cost.ir.guard`): parsed once, walked there,
and handed back as bytes (:mod:`mhlo_cost.analysis.wire`), so that the caller never imports jaxlib and never parses
the input a second time.

:func:`analyze_isolated` is the caller's side (standard library only); :func:`answer` runs in the child.
What the walk records travels as :class:`WalkOptions`: the entry, the convolution padding convention, and
``record``: one of :meth:`mhlo_cost.walk.options.AnalysisOptions.recording`'s (``counts``, ``dataflow``,
``training``) or ``training-if-backward`` (``training`` where an op's location names a backward, ``counts``
otherwise). The analysis comes back with the :class:`~mhlo_cost.walk.options.AnalysisOptions` it was
walked with (``Analysis.options``).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from ..files import collector


@dataclass(frozen=True)
class WalkOptions:
    entry: str | None = None
    conv_padding: str = "xla"
    record: str = "counts"
    dataflow_if_forward: bool = False  # training-if-backward: a forward-only program's walk records data flow
    records: tuple = ()  # further declared records (AnalysisOptions.records: "masks")
    render: str | None = None  # the whole answer the child may render (mhlo_cost.studies.compose.wire)
    shapes: tuple = ()  # ((symbol, value), ...): a symbolic program is refined at this point before the walk

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def analyze_isolated(source, options: WalkOptions = WalkOptions(), name: str | None = None, meanwhile=None):
    """The analysis of ``source`` (a path, MLIR text or bytes, as :func:`mhlo_cost.ir.loader.load` takes),
    parsed and walked in the reader's child process. :class:`~mhlo_cost.ir.loader.LoadError` for what is not
    MLIR, :class:`~mhlo_cost.walk.row.AnalysisError` for IR that cannot be counted, RuntimeError for a
    bug in the walk. ``meanwhile()`` runs here while the child works (imports the caller needs next)."""
    from ..ir.codes import Answer
    from ..ir.guard import walk_guarded
    from ..ir.loader import LoadError, error_message, prepare
    from ..walk.row import AnalysisError

    kind, data, name = prepare(source, name)
    code, payload = walk_guarded(kind, data, name, options.to_json(), meanwhile)
    if code is Answer.RENDERED:
        return Rendered(payload)
    if code is Answer.ANALYSIS:
        return _decode(payload)
    if code is Answer.BYTECODE:  # too large to send: walked here, from the bytecode MLIR wrote (jaxlib imported)
        from ..ir.loader import load_written

        return walk_loaded(load_written(payload, name, kind), options)
    message = payload.decode("utf-8", "replace")
    if code is Answer.ANALYSIS_ERROR:
        raise AnalysisError(message)
    if code is Answer.BUG:
        raise RuntimeError(message)
    raise LoadError(error_message(kind, message, name))


class Rendered(bytes):
    """The child's whole answer to ``WalkOptions.render`` (:func:`mhlo_cost.studies.compose.answer_in_child`), in
    place of the analysis."""


def _decode(payload: bytes):
    """The analysis in ``payload``, made with the cyclic collector paused (it would traverse every new row
    again and again), then moved to its oldest generation at once, as the walk does with its rows
    (:meth:`mhlo_cost.walk.liveness.LivenessRecorder.finished`)."""
    from . import deep_recursion
    from .wire import decode

    with collector.paused(settle=True), deep_recursion():
        return decode(payload)


# -- the child's side ----------------------------------------------------------------------------------------


def _render_paused(render, analysis, asked):
    """``render(analysis, asked)`` with the cyclic collector paused: the view's allocations would set off a full
    collection of every row the walk left (0.3 s at 10^5 ops, each time), and what the view makes is freed as it
    ends (its cycles, if any, at the next collection). A caller that had paused the collector keeps it paused."""
    with collector.paused():
        return render(analysis, asked)


def _render_alongside(render, analysis, asked):
    """:func:`_render_paused`, the memory profile computed meanwhile in a fork where the walk split (its fork has
    given back the idle core it found: :func:`mhlo_cost.walk.split.alongside`): the profile (the liveness sweep
    behind ``peak_bytes``, ~0.1 s CPU at 4*10^4 ops) and the rest of the render (the blocks behind ``peak_block``,
    the summary's sums, the view's imports) run on two cores instead of one after the other. The profile comes
    back pickled (exact ints), the one :attr:`Analysis.memory` would have made here; where the fork fails,
    :attr:`Analysis.memory` makes it here. No fork where ``render`` will not answer (its ``answerable(analysis)``
    says so, cheaply: :func:`mhlo_cost.studies.compose.answerable`): the analysis goes back instead."""
    from ..walk.split import alongside

    answerable = getattr(render, "answerable", None)
    wanted = analysis.liveness is not None and (answerable is None or answerable(analysis))
    pending = alongside(lambda: analysis.memory, len(analysis.rows)) if wanted else None
    if pending is None:
        return _render_paused(render, analysis, asked)
    analysis.__dict__["_memory_alongside"] = pending
    try:
        return _render_paused(render, analysis, asked)
    finally:
        analysis.__dict__.pop("_memory_alongside", None)
        pending.close()


def answer(module, name: str, options_json: str, render=None) -> tuple[bytes, bytes]:
    """(code, payload) for the parsed ``module`` (codes: :class:`mhlo_cost.ir.codes.Answer`): ``RENDERED`` and
    the whole answer ``render(analysis, asked)`` made (where ``WalkOptions.render`` asks for one and it could:
    the reader's child passes :func:`mhlo_cost.studies.compose.answer_in_child`), ``ANALYSIS`` and the encoded
    analysis, ``BYTECODE`` and the module as bytecode (where the walk's record is too large to send:
    :func:`mhlo_cost.analysis.wire.worth_sending`), ``ANALYSIS_ERROR`` and an :class:`AnalysisError`'s line, or
    ``BUG`` and an unexpected exception's (the caller says so)."""
    from . import deep_recursion
    from ..ir.codes import Answer
    from ..ir.loader import Loaded
    from ..walk.row import AnalysisError
    from .wire import encode, worth_sending

    options = WalkOptions(**json.loads(options_json))
    loaded = Loaded(module, module.context, name, "text")
    try:
        analysis = walk_loaded(loaded, options)
        if options.render is not None and render is not None:
            whole = _render_alongside(render, analysis, options.render)
            if whole is not None:
                return Answer.RENDERED, whole
        if not worth_sending(analysis):  # the caller walks the module itself, from MLIR's own bytecode
            import io

            del analysis
            buf = io.BytesIO()
            module.operation.write_bytecode(buf)
            return Answer.BYTECODE, buf.getvalue()
        with collector.paused(), deep_recursion():
            return Answer.ANALYSIS, encode(analysis)
    except AnalysisError as e:
        return Answer.ANALYSIS_ERROR, str(e).encode("utf-8", "replace")
    except RecursionError:
        return Answer.ANALYSIS_ERROR, f"{name}: calls or regions nested too deeply to read".encode()
    except MemoryError:
        raise  # the reader's child says so, and is started again
    except Exception as e:  # noqa: BLE001 (a bug in a rule: one line back, as the command line says it)
        if os.environ.get("MHLO_COST_DEBUG"):
            import traceback

            traceback.print_exc()
        return Answer.BUG, f"{type(e).__name__}: {e}".encode("utf-8", "replace")


def walk_loaded(loaded, options: WalkOptions):
    """The analysis of a :func:`~mhlo_cost.ir.loader.load`-ed module, walked in this process as ``options`` say."""
    from . import analyze
    from ..walk.options import AnalysisOptions

    loaded = bind_symbols(loaded, dict(options.shapes))
    record = options.record
    if record == "training-if-backward":
        from .training import has_backward

        record = "training" if has_backward(loaded) else ("dataflow" if options.dataflow_if_forward else "counts")
    walked = AnalysisOptions.recording(record, options.entry, options.conv_padding)
    if options.records:
        from dataclasses import replace

        walked = replace(walked, records=tuple(options.records))
    return analyze(loaded, walked)


def bind_symbols(loaded, point: dict):
    """``loaded`` itself for a static program (``point`` empty, else AnalysisError: only a symbolic program takes
    --shapes); a symbolic one (:mod:`mhlo_cost.ir.symbolic`) refined at ``point``, or AnalysisError naming its
    symbols where ``point`` lacks one."""
    from ..ir import symbolic
    from ..ir.refine import refine
    from ..ir.loader import Loaded
    from ..walk.row import AnalysisError

    if not symbolic.is_symbolic(loaded.module):
        if point:
            raise AnalysisError(f"{loaded.name}: --shapes binds the symbols of a symbolic program (jax.export with "
                                "symbolic dimensions); this program's shapes are static")
        return loaded
    try:
        if not point:
            found = symbolic.symbols(loaded.module)
            asked = ",".join(f"{n}=N" for n in found.names)
            raise AnalysisError(f"{loaded.name}: a symbolic program in {symbolic.describe(found)}: give their "
                                f"values (--shapes {asked}), or see its counts as formulas in them (mhlo-cost "
                                "report --formula)")
        return Loaded(refine(loaded.module, point, loaded.context), loaded.context, loaded.name,
                      loaded.format)
    except symbolic.SymbolicError as e:
        raise AnalysisError(f"{loaded.name}: {e}") from None
