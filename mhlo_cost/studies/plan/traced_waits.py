"""Where a traced collective is waited for: PyTorch's context parallel under torch.compile (``execution`` inductor).

PyTorch's ring attention (``torch/distributed/tensor/experimental/_attention.py``: ``_AllGatherRotater`` /
``_AllToAllRotater``, and the dK/dV rotater of ``_templated_ring_attention_backward``) issues its K/V all-gather or
permutes and the fp32 dK/dV permutes through the functional collectives (``ft_c.all_gather_tensor``,
``ft_c.permute_tensor``), which hand their result to ``_maybe_wrap_tensor``
(``torch/distributed/_functional_collectives.py``, the same in every stored version read, torch 2.2 to 2.7):

* in eager, the result is an ``AsyncCollectiveTensor`` whose ``wait_tensor`` runs at its first use: the ring's
  next block computes while the transfer runs (:func:`.sharding.torch_cp_exposure` prices that overlap);
* while tracing (``_are_we_tracing()``: dynamo compiling, fake mode, a proxy mode), ``wait_tensor(self)`` is called
  at once ("wait_tensor() op is immediately called, no AsyncTensor subclass needed", the module's docstring): the
  traced graph waits for each collective right where it was issued, before the block it was meant to hide under.

Inductor keeps that order unless ``torch._inductor.config.reorder_for_compute_comm_overlap`` is set (default False,
``torch/_inductor/config.py``: "enable reordering pass for increasing overlap between compute and communication").
Inductor's default ``reorder_for_peak_memory`` pass (on since torch 2.6) orders nodes for peak memory, not overlap;
it was not read to show that it leaves each wait in place, so "exposed whole" is an upper bound there.
torchtitan 9dec370 (the 2412 tables) compiles each TransformerBlock whole (``apply_compile``:
``torch.compile(transformer_block, fullgraph=True)``, torchtitan/parallelisms/parallelize_llama.py), so the SDPA
call and the ring it dispatches to are traced into the block's graph (with ``fullgraph=True`` a graph break would
have stopped the run), and sets no reordering (its only Inductor setting is ``_micro_pipeline_tp`` for async TP).
So under ``inductor`` every exchange of PyTorch's context parallel is exposed whole, unless the user turns
Inductor's reordering on (``inductor_comm_reorder``: then as in eager).

FSDP2's all-gathers and reduce-scatters are issued by its module hooks outside the compiled blocks (eager, on their
own streams): not affected. Megatron's and Transformer Engine's CP (``p2p``, ``all_gather``) are not traced.
"""
from __future__ import annotations

from .sharding_check import CP_TORCH


def cp_waits_at_once(cfg) -> bool:
    """Whether ``cfg``'s context-parallel exchanges are waited for where they are issued (PyTorch's context parallel
    traced by torch.compile without Inductor's compute/communication reordering): exposed whole."""
    return (cfg.cp > 1 and cfg.cp_comm in CP_TORCH and cfg.execution == "inductor"
            and not getattr(cfg, "inductor_comm_reorder", False))
