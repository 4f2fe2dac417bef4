"""Reading a failed command's stderr as the project promises it: the error is one line, the last one.

Other lines may come before it (a note, a warning, progress where it was asked for), so tests read the error
line rather than count lines: a test that counts fails on a loaded machine the day a step is slow."""
from __future__ import annotations

ERROR = "mhlo-cost: error: "


def error_line(err: str) -> str:
    """The one ``mhlo-cost: error: ...`` line of ``err``: exactly one, the last line, and no traceback."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(ERROR)]
    assert len(errors) == 1 and lines[-1] == errors[0], err
    assert "Traceback" not in err, err
    return errors[0]


def error_lines(err: str) -> list[str]:
    """Every error line of ``err`` (several commands run in one test), none followed by anything else."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(ERROR)]
    assert errors and lines[-1] == errors[-1] and "Traceback" not in err, err
    return errors
