"""Parallel plans: a strategy on a mesh of devices, and the divisibility each strategy needs.

The strategies themselves are described in :mod:`mhlo_cost.lower.models.parallel`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .config import STDiT3Config

STRATEGIES = ("none", "megatron", "2d", "ulysses", "ring")


@dataclass(frozen=True)
class Plan:
    """A strategy on a mesh: ``axis_names`` and ``mesh_shape`` have one entry per mesh axis."""

    strategy: str
    mesh_shape: tuple[int, ...] = ()
    axis_names: tuple[str, ...] = ()

    @property
    def devices(self) -> int:
        return math.prod(self.mesh_shape) if self.mesh_shape else 1

    def describe(self) -> str:
        if self.strategy == "none":
            return "unsharded"
        mesh = "x".join(str(s) for s in self.mesh_shape)
        return f"{self.strategy} over {self.devices} devices (mesh {mesh}: {', '.join(self.axis_names)})"


def parse_mesh(text: str) -> tuple[int, int]:
    """``"2x8"`` -> (2, 8)."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"mesh must be NXxNY with positive integers (e.g. 2x8), got {text!r}")
    return int(parts[0]), int(parts[1])


def make_plan(strategy: str, devices: int = 1, mesh: tuple[int, int] | str | None = None,
              cfg: STDiT3Config | None = None) -> Plan:
    """The plan of ``strategy`` on ``devices`` devices (2d: ``mesh`` (N_x, N_y), default (2, devices/2)).

    With ``cfg`` the divisibility a strategy needs is checked; ValueError says what does not divide.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown parallel strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    if not isinstance(devices, int) or devices < 1:
        raise ValueError(f"devices must be a positive integer, got {devices!r}")
    if isinstance(mesh, str):
        mesh = parse_mesh(mesh)
    if mesh is not None and strategy != "2d":
        raise ValueError("--mesh applies to the 2d strategy only")
    if strategy == "none":
        if devices != 1:
            raise ValueError("the unsharded model runs on one device; choose a parallel strategy for more")
        plan = Plan("none")
    elif strategy == "2d":
        if mesh is None:
            if devices % 2:
                raise ValueError(f"2d needs an even device count for the default 2 x n/2 mesh, got {devices}")
            mesh = (2, devices // 2)
        if mesh[0] * mesh[1] != devices:
            raise ValueError(f"mesh {mesh[0]}x{mesh[1]} has {mesh[0] * mesh[1]} devices, not {devices}")
        plan = Plan("2d", tuple(mesh), ("x", "y"))
    else:
        plan = Plan(strategy, (devices,), ("tp",) if strategy == "megatron" else ("sp",))
    if cfg is not None:
        check_plan(cfg, plan)
    return plan


def check_plan(cfg: STDiT3Config, plan: Plan) -> None:
    def need(ok: bool, what: str):
        if not ok:
            raise ValueError(f"{plan.strategy} over mesh {'x'.join(map(str, plan.mesh_shape))}: {what}")

    if plan.strategy == "megatron":
        n = plan.mesh_shape[0]
        need(cfg.heads % n == 0, f"heads ({cfg.heads}) must be a multiple of {n}")
        need(cfg.mlp_hidden % n == 0, f"the MLP hidden size ({cfg.mlp_hidden}) must be a multiple of {n}")
    elif plan.strategy == "2d":
        nx, ny = plan.mesh_shape
        need(cfg.batch % nx == 0, f"batch ({cfg.batch}) must be a multiple of N_x = {nx}")
        need(cfg.hidden % nx == 0, f"hidden ({cfg.hidden}) must be a multiple of N_x = {nx}")
        need(cfg.heads % ny == 0, f"heads ({cfg.heads}) must be a multiple of N_y = {ny}")
        need(cfg.mlp_hidden % ny == 0, f"the MLP hidden size ({cfg.mlp_hidden}) must be a multiple of N_y = {ny}")
        n_tok = cfg.tokens_t * cfg.tokens_s
        need(n_tok % ny == 0, f"the tokens per sample T*S ({n_tok}) must be a multiple of N_y = {ny}")
    elif plan.strategy == "ulysses":
        n = plan.mesh_shape[0]
        need(cfg.heads % n == 0, f"heads ({cfg.heads}) must be a multiple of {n}")
