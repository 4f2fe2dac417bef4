"""Fuzz suite (issue 12): mutated seed programs through `mhlo-cost report`, in process and as a subprocess.

The property: exit code 0, 1 or 2; on exit 2 exactly one `mhlo-cost: error:` line; nothing else on stderr
but warnings. Bounded (max_examples, deadline) to add well under a minute; benchmarks/fuzz_campaign.py
runs the larger campaign. Crashers found are kept in tests/fixtures/crashers (test_hostile_inputs.py).
"""
from __future__ import annotations

import contextlib
import io
import random
import subprocess
import sys
from functools import lru_cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_mutations import KINDS, mutate, seeds, stderr_ok, suffix
from mhlo_cost.cli import main


@lru_cache(maxsize=1)
def _seeds():
    return seeds()


def _mutant(seed_index: int, kind: str, rng_seed: int) -> tuple[str, bytes]:
    name, data = _seeds()[seed_index % len(_seeds())]
    return name, mutate(data, kind, random.Random(rng_seed))


def test_seeds_are_a_dozen_programs_in_three_forms():
    names = [n for n, _ in _seeds()]
    assert len([n for n in names if n.endswith(".mlir")]) >= 12
    assert any(n.endswith(".gz") for n in names) and any(n.endswith("bc") for n in names)


def test_every_seed_reports_cleanly(tmp_path):
    for i, (name, data) in enumerate(_seeds()):
        p = tmp_path / f"seed{i}{suffix(name)}"
        p.write_bytes(data)
        code, err = _run_in_process(p)
        assert code == 0, (name, err)


def _run_in_process(path) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["report", str(path), "-q"])
    return code, err.getvalue()


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(KINDS), rng_seed=st.integers(0, 2 ** 32))
def test_mutants_in_process(tmp_path, seed, kind, rng_seed):
    name, data = _mutant(seed, kind, rng_seed)
    p = tmp_path / f"m{suffix(name)}"
    p.write_bytes(data)
    code, err = _run_in_process(p)
    problem = stderr_ok(code, err)
    assert problem is None, (name, kind, rng_seed, problem, err[-500:])


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(("flip", "truncate")), rng_seed=st.integers(0, 2 ** 32))
def test_mutants_as_a_subprocess(tmp_path, seed, kind, rng_seed):
    name, data = _mutant(seed, kind, rng_seed)
    p = tmp_path / f"m{suffix(name)}"
    p.write_bytes(data)
    r = subprocess.run([sys.executable, "-m", "mhlo_cost", "report", str(p), "-q"], capture_output=True,
                       text=True, timeout=600)
    problem = stderr_ok(r.returncode, r.stderr)
    assert problem is None, (name, kind, rng_seed, problem, r.stderr[-500:])


@pytest.mark.parametrize("kind", KINDS)
def test_each_mutation_changes_the_input(kind):
    name, data = _seeds()[0]
    changed = [mutate(data, kind, random.Random(s)) != data for s in range(5)]
    assert any(changed)
