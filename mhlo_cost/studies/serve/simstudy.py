"""``mhlo-cost serve --isl .. --osl .. --concurrency ..``: a serving simulation as a study. The decode step is
lowered at a few shapes and fitted (:mod:`.stepmodel`), the server's memory gives the KV blocks (:func:`.server.memory`),
the workload (:mod:`.simload`) runs through the scheduler (:mod:`.sim`), and the figures (:mod:`.simstats`) are a
view (:mod:`mhlo_cost.views.serve_sim`) for the shared renderers."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property

from ...lower.inference.steps import StepRequest
from .server import ServerConfig
from .simload import Lengths
from .study import StepCacheStudy


@dataclass(frozen=True)
class SimOptions:
    """The model (``request``: its decode step; batch and context are the fit's), the chip (``hardware``),
    ``launch`` (default cuda-graphs: vLLM's decode), the workload (``isl``, ``osl``: :class:`~.simload.Lengths`;
    ``num_requests``; one of ``concurrency``, ``rate``, ``trace``; ``seed``), the server (``server``), tensor
    parallel over ``tp`` GPUs with ``allreduce`` the library whose all-reduce it runs (:mod:`.parallel`),
    ``heads_per_kv_read`` the query heads of a key/value group whose decode attention shares one read of the
    group's cache (None: the whole group; 1: TensorRT-LLM up to v0.6; 4: TurboMind v0.1: :func:`.parallel.kv_reads`),
    speculative decoding (``spec``: :class:`~.spec.Speculation`, or None) and the cache of lowerings."""

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
    tp: int = 1
    allreduce: str = "vllm"
    heads_per_kv_read: int | None = None
    spec: object = None  # a .spec.Speculation: speculative decoding
    parallel: object = None  # a .simpools.Parallel: --pp, --dp, --disaggregate (None: one server)
    cache: bool = True
    cache_dir: str | os.PathLike | None = None

    def __post_init__(self):
        from ..limits import OptionError, check, whole
        from .parallel import ALLREDUCE_LIBRARIES
        from .simload import LoadError

        check("devices", self.tp, "--tp")
        if self.parallel is not None:
            from .simpools import check_with

            check_with(self.parallel, self.spec, self.tp)
        if self.allreduce not in ALLREDUCE_LIBRARIES:
            raise OptionError(f"--allreduce must be one of {', '.join(ALLREDUCE_LIBRARIES)}, got {self.allreduce!r}")
        if self.heads_per_kv_read is not None:
            whole(self.heads_per_kv_read, "heads_per_kv_read")
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
        """The fitted :class:`~.stepmodel.StepModel` (lowerings through the step cache), once the tensor-parallel
        degree divides the model's heads and key/value heads."""
        from ..limits import OptionError
        from .stepmodel import fit

        tp = self.options.tp
        if tp > 1:
            facts = self.options.request.facts()
            for n, what in ((facts.heads, "attention heads"), (facts.kv_heads, "key/value heads")):
                if n % tp:
                    raise OptionError(f"tensor parallel degree {tp} does not divide the model's {n} {what}: "
                                      "its heads (and their KV cache) are split tp ways")
        return fit(self.options.request, self.hardware, self.cache, self.stage)

    @cached_property
    def step_time(self):
        """The step-cost callable: the fitted model over ``tp`` GPUs (:class:`~.parallel.ShardedStep`), its attention
        reading the cache as ``heads_per_kv_read`` says (:func:`~.parallel.kv_reads`)."""
        from .parallel import ShardedStep, kv_reads

        o = self.options
        reads = 1
        if o.heads_per_kv_read is not None:
            facts = o.request.facts()
            reads = kv_reads(facts.heads, facts.kv_heads, o.heads_per_kv_read)
        return ShardedStep(self.model, self.hardware, o.tp, o.allreduce, reads)

    @cached_property
    def memory(self):
        from .server import memory

        from .parallel import activations_per_device, per_device

        m, tp = self.model, self.options.tp
        hidden = m.shape["hidden"] * m.shape["itemsize"] if m.shape else 0
        return memory(self.options.server, int(self.hardware.hbm_capacity), per_device(m.weight_bytes, tp),
                      per_device(m.kv_token_bytes, tp), activations_per_device(m.activation_token_bytes, hidden, tp))

    @property
    def pooled(self) -> bool:
        """Whether the run is on several schedulers (--pp, --dp, --disaggregate: :mod:`.simpools`)."""
        return self.options.parallel is not None and self.options.parallel.active

    @cached_property
    def pool_run(self):
        from .simpools import PoolRun

        return PoolRun(self, self.options.parallel)

    @cached_property
    def pools(self):
        work = self.workload
        run = self.pool_run
        self.stage(f"simulating {len(work)} requests on {run.gpus} GPUs")
        return run.run()

    @cached_property
    def trace(self):
        from .sim import simulate

        work = self.workload  # (read first: a bad trace fails before anything is lowered)
        if self.pooled:
            return self.pools.trace()
        mem = self.memory
        self.stage(f"simulating {len(work)} requests")
        return simulate(work, self.step_time, self.options.server, mem.blocks, spec=self.options.spec)

    @cached_property
    def plain(self) -> dict:
        """The figures of the same run on one server without speculation (the gain speculation predicts is over
        these; so is --dp's, one replica of the same load)."""
        from .sim import simulate
        from .simstats import figures

        trace = simulate(self.workload, self.step_time, self.options.server, self.memory.blocks)
        return figures(trace, self.workload, self.memory, self.options.server, gpus=self.options.tp)

    @cached_property
    def figures(self) -> dict:
        from .simstats import figures

        if not self.pooled:
            return figures(self.trace, self.workload, self.memory, self.options.server, gpus=self.options.tp)
        return self._pooled_figures(self.pool_run, self.pools)

    def _pooled_figures(self, run, pools, extra: bool = True) -> dict:
        """The figures of a run on several schedulers: KV blocks per engine (a pipeline's virtual engine holds
        ``1/pp`` of the server's), the pools' and stages' sections and the gain against the baseline."""
        from dataclasses import replace

        from .simpools import pool_sections
        from .simstats import figures

        trace = pools.trace()
        engine = (pools.back or pools.front)[0]
        mem = replace(run.memory, blocks=engine.blocks)
        out = figures(trace, self.workload, mem, self.options.server, gpus=run.gpus)
        if extra:
            out |= pool_sections(run, pools, out["workload"]["duration_s"]) | {"gain": self._pool_gain(out)}
        return out

    def _pool_gain(self, got: dict) -> dict:
        """Output tokens/s, TTFT p50 and TPOT p50 of this run against the baseline's (:func:`.simpools.baseline`;
        a ratio above 1 is better), or why there is none (the baseline's model does not fit)."""
        from ..limits import OptionError
        from .simload import LoadError
        from .simpools import PoolRun, baseline

        base = baseline(self, self.options.parallel)
        what = f"{base.dp} replica{'s' if base.dp > 1 else ''} of tp {self.options.tp}"
        try:
            if base.active:
                run = PoolRun(self, base)
                plain = self._pooled_figures(run, run.run(), extra=False)
            else:  # one replica: the plain simulation (the same run, its decode stretches at once)
                plain = self.plain
        except (LoadError, OptionError) as e:
            return {"against": what, "note": f"no baseline: {e}"}

        def ratio(a, b):
            return a / b if a is not None and b else None

        t, p = got["latency"], plain["latency"]
        return {"against": what, "against_output_tokens_per_s": plain["throughput"]["output_tokens_per_s"],
                "throughput_gain": ratio(got["throughput"]["output_tokens_per_s"],
                                         plain["throughput"]["output_tokens_per_s"]),
                "ttft_p50_gain": ratio(p["ttft_p50_s"], t["ttft_p50_s"]),
                "tpot_p50_gain": ratio(p["tpot_p50_s"], t["tpot_p50_s"])}

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
                 "memory_accounting": "vLLM (vllm/v1/worker/gpu_worker.py determine_available_memory)" + (
                     "" if o.server.num_gpu_blocks is None else f"; {o.server.num_gpu_blocks} blocks given"),
                 "step_model_check": self._check_text()} | self._parallel_setup() | self._reads_setup()
        return sim_view(setup, self.figures, batch_histogram(self.trace), f"serving {setup['model']} on "
                        f"{self.hardware.name}: {self.workload.describe}")

    def plot(self, path: str) -> None:
        """KV utilisation and batch sizes over time (:func:`mhlo_cost.views.serve_sim.sim_plot`) into ``path``."""
        import numpy as np

        from ...views.serve_sim import sim_plot

        title = f"{self.options.request.describe().split(':')[0]} on {self.hardware.name}: {self.workload.describe}"
        if self.pooled:
            from .pools import timeline

            p = self.pools
            groups = {"prefill pool": p.front, "decode pool": p.back} if p.back else {"every engine": p.front}
            series = {name: timeline(engines) for name, engines in groups.items()}
            sim_plot(None, None, None, 1, path, title, series=series)
            return
        t = self.trace
        sim_plot(np.cumsum(t.step_s), t.step_blocks, t.step_seqs, self.memory.blocks, path, title)

    def _parallel_setup(self) -> dict:
        """Speculation's lines of the setup, and the split's (none on one GPU): tp, the library and the algorithm of a decode
        step of the median batch run, and of the largest step's."""
        o = self.options
        out = {} if o.spec is None else {
            "spec_tokens": o.spec.tokens, "spec_acceptance": o.spec.acceptance, "spec_draft_cost": o.spec.draft,
            "spec_expected_tokens_per_step": o.spec.expected} | self._gain()
        if self.pooled:
            out |= self._pool_setup()
        if o.tp <= 1:
            return out
        toks = sorted(self.trace.step_tokens)
        mid, top = toks[len(toks) // 2], toks[-1]
        (s_mid, a_mid), (s_top, a_top) = self.step_time.comm(mid), self.step_time.comm(top)
        return out | {"tp": o.tp, "allreduce_library": o.allreduce,
                "allreduce_median_step": f"{a_mid} ({mid} tokens: {s_mid:.6g} s a step)",
                "allreduce_largest_step": f"{a_top} ({top} tokens: {s_top:.6g} s a step)"}

    def _pool_setup(self) -> dict:
        """The setup's lines of --pp, --dp, --disaggregate: the split, the routing, the link."""
        par, o = self.options.parallel, self.options
        link = ("the chip's link (hop_latency + bytes / link_bandwidth)" if par.link_gbps is None else
                f"{float(par.link_gbps):g} GB/s after one hop_latency")
        out = {"gpus": self.pool_run.gpus}
        if par.disaggregate is not None:
            out |= {"disaggregate": f"{par.disaggregate[0]} prefill : {par.disaggregate[1]} decode instances of "
                    f"tp {o.tp}", "kv_transfer_link": link}
        else:
            out |= {"pp": par.pp, "dp": par.dp}
            if par.pp > 1:
                out |= {"pp_schedule": f"{par.pp} virtual engines per replica (vLLM V0), one step each in flight, "
                        "each 1/pp of the KV blocks", "pp_send_link": link}
        return out | {"routing": "least loaded (fewest unfinished requests; vLLM's virtual engines and DP client)"}

    def _reads_setup(self) -> dict:
        """The decode attention's reads of the KV cache where a kernel reads it more than once (none otherwise)."""
        reads = self.step_time.kv_reads
        return {} if reads == 1 else {"attention_kv_reads": f"{reads} (a read per {self.options.heads_per_kv_read} "
                                                             "query head(s) of a key/value group)"}

    def _gain(self) -> dict:
        """Speculation's gain: output tokens/s and TPOT p50 without it over with it (None where a run took no
        time)."""
        got, plain = self.figures, self.plain

        def ratio(a, b):
            return a / b if a is not None and b else None

        return {"spec_throughput_gain": ratio(got["throughput"]["output_tokens_per_s"],
                                              plain["throughput"]["output_tokens_per_s"]),
                "spec_tpot_p50_gain": ratio(plain["latency"]["tpot_p50_s"], got["latency"]["tpot_p50_s"])}

    def _check_text(self) -> str:
        c = self.model.checked
        b, ctx = c["point"]
        at = "; ".join(f"batch {x}, context {y}" for x, y in c["exact_at"])
        return (f"counts exact at {at} (not fitted); time at batch {b}, context {ctx}: {c['model_s']:.6g} s vs "
                f"the roofline's {c['roofline_s']:.6g} s")
