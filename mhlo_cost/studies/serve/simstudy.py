"""``mhlo-cost serve --isl .. --osl .. --concurrency ..``: a serving simulation as a study. The decode step is
lowered at a few shapes and fitted (:mod:`.stepmodel`), the server's memory gives the KV blocks (:func:`.sim.memory`),
the workload (:mod:`.simload`) runs through the scheduler (:mod:`.sim`), and the figures (:mod:`.simstats`) are a
view (:mod:`mhlo_cost.views.serve_sim`) for the shared renderers."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property

from ...lower.inference.steps import StepRequest
from .sim import ServerConfig
from .simload import Lengths
from .study import StepCacheStudy


@dataclass(frozen=True)
class SimOptions:
    """The model (``request``: its decode step; batch and context are the fit's), the chip (``hardware``),
    ``launch`` (default cuda-graphs: vLLM's decode), the workload (``isl``, ``osl``: :class:`~.simload.Lengths`;
    ``num_requests``; one of ``concurrency``, ``rate``, ``trace``; ``seed``), the server (``server``) and the
    cache of lowerings."""

    request: StepRequest
    hardware: object
    isl: Lengths | None = None
    osl: Lengths | None = None
    num_requests: int | None = None
    concurrency: int | None = None
    rate: float | None = None
    trace: str | None = None
    seed: int = 0
    server: ServerConfig = field(default_factory=ServerConfig)
    launch: str = "cuda-graphs"
    cache: bool = True
    cache_dir: str | os.PathLike | None = None

    def __post_init__(self):
        from .simload import LoadError

        given = [x for x in (self.concurrency, self.rate, self.trace) if x is not None]
        if len(given) != 1:
            raise LoadError("give one of --concurrency (closed loop), --request-rate (Poisson) or --trace FILE")
        if self.trace is not None:
            if self.isl is not None or self.osl is not None or self.num_requests is not None:
                raise LoadError("--trace gives each request's arrival and lengths: no --isl, --osl or --num-requests")
        elif self.isl is None or self.osl is None:
            raise LoadError("the simulation needs --isl and --osl (input and output tokens per request)")


class SimStudy(StepCacheStudy):
    """The simulation of :class:`SimOptions`, each part computed once (see :class:`~.study.StepCacheStudy`)."""

    @cached_property
    def workload(self):
        from .simload import make, read_trace

        o = self.options
        if o.trace is not None:
            return read_trace(o.trace)
        num = o.num_requests if o.num_requests is not None else (10 * o.concurrency if o.concurrency else 1000)
        return make(o.isl, o.osl, num, o.concurrency, o.rate, o.seed)

    @cached_property
    def model(self):
        """The fitted :class:`~.stepmodel.StepModel` (lowerings through the step cache)."""
        from .stepmodel import fit

        return fit(self.options.request, self.hardware, self.cache, self.stage)

    @cached_property
    def memory(self):
        from .sim import memory

        m = self.model
        return memory(self.options.server, int(self.hardware.hbm_capacity), m.weight_bytes, m.kv_token_bytes,
                      m.activation_token_bytes)

    @cached_property
    def trace(self):
        from .sim import simulate

        work = self.workload  # (read first: a bad trace fails before anything is lowered)
        mem = self.memory
        self.stage(f"simulating {len(work)} requests")
        return simulate(work, self.model.time_s, self.options.server, mem.blocks)

    @cached_property
    def figures(self) -> dict:
        from .simstats import figures

        return figures(self.trace, self.workload, self.memory, self.options.server)

    def view(self, request=None):
        """The figures as a Table of pairs in sections (:func:`mhlo_cost.views.serve_sim.sim_view`)."""
        from ...views.serve_sim import sim_view
        from .simstats import batch_histogram

        o = self.options
        setup = {"model": o.request.describe().split(":")[0], "hardware": self.hardware.name,
                 "launch": o.launch, "workload": self.workload.describe,
                 "isl": str(o.isl) if o.isl else "trace", "osl": str(o.osl) if o.osl else "trace",
                 "max_num_batched_tokens": o.server.max_num_batched_tokens,
                 "max_num_seqs": o.server.max_num_seqs, "gpu_memory_utilization": o.server.gpu_memory_utilization,
                 "memory_accounting": "vLLM (vllm/v1/worker/gpu_worker.py determine_available_memory)",
                 "step_model_check": self._check_text()}
        return sim_view(setup, self.figures, batch_histogram(self.trace), f"serving {setup['model']} on "
                        f"{self.hardware.name}: {self.workload.describe}")

    def plot(self, path: str) -> None:
        """KV utilisation and batch sizes over time (:func:`mhlo_cost.views.serve_sim.sim_plot`) into ``path``."""
        import numpy as np

        from ...views.serve_sim import sim_plot

        t = self.trace
        sim_plot(np.cumsum(t.step_s), t.step_blocks, t.step_seqs, self.memory.blocks, path,
                 f"{self.options.request.describe().split(':')[0]} on {self.hardware.name}: {self.workload.describe}")

    def _check_text(self) -> str:
        c = self.model.checked
        b, ctx = c["point"]
        at = "; ".join(f"batch {x}, context {y}" for x, y in c["exact_at"])
        return (f"counts exact at {at} (not fitted); time at batch {b}, context {ctx}: {c['model_s']:.6g} s vs "
                f"the roofline's {c['roofline_s']:.6g} s")
