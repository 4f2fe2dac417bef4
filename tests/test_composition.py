"""One composition (issue 34): the answer codes of the reader's child are one enum, what crosses to the child is
the study's options themselves, and the command line, the child and the Python API compose the same answer."""
from __future__ import annotations

import re
from pathlib import Path

from mhlo_cost.ir.codes import WALK_ANSWERS, Answer

ROOT = Path(__file__).resolve().parent.parent
#: The four files that write or read the reader's child's answers.
SPEAKERS = ("mhlo_cost/ir/reader.py", "mhlo_cost/ir/guard.py", "mhlo_cost/analysis/isolated.py",
            "mhlo_cost/cli/child.py")


def test_the_answer_codes_are_one_enum_used_by_all_four_files():
    codes = [a.value for a in Answer]
    assert len(codes) == len(set(codes)) and all(len(c) == 1 for c in codes)
    for path in SPEAKERS:
        text = (ROOT / path).read_text()
        assert "Answer." in text, path
        literals = re.findall(r'b"([A-Z])"', text)
        assert not [c for c in literals if c.encode() in codes], f"{path}: a code written as a literal"


def test_an_answer_splits_into_its_code_and_payload():
    assert Answer.split(Answer.RENDERED + b"text") == (Answer.RENDERED, b"text")
    assert Answer.split(b"?what") == (Answer.READ_ERROR, b"what")  # not a code: the reader's error
    assert Answer.READ_ERROR not in WALK_ANSWERS and Answer.RENDERED in WALK_ANSWERS
