"""The reader's child's answer codes, one enum: the first byte of every answer (:mod:`mhlo_cost.ir.guard` reads
them, :mod:`mhlo_cost.ir.reader`, :mod:`mhlo_cost.analysis.isolated` and :mod:`mhlo_cost.cli.child` write them).

An answer is the code's one byte and its payload. Standard library only: the child imports this before jaxlib.
"""
from __future__ import annotations

import enum


class Answer(bytes, enum.Enum):
    """What the payload after the first byte is."""

    BYTECODE = b"K"  #: MLIR bytecode that MLIR wrote (a read request; a walk whose record is too large to send)
    READ_ERROR = b"E"  #: the reader's one-line message (not MLIR, or the reader failed)
    OUT_OF_MEMORY = b"M"  #: a message; the child is not trusted again and is started anew
    ANALYSIS = b"P"  #: the walk's analysis, encoded (:mod:`mhlo_cost.analysis.wire`)
    RENDERED = b"R"  #: the whole answer a walk request asked to render (:mod:`mhlo_cost.studies.compose`)
    ANALYSIS_ERROR = b"A"  #: an AnalysisError's line (IR that cannot be counted)
    BUG = b"X"  #: an unexpected exception's line (a bug in a rule)

    @classmethod
    def split(cls, answer: bytes) -> tuple["Answer", bytes]:
        """(code, payload) of a whole answer; a first byte that is no code reads as the reader's error."""
        try:
            return cls(answer[:1]), answer[1:]
        except ValueError:
            return cls.READ_ERROR, answer[1:]


#: The answers a walk request may give back (anything else is the reader's error).
WALK_ANSWERS = frozenset({Answer.ANALYSIS, Answer.BYTECODE, Answer.RENDERED, Answer.ANALYSIS_ERROR, Answer.BUG})
