"""LLM inference: the prefill and decode steps of a decoder with a static KV cache, lowered from shapes, and what
they cost on a chip (time to first token, time per output token, tokens/s, the cache, what fits).

- :mod:`.cache`: the cache a model really holds (:class:`CacheLayout`), per layer, at any batch and context.
- :mod:`.gpt_steps`, :mod:`.hf_steps`: the two steps of the bundled GPT (JAX) and of transformers causal LMs
  (torchax, ``StaticCache`` as an argument, donated so that it is updated in place).
- :mod:`.steps`: :class:`StepRequest` and :func:`lower_step`, one door for both.
- :mod:`.serve`: the figures of a lowered step on a hardware profile (the roofline of :mod:`mhlo_cost.roofline`).
- :mod:`.grid`: batch x context (x tensor-parallel degree) sweeps, lowerings and results cached on disk.
- :mod:`.views`: `serve`'s answer as a view (a step's pairs in sections, a sweep's frame) for the shared renderers.
"""
from ...lower.inference.cache import CacheLayout, LayerCache
from ...lower.inference.steps import MODES, Step, StepRequest, lower_step

__all__ = ["CacheLayout", "LayerCache", "MODES", "Step", "StepRequest", "lower_step"]
