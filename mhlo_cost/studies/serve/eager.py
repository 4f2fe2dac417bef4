"""``serve --execution eager``: a step as plain transformers ``model.generate`` runs it, beside the compiled stacks.

What plain ``generate`` runs (transformers ``GenerationMixin._sample``): the model's forward in eager PyTorch,
one kernel per framework op, each launched from the host (no fusion, no CUDA graph), over transformers'
``DynamicCache``, whose layers grow by ``torch.cat`` every step (:mod:`mhlo_cost.lower.inference.hf_dynamic`:
the past is read and written again per layer), attention as the configuration's ``attn_implementation`` says
(SDPA by default: the library kernel PyTorch dispatches to; ``--set attn_implementation=eager``: matmul,
softmax, matmul as written). The step is lowered with that cache and priced by the eager execution model
(:mod:`mhlo_cost.roofline.eager`: a kernel per call, the host's dispatch time per framework op, the profile's
launch overhead per kernel). What ``generate`` adds around the forward (the logits processors, the argmax or
sampling, the stopping criteria, the growing ``input_ids``) is not in the lowered step and not priced.

Memory per device of such a step: weights + the grown cache (``context`` positions) + the step's other inputs +
activations + the concatenation's transient: while a layer's ``cat`` runs, its past (one position shorter) is
live beside the grown copy, then freed (the cache drops its reference); the largest layer's past is added. The
activations are the eager liveness peak less the arguments (weights, past, inputs) and less the grown cache.

A plain ``generate`` runs a static batch on one device: no server, no continuous batching, no CUDA graphs, no
tensor or expert parallelism: those combinations are refused (:func:`check`).
"""
from __future__ import annotations

#: The execution models ``serve`` prices a step under (``compiled``: the fusing compilers and serving stacks).
SERVE_EXECUTIONS = ("compiled", "eager")


def check(execution: str, *, hf: bool, tp: int = 1, ep: int = 1, launch: str | None = None,
          simulating: bool = False, precision: str | None = None) -> None:
    """ValueError (one line) for what plain ``generate`` does not run: the bundled gpt (a JAX model), a
    simulation (a server), CUDA graphs, tensor or expert parallelism, a precision recipe."""
    if execution not in SERVE_EXECUTIONS:
        raise ValueError(f"serve --execution must be one of {', '.join(SERVE_EXECUTIONS)}, got {execution!r}")
    if execution == "compiled":
        return
    said = "--execution eager prices plain transformers generate"
    if simulating:
        raise ValueError(f"{said}, a static batch with no server: a serving simulation (--isl, --osl, "
                         "--concurrency, --request-rate, --trace) runs a server's compiled steps; price one step "
                         "(--decode / --prefill) or a sweep (--batches, --contexts)")
    if not hf:
        raise ValueError(f"{said} (--hf CLASS); the bundled gpt is a JAX model")
    if launch == "cuda-graphs":
        raise ValueError(f"{said}, which launches every kernel from the host: --launch cuda-graphs is a compiled "
                         "stack's")
    if tp > 1 or ep > 1:
        raise ValueError(f"{said} on one device: --tp, --tps and --ep go with --execution compiled")
    if precision is not None:
        raise ValueError(f"{said} at the model's dtype: --precision goes with --execution compiled")


def past_bytes(layout) -> list[int]:
    """Bytes of each layer's past keys and values as a decode step is handed them (one position fewer than
    the grown cache; :func:`mhlo_cost.lower.inference.hf_dynamic.past_shapes`)."""
    from math import prod

    from ...lower.inference.hf_dynamic import past_shapes

    return [(prod(k) + prod(v)) * layer.itemsize for (k, v), layer in zip(past_shapes(layout), layout.layers)]


def dynamic_memory(step, mem) -> tuple[int, int, int]:
    """``(activations, inputs, transient)`` bytes of a dynamic-cache step (``mem``: its eager liveness):
    activations = peak - arguments - grown cache; inputs = arguments - weights - past; transient = the largest
    layer's past (live beside its grown copy while the ``cat`` runs). A prefill has no past."""
    past = past_bytes(step.layout) if step.request.mode == "decode" else []
    inputs = max(mem.argument_bytes - step.weight_bytes - sum(past), 0)
    activations = max(mem.peak_bytes - mem.argument_bytes - step.layout.nbytes, 0)
    return activations, inputs, max(past, default=0)
