"""What one walk is asked to record: :class:`AnalysisOptions` (standard library only, so that it crosses to the
MLIR reader's child process as it is: :mod:`mhlo_cost.analysis.isolated`)."""
from __future__ import annotations

from dataclasses import dataclass

#: Convolution padding conventions: "xla", padded positions cost nothing (XLA's HloCostAnalysis); "dense",
#: they count (PyTorch's FlopCounterMode, fvcore and most papers).
CONV_PADDING = ("xla", "dense")


@dataclass(frozen=True)
class AnalysisOptions:
    """The options of :func:`mhlo_cost.analysis.analyze`: the entry function, the convolution padding convention
    (:data:`CONV_PADDING`), and what the walk records beside the op table. What is not asked for is None in
    the :class:`~mhlo_cost.analysis.Analysis` (its type says so), never a missing attribute.

    * ``liveness``: the frames and regions the memory sweep needs (``Analysis.liveness``, ``.memory``);
    * ``dataflow``: the source of every operand and where each async collective ends (``Analysis.producers``,
      ``.async_done``: fusion, the eager model, exposed communication);
    * ``arguments``: the entry function's arguments, which are donated (``Analysis.arguments``, ``.param_args``);
    * ``phases``: a training step's phases (``Analysis.phases``); implies ``dataflow`` and ``arguments``, and
      the data flow then sees through ``optimization_barrier`` (``jax.checkpoint`` passes a block's inputs
      through one before recomputing it);
    * ``records``: the names of further declared recorders (:mod:`mhlo_cost.walk.recorder`: a
      ``Recorder`` subclass made with ``record="name"``), each one's record in ``Analysis.record(name)``.
    """

    entry: str | None = None
    conv_padding: str = "xla"
    liveness: bool = True
    dataflow: bool = False
    arguments: bool = False
    phases: bool = False
    records: tuple = ()

    def __post_init__(self):
        records = (self.records,) if isinstance(self.records, str) else self.records
        object.__setattr__(self, "records", tuple(sorted(set(records))))
        if self.conv_padding not in CONV_PADDING:
            raise ValueError(f"conv_padding must be one of {', '.join(CONV_PADDING)}, got {self.conv_padding!r}")
        if self.phases:
            object.__setattr__(self, "dataflow", True)
            object.__setattr__(self, "arguments", True)

    @property
    def asked(self) -> frozenset:
        """The names of the declared records these options ask for (the built-in flags' and ``records``)."""
        flags = (("liveness", self.liveness), ("dataflow", self.dataflow), ("arguments", self.arguments))
        return frozenset(name for name, on in flags if on) | frozenset(self.records)

    @classmethod
    def recording(cls, record: str, entry: str | None = None, conv_padding: str = "xla") -> AnalysisOptions:
        """The options of a named record: ``counts`` (rows and liveness), ``dataflow`` (plus the data flow) or
        ``training`` (plus the arguments and the phases)."""
        if record not in RECORDS:
            raise ValueError(f"record must be one of {', '.join(RECORDS)}, got {record!r}")
        return cls(entry, conv_padding, dataflow=record == "dataflow", phases=record == "training")


#: The named records of :meth:`AnalysisOptions.recording`.
RECORDS = ("counts", "dataflow", "training")
