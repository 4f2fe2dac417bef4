"""The prefill and decode steps of a decoder with a static KV cache, lowered from shapes: the bundled GPT
(:mod:`.gpt_steps`) and transformers causal LMs (:mod:`.hf_steps`), one door (:mod:`.steps`), and the cache a
model really holds (:mod:`.cache`)."""
