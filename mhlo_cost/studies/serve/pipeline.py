"""Pipeline-parallel serving: the layers split over ``pp`` stages as vLLM splits them, each stage's step priced
from its own kernels, its weights and KV cache, and the activations sent between stages.

- The split (:func:`pp_partition`) is vLLM's ``get_pp_indices`` (``vllm/distributed/utils.py``; read, not
  copied): ``layers // pp`` layers a stage, the remainder one each to the stages before the last, from the
  second last backwards (the last runs the final norm and the LM head). ``VLLM_PP_LAYER_PARTITION`` is not
  modelled.
- A stage's program (:func:`stage_shares`) is the fitted step's kernels of its layers (the program's blocks,
  :func:`.stepmodel.placement`), the kernels before the first layer (the embedding) on the first stage and
  those after the last (the final norm, the LM head) on the last; a kernel of a loop over the layers is
  split by the layers of it a stage holds. Where the blocks found are not the model's layers, every kernel is
  split by the stages' layer shares (said in the setup).
- A stage's weights (:func:`stage_weights`): the embedding table (vocabulary x hidden x the hidden state's
  bytes) on the first, the LM head (the same size; vLLM's last rank holds one even where the embeddings are
  tied) on the last, the rest of the model's weights by layers (the final norm and a position table counted
  with them); its KV cache per token: the model's per token x its layers / layers. Exact ints, rounded up.
- Between stages vLLM sends the intermediate tensors of a decoder (``IntermediateTensors``: the hidden
  states and the residual, ``2 x tokens x hidden x itemsize`` bytes) on the link (:func:`send_seconds`).
"""
from __future__ import annotations

from fractions import Fraction


def pp_partition(layers: int, pp: int) -> list[int]:
    """Layers of each of ``pp`` stages (vLLM's default split)."""
    if not 1 <= pp <= layers:
        raise ValueError(f"pipeline of {pp} stages over {layers} layers: each stage needs a layer")
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return parts


def stage_shares(place: list, blocks: int, parts: list[int]) -> tuple[list[list[float]], bool]:
    """Per stage, each kernel's share of it (see the module), and whether the program's blocks were the
    layers (False: every kernel split by the stages' layer shares)."""
    layers = sum(parts)
    bounds, at = [], 0
    for p in parts:
        bounds.append((at, at + p))
        at += p
    if blocks != layers:
        return [[p / layers] * len(place) for p in parts], False
    out = []
    for i, (lo, hi) in enumerate(bounds):
        row = []
        for ids in place:
            if ids == "pre":
                row.append(1.0 if i == 0 else 0.0)
            elif ids == "post":
                row.append(1.0 if i == len(parts) - 1 else 0.0)
            else:
                row.append(sum(lo <= b < hi for b in ids) / len(ids))
        out.append(row)
    return out, True


def embedding_bytes(request, itemsize: int) -> int:
    """The embedding table's bytes: vocabulary x hidden x ``itemsize`` (the bundled gpt's ``vocab``, a
    transformers configuration's ``vocab_size``)."""
    if request.model:
        from ...lower.inference.steps import gpt_config

        cfg = gpt_config(request)
        return cfg.vocab * cfg.hidden * itemsize
    from ...lower.frontends import hub

    cfg = hub.hf_model_config(request.hf, request.config, dict(request.overrides))
    text = cfg.get_text_config(decoder=True)
    return int(text.vocab_size) * int(text.hidden_size) * itemsize


def tied(request) -> bool:
    """Whether the model's LM head is its embedding table (counted once in its weights)."""
    if request.model:
        return False  # the bundled gpt's head is its own (lower/models/gpt.py)
    from ...lower.frontends import hub

    cfg = hub.hf_model_config(request.hf, request.config, dict(request.overrides))
    return bool(getattr(cfg, "tie_word_embeddings", False))


def stage_weights(total: int, embedding: int, is_tied: bool, parts: list[int]) -> list[int]:
    """Each stage's weight bytes (see the module): ``total`` the model's, ``embedding`` its table's."""
    layers = sum(parts)
    rest = max(total - embedding - (0 if is_tied else embedding), 0)
    out = [-(-(rest * p) // layers) for p in parts]
    out[0] += embedding
    out[-1] += embedding
    return out


def stage_kv(kv_token_bytes: int, parts: list[int]) -> list[int]:
    """Each stage's KV bytes per token (its layers' share, rounded up)."""
    layers = sum(parts)
    return [-(-(kv_token_bytes * p) // layers) for p in parts]


def send_bytes(tokens: int, hidden: int, itemsize: int) -> int:
    """The bytes one stage sends the next for a step of ``tokens``: hidden states and residual."""
    return 2 * tokens * hidden * itemsize


def link_time(hw, nbytes: int, gbps: Fraction | None = None) -> float:
    """Seconds to send ``nbytes`` once: on the chip's link (its ``hop_latency`` and ``link_bandwidth``: NVLink
    where the profile has it), or at ``gbps`` GB/s (another tier: the inter-node network) after one hop."""
    if nbytes <= 0:
        return 0.0
    if gbps is None:
        return hw.comm_time(nbytes, 1)
    return float(hw.hop_latency) + float(Fraction(nbytes) / (gbps * 10 ** 9))
