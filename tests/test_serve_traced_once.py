"""What the serve grid does to lower faster changes none of its numbers: a transformers step lowered with each kind
of decoder layer traced once and replayed (:func:`mhlo_cost.lower.frontends.torchax_once.layers_traced_once`) is op
for op the step traced layer by layer, every op under the same scope name, only the frames of the replayed ops'
locations shorter; priced, the two give the same figures. (The grid's tables against every point lowered plainly:
tests/test_layer_fit.py and benchmarks/bench_grid.py.)"""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import re

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torchax") is None
                                or importlib.util.find_spec("transformers") is None,
                                reason="torchax and transformers are not installed")

LOC_DEF = re.compile(r"^(#loc\d+) = (.*)$", re.M)
LOC_REF = re.compile(r"loc\((#loc\d+)\)\s*$")
#: The frame of the trace a replayed op comes from.
REPLAYED = "Replayer._trace.<locals>.traced@_torchax_replay.py"
#: The replay says in its log why a kind of layer runs as it is (shown with a failing test's output).
WHY = "mhlo_cost.lower.frontends._torchax_replay"
SETS = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=128)


@pytest.fixture(autouse=True)
def _why(caplog):
    caplog.set_level(logging.INFO, logger=WHY)


def _request(layers: int, mode: str = "decode"):
    from mhlo_cost.lower.inference.steps import StepRequest

    sets = dict(SETS, num_hidden_layers=layers)
    return StepRequest(hf="LlamaForCausalLM", config="llama", mode=mode, batch=2, context=32,
                       tokens=4 if mode == "prefill" else 1, overrides=tuple(sorted(sets.items())))


def _step(req, once: bool):
    """The lowered step, its layers traced once or not (called from one line: a location's frames hold the
    caller's too)."""
    from mhlo_cost.lower.frontends.torchax_once import layers_traced_once
    from mhlo_cost.lower.inference.steps import lower_step

    with layers_traced_once() if once else contextlib.nullcontext():
        return lower_step(req)


def _ops(text: str) -> list[tuple[str, str, str]]:
    """Per op line of the body: (the line without its location, the op's scope name, its frames as function@file),
    the location followed through the text's location table by hand (independent of the walk's reader)."""
    table = dict(LOC_DEF.findall(text))

    def resolve(ref: str, seen: int = 0) -> str:
        return re.sub(r"#loc\d+", lambda m: resolve(m.group(0), seen + 1) if seen < 40 else "", table[ref])

    out = []
    for line in text.splitlines():
        m = LOC_REF.search(line)
        if line.startswith("#loc") or m is None or "=" not in line:
            continue
        where = resolve(m.group(1))
        name = re.search(r'"([^"]*/[^"]*)"\(', where)
        frames = re.findall(r'loc\("([^"]+)"\(loc\("[^"]*?([^"/]+\.py)":', where)
        out.append((line[:m.start()].strip(), name.group(1) if name else "",
                    " ".join(sorted({f"{function}@{file}" for function, file in frames}))))
    return out


@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_layers_traced_once_are_the_same_program_under_the_same_names(mode):
    req = _request(3, mode)
    steps = [_step(req, o) for o in (False, True, False)]
    plain, once, again = [s.lowered.text for s in steps]
    said = steps[1].lowered.info.get("layers_traced_once")
    assert said == ["LlamaDecoderLayer: replayed"]
    assert "layers_traced_once" not in steps[0].lowered.info
    a, b = _ops(plain), _ops(once)
    assert _ops(again) == a  # the context gone, the plain lowering again
    assert len(a) == len(b) > 300
    assert [x[0] for x in a] == [x[0] for x in b]  # op for op, operands and types
    assert [x[1] for x in a] == [x[1] for x in b]  # the same scope name per op
    layers = [i for i, x in enumerate(a) if "/layers." in x[1]]
    assert {re.search(r"/layers\.\d+/", a[i][1]).group(0) for i in layers} == {f"/layers.{i}/" for i in range(3)}
    assert any("/layers.2/self_attn/" in a[i][1] for i in layers) and any("/layers.2/mlp/" in a[i][1]
                                                                            for i in layers)
    # every layer's ops come from the replayed trace (its frame is in their locations), none of the plain
    # lowering's do, nor the ops outside the layers (embedding, norm, head)
    assert all(REPLAYED in b[i][2] for i in layers) and not any(REPLAYED in x[2] for x in a)
    assert not any(REPLAYED in x[2] for i, x in enumerate(b) if i not in set(layers))


def test_a_kind_of_layer_that_makes_constants_runs_as_it_is():
    """Qwen2 with a sliding window from layer 4 on: its sliding layers' cache update makes a constant array each (one
    per layer traced one by one, where a replay would share one), and counts its positions in a plain integer of
    its cache entry (which a replay would not count again): those layers run as they are, the others replay."""
    from mhlo_cost.lower.inference.steps import StepRequest

    sets = dict(SETS, num_hidden_layers=7, max_window_layers=4, use_sliding_window=True, sliding_window=8)
    req = StepRequest(hf="Qwen2ForCausalLM", config="qwen2", batch=2, context=16,
                      overrides=tuple(sorted(sets.items())))
    steps = [_step(req, o) for o in (False, True)]
    a, b = [_ops(s.lowered.text) for s in steps]
    said = steps[1].lowered.info["layers_traced_once"]
    assert said[0] == "Qwen2DecoderLayer: replayed" and said[1].startswith("Qwen2DecoderLayer: ") and len(said) == 2
    assert [x[:2] for x in a] == [x[:2] for x in b] and len(a) > 1000
    replayed = {re.search(r"/layers\.(\d+)/", x[1]).group(1) for x in b if REPLAYED in x[2]}
    assert replayed == {"0", "1", "2", "3"}


def test_layers_traced_once_price_the_same():
    """The step priced (its figures on a chip: what the serve grid's tables hold) is the same either way."""
    from mhlo_cost.roofline import hardware_from_args
    from mhlo_cost.studies.serve.serve import figures, step_study

    hw = hardware_from_args("h100", None)
    made = [_step(_request(4), o) for o in (False, True)]
    priced = [figures(s, hw, analysis=step_study(s, hw).analysis) for s in made]
    assert priced[0] == priced[1]
    assert priced[0].flops > 0 and priced[0].step_time_s > 0


def test_only_within_the_context():
    """The frontends' own lowering (``lower``) never replays: outside the context the layers run as they are."""
    from mhlo_cost.lower.frontends import torchax_once

    assert not torchax_once.enabled()
    with torchax_once.layers_traced_once():
        assert torchax_once.enabled()
    assert not torchax_once.enabled()


def _toy_ops(replay: bool, how: str) -> tuple[list, dict, int]:
    """(the ops (line, scope), each kind's whether it replays, the calls counted) of a toy model of three alike
    layers through torchax, its layers replayed or not. Each layer reads its arguments alone (``how`` "inputs"),
    also a value the model computes beside them ("outside"), or counts its calls in a plain attribute of an
    argument ("counts")."""
    import jax
    import torch

    from mhlo_cost.lower.frontends import _torchax_replay
    from mhlo_cost.lower.frontends import torchax_frontend as tf

    seen = {}

    class Counter:
        calls = 0

    counter = Counter()

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x, counter):
            y = torch.relu(self.lin(x))
            if how == "counts":
                counter.calls += 1
                y = y + counter.calls
            return y * seen["scale"] if how == "outside" else y

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(Layer() for _ in range(3))

        def forward(self, x):
            seen["scale"] = x.sum()
            for layer in self.layers:
                x = layer(x, counter)
            return x

    with torch.device("meta"):
        model = Model()
    fn, args = tf.traceable(model, [(2, 8)])
    env = tf.import_torchax().default_env()
    replayer = _torchax_replay.Replayer(env)

    def run(*a):
        if replay:
            for layer in model.layers:
                replayer.install(layer)
        try:
            return fn(*a)
        finally:
            replayer.remove()

    text = jax.jit(run).lower(*args).as_text(debug_info=True)
    kinds = {k: r.closed is not None for k, r in replayer.recipes.items()}
    return [x[:2] for x in _ops(text)], kinds, counter.calls


@pytest.mark.parametrize("how", ["inputs", "outside", "counts"])
def test_a_layer_that_reads_or_changes_what_it_is_not_given_runs_as_it_is(how):
    plain, _, calls = _toy_ops(False, how)
    replayed, kinds, calls_replayed = _toy_ops(True, how)
    assert replayed == plain and len(plain) > 6
    assert {s.split("/")[1] for _, s in plain if s.count("/") > 1} >= {f"layers.{i}" for i in range(3)}
    assert list(kinds.values()) == [how == "inputs"]  # one kind; replayed only where it reads its inputs alone
    assert calls_replayed == calls == (3 if how == "counts" else 0)  # (the trace's own call undone)


def test_a_step_traced_once_is_kept_apart_from_the_plain_one(tmp_path):
    """The grid's step (shorter frames) and a plain ``serve``'s step of the same request are two cache entries: a
    plain lowering after the grid's is not read from the grid's entry, and its IR keeps the frames between the
    model's forward and the layer."""
    from mhlo_cost.lower.frontends.torchax_once import layers_traced_once
    from mhlo_cost.studies.serve.grid import StepCache

    cache, req = StepCache(tmp_path), _request(3)
    with layers_traced_once():
        once, hit = cache.step(req)
    assert not hit
    plain, hit = cache.step(req)
    assert not hit  # not the grid's entry
    assert "_torchax_replay.py" in once.lowered.text and "_torchax_replay.py" not in plain.lowered.text
    again, hit = cache.step(req)
    assert hit and again.lowered.text == plain.lowered.text
    with layers_traced_once():
        kept, hit = cache.step(req)
    assert hit and kept.lowered.text == once.lowered.text


def test_the_replay_and_its_frames_after_a_lower_in_the_same_process():
    """A ``lower`` run earlier in the process (the suite's order: tests/test_lower.py and the command line in
    process sort before this file) made its driver's frames (``mhlo_cost/lower/frontends/``, where the replay's
    trace lives) excluded from op locations for good: a later step traced once lost the replayed trace's frame
    from its locations (the replay itself went on; only the frames showed it no more), so the IR of a step hung on
    what ran before it in the process. ``relative_locations`` now holds its exclusions while it is active only."""
    from jax._src import source_info_util

    from mhlo_cost.lower.frontends.preflight import driver_frames, relative_locations

    before = list(source_info_util._exclude_paths)
    with relative_locations():  # (what every ``lower`` does around its tracing)
        assert set(driver_frames()) <= set(source_info_util._exclude_paths)
    assert source_info_util._exclude_paths == before
    req = _request(3)
    plain, once = _step(req, False), _step(req, True)
    assert once.lowered.info["layers_traced_once"] == ["LlamaDecoderLayer: replayed"]
    a, b = _ops(plain.lowered.text), _ops(once.lowered.text)
    layers = [i for i, x in enumerate(a) if "/layers." in x[1]]
    assert [x[:2] for x in a] == [x[:2] for x in b] and len(layers) > 100
    assert all(REPLAYED in b[i][2] for i in layers) and not any(REPLAYED in x[2] for x in a)
