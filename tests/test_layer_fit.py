"""Repeated layers (issue 41 part 3): a program's table at full depth rebuilt from its lowerings at depths 1 and
2 equals the program lowered at full depth (the independent reference); a serve grid built that way gives the
table of lowering every point; a model whose layers differ falls back and says so, whether its configuration
says so, the layers at depth 4 differ, or only the check at depth 5 sees it."""
from __future__ import annotations

import importlib.util
from dataclasses import replace

import pytest

from mhlo_cost.lower.inference.steps import StepRequest, lower_step
from mhlo_cost.roofline import hardware_from_args
from mhlo_cost.studies.gridfit import FitFailed, skeleton
from mhlo_cost.studies.layerfit import find_layer, repeat_layers
from mhlo_cost.studies.serve.grid import StepCache, sweep, table
from mhlo_cost.studies.serve.serve import figures, step_study

HW = hardware_from_args("h100", None)
TINY = (("hidden", 64), ("heads", 2), ("vocab", 128))


def _gpt_at(layers_list, batch=2, context=128):
    """(step, analysis) of the tiny GPT's decode step at each depth, all lowered from this one line (a lowering's
    locations hold the Python stack that made it)."""
    out = []
    for n in layers_list:
        step = lower_step(StepRequest(model="gpt", batch=batch, context=context, overrides=TINY + (("layers", n),)))
        out.append((step, step_study(step, HW).analysis))
    return out


def test_rebuilt_table_is_the_full_depth_lowering():
    (s1, a1), (s2, a2), (s12, a12) = _gpt_at([1, 2, 12])  # (12: params['layers'][10] after [9])
    rebuilt = repeat_layers(a1, a2, 12)
    assert len(rebuilt.rows) == len(a12.rows) == len(a1.rows) + 11 * (len(a2.rows) - len(a1.rows))
    assert skeleton(rebuilt) == skeleton(a12)  # every integer, name, scope, value key pattern and liveness item
    step = s12  # the figures priced from the rebuilt table are those of the lowered one
    assert figures(step, HW, analysis=rebuilt) == figures(step, HW, analysis=a12)
    assert repeat_layers(a1, a2, 2) is a2 and repeat_layers(a1, a2, 1) is a1


@pytest.mark.skipif(importlib.util.find_spec("torchax") is None, reason="torchax is not installed")
def test_rebuilt_torchax_table_with_calls_is_the_full_depth_lowering():
    """A transformers Llama through torchax: calls to private functions in every layer, one copy of a constant
    every layer uses (so the unit is taken from depths 2 and 3), a last layer unlike the others, and a state dict
    ordered by name (at 12 layers, layers.10 comes before layers.2)."""
    pytest.importorskip("transformers")
    made = []
    for n in (2, 3, 12):
        sets = dict(num_hidden_layers=n, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                    num_key_value_heads=2, vocab_size=128)
        step = lower_step(StepRequest(hf="LlamaForCausalLM", config="llama", batch=2, context=32,
                                      overrides=tuple(sorted(sets.items()))))
        made.append(step_study(step, HW).analysis)
    a2, a3, a12 = made
    assert any(it.name == "call" for it in a12.liveness.entry.items)
    rebuilt = repeat_layers(a2, a3, 12, base=2)
    assert len(rebuilt.rows) == len(a12.rows) == len(a2.rows) + 10 * (len(a3.rows) - len(a2.rows))
    assert skeleton(rebuilt) == skeleton(a12)


def test_layers_that_differ_are_refused():
    (_, a1), (_, a2) = _gpt_at([1, 2])
    q, m = find_layer(a1.rows, a2.rows)
    assert 0 < q and m == len(a2.rows) - len(a1.rows)
    i = q + m + 3
    a2.rows[i] = a2.liveness.entry.rows[i] = replace(a2.rows[i], multiplicity=2)  # layer 2 made unlike layer 1
    with pytest.raises(FitFailed, match="layer 2 are not those of layer 1"):
        repeat_layers(a1, a2, 4)
    with pytest.raises(FitFailed, match="not longer"):
        repeat_layers(a2, a1, 4)


def test_serve_grid_with_repeated_layers_equals_lowering_every_point(tmp_path):
    """Every point lowered at depths 3 and 4 only (nodes, the check point, batch 1), the repetition checked once
    per program at depth 5: the table equals lowering every point at full depth (7 layers)."""
    base = StepRequest(model="gpt", overrides=TINY + (("layers", 7),))
    stages, notes = [], []
    grid = dict(batches=[1, 2, 3, 4], contexts=[128, 256, 512], hw=HW, tps=(1, 2))
    fitted = sweep(base, cache=StepCache(tmp_path / "a"), stage=stages.append, note=notes.append, **grid)
    lowered = sweep(base, cache=StepCache(tmp_path / "b"), fit=False, **grid)
    assert not notes
    lowering = [s for s in stages if s.startswith("lowering")]
    assert sum("(a node of the fit, at depths 3 and 4" in s for s in lowering) == 5  # 2 x 2 nodes and the check
    assert sum("and 5 to check the repetition" in s for s in lowering) == 1  # the grid's program, at a node
    assert sum(s.endswith("(at depths 3 and 4)") for s in lowering) == 3  # batch 1, its own program
    assert sum(s.endswith("(at depth 5 to check the repetition)") for s in lowering) == 1
    assert len(lowering) == 9  # no point lowered at full depth
    assert table(fitted).to_csv() == table(lowered).to_csv()
    assert fitted == lowered  # every figure, the blocks' times too


QWEN = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
            use_sliding_window=True, sliding_window=8)


def _qwen(**sets):
    return StepRequest(hf="Qwen2ForCausalLM", config="qwen2", overrides=tuple(sorted((QWEN | sets).items())))


@pytest.mark.skipif(importlib.util.find_spec("torchax") is None, reason="torchax is not installed")
def test_serve_grid_of_a_model_whose_layers_differ_falls_back_and_says_so(tmp_path, monkeypatch):
    """Qwen2 with a sliding window from layer 4 on: its configuration's layer_types says so; unread, at depth 4,
    layer 4 (sliding) is not layer 3 (full)."""
    pytest.importorskip("transformers")
    from mhlo_cost.studies.serve import fitted as fitted_module

    base = _qwen(num_hidden_layers=5, max_window_layers=3)
    grid = dict(batches=[2, 3, 4], contexts=[16, 24, 32], hw=HW)
    stages, notes = [], []
    fitted = sweep(base, cache=StepCache(tmp_path / "a"), stage=stages.append, note=notes.append, **grid)
    assert notes[0] == "serve: points lowered at full depth: the configuration's layer_types differs between layers"
    assert not any("depth" in s for s in stages)
    lowered = sweep(base, cache=StepCache(tmp_path / "b"), fit=False, batches=[4], contexts=[32], hw=HW)
    assert fitted[-1] == lowered[0]
    monkeypatch.setattr(fitted_module, "layers_differ", lambda base, layers: None)
    stages, notes = [], []
    again = sweep(base, cache=StepCache(tmp_path / "c"), stage=stages.append, note=notes.append, **grid)
    assert notes[0] == ("serve: nodes lowered at full depth: the rows of layer 2 are not those of layer 1 (the "
                        "layers differ)")
    assert not any("depths 3 and 4" in s for s in stages[1:])  # (the first node's try only)
    assert again == fitted


@pytest.mark.skipif(importlib.util.find_spec("torchax") is None, reason="torchax is not installed")
def test_layers_that_differ_beyond_depth_4_are_caught_at_depth_5(tmp_path, monkeypatch):
    """Qwen2 of 7 layers, sliding from layer 5 on: depths 3 and 4 hold full-attention layers only and repeat;
    the check at depth 5 (a layer 5 that slides) refuses the rebuilt tables, and the points are lowered at
    full depth (the configuration's layer_types left unread, to reach the check)."""
    pytest.importorskip("transformers")
    from mhlo_cost.studies.serve import fitted as fitted_module

    monkeypatch.setattr(fitted_module, "layers_differ", lambda base, layers: None)
    base = _qwen(num_hidden_layers=7, max_window_layers=4)
    grid = dict(batches=[1, 2, 3, 4], contexts=[16, 24, 32], hw=HW)
    stages, notes = [], []
    fitted = sweep(base, cache=StepCache(tmp_path / "a"), stage=stages.append, note=notes.append, **grid)
    said = "the table rebuilt at depth 5 by repeating layer 2 is not the one lowered there"
    assert notes[0] == f"serve: nodes lowered at full depth: {said}"
    assert [s for s in stages if "depth" in s] == [  # the first node's try only; then every point at full depth
        "lowering batch 2, context 16 (a node of the fit, at depths 3 and 4, and 5 to check the repetition)"]
    lowered = sweep(base, cache=StepCache(tmp_path / "b"), fit=False, **grid)
    assert fitted == lowered
