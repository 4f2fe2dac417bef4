"""A bundled STDiT3 configuration with its parallel plan (:class:`ShardedConfig`), in a module of its own that
imports no jax: a sweep's parent process builds every point's configuration (its cache key, its skip reason) and
lowers none, so it need not pay jax's import (about a second of CPU) while its workers start beside it.
:mod:`.parallel` re-exports it."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .config import STDiT3Config
from .parallel_plan import Plan


@dataclass(frozen=True)
class ShardedConfig:
    """A configuration with a parallel plan: what the frontends pass around for ``--parallel``.

    Attribute reads fall through to ``cfg`` so that code written for a plain configuration still works.
    """

    cfg: STDiT3Config
    plan: Plan

    def __getattr__(self, name):
        if name in ("cfg", "plan"):
            raise AttributeError(name)
        return getattr(self.cfg, name)

    def replace(self, **kw) -> "ShardedConfig":
        return ShardedConfig(replace(self.cfg, **kw), self.plan)
