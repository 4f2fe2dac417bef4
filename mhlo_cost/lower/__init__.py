"""Models to StableHLO, from shapes alone: it produces MLIR and never counts.

* :mod:`.run`: one door for a :class:`~mhlo_cost.lower.frontends.api.LowerRequest` (a forward or a training step);
* :mod:`.frontends`: JAX, torchax and torch-xla, the model libraries (transformers, diffusers, timm), inputs;
* :mod:`.models`: the bundled models (GPT, STDiT3) and their parallel strategies;
* :mod:`.training`: training steps (loss, backward, optimizer update in one program);
* :mod:`.inference`: prefill and decode steps with a static KV cache.
"""
