from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture(autouse=True, scope="session")
def _a_cache_folder_of_the_sessions(tmp_path_factory):
    """Commands run by the tests (sweep, serve, train-plan keep a cache by default) keep it in a folder of the
    session's, never in the user's ~/.cache/mhlo-cost."""
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    yield
    patch.undo()


@pytest.fixture
def mlir():
    """An MLIR context with mhlo-cost's dialects, open for the test (attributes parsed by hand need one)."""
    from mhlo_cost.ir.loader import make_context

    with make_context() as ctx:
        yield ctx
