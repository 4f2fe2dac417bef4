"""The fixed costs of a serve run (issue 41): CPython's full collections deferred over the command line's run only
(:func:`mhlo_cost.cli.cmd_serve.deferred_full_collections`, its thresholds restored, passed to the second process of
``-j 2``), and a ``--hf`` model's configuration read without importing its class where ``--config`` names a model
type (:func:`mhlo_cost.lower.frontends.hub.hf_model_config`)."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mhlo_cost.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def thresholds():
    """CPython's default thresholds for the test (700, 10, 10), the process's own put back after it."""
    was = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*was)


def test_full_collections_deferred_then_restored(thresholds):
    """Inside: the oldest generation's threshold 1000, the young ones as they were; after, even where the body
    raised, exactly CPython's defaults again."""
    from mhlo_cost.cli.cmd_serve import deferred_full_collections

    with pytest.raises(KeyError):
        with deferred_full_collections():
            assert gc.get_threshold() == (700, 10, 1000)
            raise KeyError("x")
    assert gc.get_threshold() == (700, 10, 10)


def test_a_higher_threshold_is_kept():
    from mhlo_cost.cli.cmd_serve import deferred_full_collections

    was = gc.get_threshold()
    gc.set_threshold(500, 20, 5000)
    try:
        with deferred_full_collections():
            assert gc.get_threshold() == (500, 20, 5000)
        assert gc.get_threshold() == (500, 20, 5000)
    finally:
        gc.set_threshold(*was)


def test_the_serve_command_runs_deferred_and_leaves_the_process_as_it_was(thresholds, monkeypatch, capsys):
    """The command's work runs with full collections deferred; a refused command line (exit 2, one line) and a run
    both leave the test process's thresholds as they were."""
    from mhlo_cost.cli import cmd_serve

    assert main(["serve", "--model", "gpt", "--decode", "--prefill"]) == 2
    assert "--decode and --prefill exclude each other" in capsys.readouterr().err
    assert gc.get_threshold() == (700, 10, 10)
    seen = []
    monkeypatch.setattr(cmd_serve, "_serve", lambda args, console: seen.append(gc.get_threshold()) or 0)
    assert main(["serve", "--model", "gpt", "--decode"]) == 0
    assert seen == [(700, 10, 1000)] and gc.get_threshold() == (700, 10, 10)


def test_second_process_takes_the_thresholds_of_its_starter(monkeypatch, thresholds):
    """``-j 2``: the spawned process is handed this process's thresholds and sets them before lowering anything."""
    import multiprocessing
    import queue

    from mhlo_cost.lower.inference.steps import StepRequest
    from mhlo_cost.studies.serve import warm

    made = {}

    class Context:
        Queue = queue.Queue

        def Process(self, target, args, daemon):  # noqa: N802 (multiprocessing's name)
            made["args"] = args
            return type("Process", (), {"start": lambda self: None})()

    monkeypatch.setattr(multiprocessing, "get_context", lambda how: Context())
    gc.set_threshold(700, 10, 1000)
    warm.start(object, "base", [(1, 128)], "root")
    assert made["args"][-1] == (700, 10, 1000)
    gc.set_threshold(700, 10, 10)
    said = queue.Queue()  # (a 4-layer gpt: nothing planned, nothing lowered)
    base = StepRequest(model="gpt", overrides=(("layers", 4), ("hidden", 64), ("heads", 2), ("vocab", 128)))
    warm._lower_all(lambda root, note=None: None, base, [(1, 128)], None, said, (701, 11, 1001))
    assert gc.get_threshold() == (701, 11, 1001) and said.get_nowait() == ("plan", [])


def test_configuration_of_a_model_type_without_the_class():
    """Read in a fresh process: the layers of ``--hf LlamaForCausalLM --config llama --set num_hidden_layers=3``
    (3, the override) without transformers' Llama modelling module imported; the class itself still found later."""
    code = ("import sys; from mhlo_cost.lower.inference.steps import StepRequest; "
            "f = StepRequest(hf='LlamaForCausalLM', config='llama', overrides=(('num_hidden_layers', 3),)).facts(); "
            "print(f.layers, f.hidden, 'transformers.models.llama.modeling_llama' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    assert out.stdout.split() == ["3", "4096", "False"]  # (LlamaConfig's default hidden_size, Llama-2-7B's)


def test_model_type_configuration_is_transformers_own():
    """The configuration equals the one transformers builds for the model type with the same field."""
    from transformers import LlamaConfig

    from mhlo_cost.lower.frontends import hub

    got = hub.hf_model_config("LlamaForCausalLM", "llama", {"num_hidden_layers": 2})
    assert type(got) is LlamaConfig and got.to_dict() == LlamaConfig(num_hidden_layers=2).to_dict()


@pytest.mark.parametrize("name, words", [("LlamaForCausalLm", "transformers has no class 'LlamaForCausalLm' (did "
                                                              "you mean LlamaForCausalLM"),
                                         ("llama", "transformers has no class 'llama'")])
def test_a_class_transformers_lacks_is_still_refused_first(name, words, capsys):
    """An unknown class with a model type: the same one line as before, exit 2, before the configuration is read (a
    bad field in --set is not the error named)."""
    assert main(["serve", "--hf", name, "--config", "llama", "--decode", "--set", "no_such_field=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mhlo-cost: error: ") and words in err and "no_such_field" not in err, err
