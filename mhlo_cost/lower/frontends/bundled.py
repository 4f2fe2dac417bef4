"""The bundled models' requests: a configuration with its parallel plan (:func:`bundled_config`), and the checks
of OpenSora 1.2's deployed STDiT3 (:func:`check_deployed`), for ``lower``, ``sweep`` and the training step alike.
"""
from __future__ import annotations

from . import FrontendError, make_config


#: Why the deployed STDiT3 takes no parallel strategy: a user-facing sentence (lower, sweep).
DEPLOYED_NO_PARALLEL = ("the parallel strategies are written in JAX (shard_map with explicit all_to_all, "
                        "all_gather, ppermute); the deployed torch module has no collectives of its own: lower "
                        "the JAX model with --parallel (its counts are the counting module's)")


def check_deployed(model: str, frontend: str, parallel: str = "none", train: bool = False) -> None:
    """FrontendError unless a ``deployed`` request can be lowered: stdit3, through torchax, one device, a forward."""
    if model != "stdit3":
        raise FrontendError(f"--deployed applies to --model stdit3 only, not {model}")
    if frontend != "torchax":
        raise FrontendError(f"--deployed is the torch module as OpenSora 1.2 runs it: it lowers with torchax, "
                            f"not {frontend}")
    if parallel != "none":
        raise FrontendError(f"--deployed takes no --parallel: {DEPLOYED_NO_PARALLEL}")
    if train:
        raise FrontendError("--deployed is OpenSora 1.2's sampling forward (no training step): drop --train, "
                            "or lower the training step of the JAX model")


def bundled_config(model: str, *, frontend: str = "jax", parallel: str = "none", devices: int | None = None,
                   mesh: str | None = None, **overrides):
    """(configuration, text) of a bundled model: ``make_config`` overrides (``shape``, ``small``,
    ``depth``...), wrapped with its parallel plan where ``parallel`` names a strategy (stdit3, jax)."""
    cfg = make_config(model, **overrides)
    if parallel == "none":
        if devices is not None or mesh is not None:
            raise FrontendError("--devices and --mesh need a --parallel strategy")
        return cfg, ""
    if model != "stdit3":
        raise FrontendError(f"--parallel applies to stdit3 only, not {model}")
    if frontend != "jax":
        raise FrontendError("--parallel needs the jax frontend")
    from ..models.parallel_plan import make_plan, parse_mesh
    from ..models.sharded_config import ShardedConfig  # (no jax: a sweep's parent builds configurations only)

    if devices is None:
        if mesh is None:
            raise FrontendError(f"--parallel {parallel} needs --devices N")
        nx, ny = parse_mesh(mesh)
        devices = nx * ny
    plan = make_plan(parallel, devices, mesh, cfg)
    return ShardedConfig(cfg, plan), f", {plan.describe()}"
