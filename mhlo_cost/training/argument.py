"""``Argument``: an entry function argument of a training step, as the walk reads it (:mod:`mhlo_cost.visitors.arguments`)."""
from ..visitors.arguments import Argument  # noqa: F401 (imported from here too)
