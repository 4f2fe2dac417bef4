from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def mlir():
    """An MLIR context with mhlo-cost's dialects, open for the test (attributes parsed by hand need one)."""
    from mhlo_cost.ir.loader import make_context

    with make_context() as ctx:
        yield ctx
