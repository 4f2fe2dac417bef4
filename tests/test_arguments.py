"""Every argument checked before work, in every command (issue 43, items 5 and 7).

Each case is a command line that, before, ran for minutes, ended in exit 70 or a crash, or gave an answer to a
question that means nothing (a 0-layer model, an empty table); now it is one ``mhlo-cost: error:`` line naming
the option, exit 2, before any lowering or walk. Cases that must still work are run where they are cheap.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from mhlo_cost.cli import main
from stderr_lines import error_line

FIX = Path(__file__).parent / "fixtures"
SMALL = FIX / "small_stablehlo.mlir"
DATA = Path(__file__).resolve().parents[1] / "mhlo_cost" / "machines" / "data"


def refused(capsys, *argv) -> str:
    """The one error line of ``mhlo-cost argv`` (exit 2)."""
    code = main([str(a) for a in argv])
    _, err = capsys.readouterr()
    assert code == 2, err
    line = error_line(err)
    assert "internal error" not in err and "Error:" not in line, err  # no Python exception's name or text
    return line


def spec(tmp_path, text: str) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


TRAINING = 'model = "gpt-22b"\nhardware = "selene"\ndevices = {devices}\n[training]\nglobal_batch = 64\n'


# -- unbounded work --------------------------------------------------------------------------------------------

def test_train_plan_sweep_of_2_pow_40_gpus_is_refused_by_the_devices_limit(capsys):
    line = refused(capsys, "train-plan", "--sweep", 2 ** 40)
    assert "--sweep" in line and "limit 'devices'" in line and "1,048,576" in line


def test_train_plan_sweep_with_too_many_splits_is_refused_before_planning(capsys):
    """720,720 has 240 divisors: 12,048 configurations, above the points limit (counted, none planned)."""
    line = refused(capsys, "train-plan", "--sweep", 720720)
    assert "12,048" in line and "limit 'points'" in line


@pytest.mark.parametrize("devices", ["1000000000000", "[8, 1000000000000]"])
def test_sweep_spec_with_10_pow_12_devices_is_refused(tmp_path, capsys, devices):
    line = refused(capsys, "sweep", "--spec", spec(tmp_path, TRAINING.format(devices=devices)))
    assert "'devices'" in line and "limit 'devices'" in line


def test_grid_sweep_with_10_pow_12_devices_is_refused(tmp_path, capsys):
    path = spec(tmp_path, 'model = "gpt"\nhardware = "h100"\nparallel = "none"\ndevices = 1000000000000\n')
    line = refused(capsys, "sweep", "--spec", path, "--no-cache")
    assert "devices" in line and "limit 'devices'" in line


def test_grid_sweep_with_a_list_over_the_values_limit(tmp_path, capsys):
    devices = ", ".join(map(str, range(1, 2002)))
    path = spec(tmp_path, f'model = "gpt"\nhardware = "h100"\nparallel = "none"\ndevices = [{devices}]\n')
    line = refused(capsys, "sweep", "--spec", path, "--no-cache")
    assert "devices has 2,001 values" in line and "limit 'values'" in line


def test_serve_batches_with_2001_values_is_refused(capsys):
    line = refused(capsys, "serve", "--model", "gpt", "--decode", "--batches", ",".join(map(str, range(1, 2002))))
    assert "--batches has 2,001 values" in line and "limit 'values'" in line


def test_serve_layers_above_the_limit(capsys):
    line = refused(capsys, "serve", "--model", "gpt", "--decode", "--set", "layers=100000")
    assert "layer" in line and "limit 'layers'" in line


# -- exit 70 before --------------------------------------------------------------------------------------------

def test_train_plan_hf_config_transformers_refuses(tmp_path, capsys):
    pytest.importorskip("transformers")
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama", "hidden_size": 65, "num_attention_heads": 4}')
    line = refused(capsys, "train-plan", "--hf", "LlamaForCausalLM", "--config", bad)
    assert "transformers refuses this configuration" in line and "65" in line


@pytest.mark.parametrize("devices", ['"8"', "8.0", "0", "-8", "true"])
def test_training_spec_devices_typed_strictly(tmp_path, capsys, devices):
    line = refused(capsys, "sweep", "--spec", spec(tmp_path, TRAINING.format(devices=devices)))
    assert "key 'devices'" in line and "whole number" in line


def test_serve_plot_that_is_not_a_picture(tmp_path, capsys):
    line = refused(capsys, "serve", "--model", "gpt", "--decode", "--batches", "1,2", "--plot", tmp_path / "p.txt")
    assert "--plot" in line and ".png" in line
    assert not (tmp_path / "p.txt").exists()


@pytest.mark.parametrize("argv", [["--model", "gpt"], ["--model", "stdit3", "--small"],
                                  ["--model", "gpt", "--decode"], ["--model", "gpt", "--train"]])
def test_lower_dtype_int8_is_refused(capsys, argv):
    line = refused(capsys, "lower", *argv, "--dtype", "int8")
    assert "--dtype int8" in line and "floating" in line


def test_serve_dtype_int8_is_refused(capsys):
    assert "--dtype int8" in refused(capsys, "serve", "--model", "gpt", "--decode", "--dtype", "int8")


@pytest.mark.parametrize("spelling", ["int8", "fp8", "float8_e4m3fn", "int4", "nvfp4"])
def test_sweep_dtype_of_a_precision_points_to_the_recipes(capsys, spelling):
    line = refused(capsys, "sweep", "--model", "gpt", "--dtype", spelling)
    assert f"--dtype {spelling}" in line and "sweep" in line and "--precision" in line and "fp8-rowwise" in line


@pytest.mark.parametrize("command", [["sweep", "--model", "gpt"],
                                     ["train-plan", "--layers", "2", "--hidden", "256", "--heads", "4", "--seq", "128"],
                                     ["serve", "--model", "gpt", "--decode"]])
def test_an_unknown_recipe_lists_the_known_ones(capsys, command):
    line = refused(capsys, *command, "--precision", "int4")
    assert "--precision int4" in line and "w4a16-awq" in line and "nvfp4" in line


# -- wrong answers accepted before -----------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "-1", "2.5", "true"])
def test_serve_layers_that_are_not_a_model(capsys, value):
    line = refused(capsys, "serve", "--model", "gpt", "--decode", "--set", f"layers={value}")
    assert "--set layers" in line and "positive whole number" in line


@pytest.mark.parametrize("sets, words", [(["hidden=0"], "hidden"), (["heads=3"], "heads 3 do not divide"),
                                         (["foo=1"], "no field 'foo'"), (["batch=4"], "--batch"),
                                         (["dtype=float32"], "--dtype"),
                                         (["vocab=1000000000000"], "int32, so its vocabulary holds at most")])
def test_serve_gpt_fields_in_the_users_terms(capsys, sets, words):
    """--set hidden=0 was 'ZeroDivisionError: 0.0 cannot be raised to a negative power'; vocab=10**12 was
    'OverflowError: Python integer ... out of bounds for int32'."""
    line = refused(capsys, "serve", "--model", "gpt", "--decode", *[a for s in sets for a in ("--set", s)])
    assert words in line


def test_training_spec_with_zero_devices_is_not_an_empty_table(tmp_path, capsys):
    line = refused(capsys, "sweep", "--spec", spec(tmp_path, TRAINING.format(devices="0")))
    assert "'devices'" in line


@pytest.mark.parametrize("tp, words", [("3", "tensor parallel degree 3 does not divide the model's 4 attention heads"),
                                       ("1000000000", "--tp 1,000,000,000 is above the limit")])
def test_serve_tp_that_cannot_split_the_model(capsys, tp, words):
    assert words in refused(capsys, "serve", "--model", "gpt", "--decode", "--tp", tp)


def test_serve_tps_each_checked_before_lowering(capsys):
    assert "degree 3 does not divide" in refused(capsys, "serve", "--model", "gpt", "--decode", "--tps", "1,3")


def test_serve_gqa_tp_must_divide_the_kv_heads():
    """The check reads the model's configuration: a transformers Llama with 2 key/value heads of 8."""
    pytest.importorskip("transformers")
    from mhlo_cost.lower.inference.steps import StepRequest
    from mhlo_cost.machines.hardware import get_profile
    from mhlo_cost.studies.limits import OptionError
    from mhlo_cost.studies.serve.study import ServeOptions, ServeStudy

    req = StepRequest(hf="LlamaForCausalLM", config="llama", overrides=(
        ("hidden_size", 64), ("intermediate_size", 128), ("num_attention_heads", 8), ("num_hidden_layers", 1),
        ("num_key_value_heads", 2), ("vocab_size", 128)))
    ServeStudy(ServeOptions(req, get_profile("h100"), tp=2)).check()
    with pytest.raises(OptionError, match="degree 4 does not divide the model's 2 key/value heads"):
        ServeStudy(ServeOptions(req, get_profile("h100"), tp=4)).check()


def test_lower_decode_batch_0_is_refused_not_replaced(capsys):
    assert "--batch" in refused(capsys, "lower", "--model", "gpt", "--decode", "--batch", "0")


@pytest.mark.parametrize("extra, named", [(["--train"], "--train"), (["--layers", "2"], "--layers"),
                                          (["--optimizer", "sgd"], "--optimizer"), (["--frontend", "jax"], "--frontend")])
def test_lower_decode_with_options_it_would_drop(capsys, extra, named):
    line = refused(capsys, "lower", "--model", "gpt", "--decode", *extra)
    assert named in line and "--decode" in line


@pytest.mark.parametrize("argv, named", [(["--set", "layers=3"], "--set"), (["--config", "llama"], "--config")])
def test_train_plan_hf_options_without_hf(capsys, argv, named):
    assert named in refused(capsys, "train-plan", *argv)


@pytest.mark.parametrize("argv, named", [(["-t", "2"], "-t"), (["--micro-batch", "2"], "--micro-batch"),
                                         (["--sp"], "--sp"), (["--by", "stage"], "--by")])
def test_train_plan_split_options_with_sweep(capsys, argv, named):
    line = refused(capsys, "train-plan", "--sweep", "8", *argv)
    assert named in line and "--sweep" in line


def test_train_plan_by_with_a_format_holding_both_tables(capsys):
    assert "--by" in refused(capsys, "train-plan", "--by", "stage", "--format", "json")


def test_train_plan_sizes_given_with_a_model_replace_its_own(capsys):
    """--model gpt-22b --layers 3 was 'ScaleConfig() got multiple values for keyword argument 'layers''; now
    the 3 layers are the model's (a pipeline of 2 cannot split them)."""
    line = refused(capsys, "train-plan", "--model", "gpt-22b", "--layers", "3", "-p", "2")
    assert "does not divide layers 3" in line


@pytest.mark.parametrize("flags, named", [(["--scheduler", "tcp://127.0.0.1:1"], "--scheduler"),
                                          (["--jobs", "2"], "--jobs"), (["--shape", "1_64_64"], "shape"),
                                          (["--steps", "4"], "steps")])
def test_training_spec_refuses_what_it_would_ignore(tmp_path, capsys, flags, named):
    line = refused(capsys, "sweep", "--spec", spec(tmp_path, TRAINING.format(devices=8)), *flags)
    assert named in line and "[training]" in line


def test_sweep_jobs_with_a_scheduler(capsys):
    line = refused(capsys, "sweep", "--model", "gpt", "--hardware", "h100", "--jobs", "2", "--scheduler", "tcp://x:1")
    assert "--jobs" in line and "--scheduler" in line


@pytest.mark.parametrize("many, one", [("--batches", "--batch"), ("--contexts", "--context"), ("--tps", "--tp")])
def test_serve_list_and_its_single_value(capsys, many, one):
    line = refused(capsys, "serve", "--model", "gpt", "--decode", many, "1,2", one, "4")
    assert many in line and one in line


@pytest.mark.parametrize("argv, named", [(["--norms-per-block", "2", "--blocks", "scope"], "--norms-per-block"),
                                         (["--block-pattern", "x", "--blocks", "rms"], "--block-pattern"),
                                         (["--block-pattern", "x", "--norms-per-block", "2"], "--norms-per-block")])
def test_block_options_the_method_would_ignore(capsys, argv, named):
    assert named in refused(capsys, "report", SMALL, *argv)


def test_diff_block_options_without_blocks(capsys):
    assert "--blocks" in refused(capsys, "diff", SMALL, SMALL, "--by", "kind", "--blocks", "rms")


def test_train_plan_hardware_file_is_read(tmp_path, capsys):
    """--hardware-file was 'unrecognized arguments'; the template's system is found in it (the configuration,
    invalid on purpose, then stops the command before any lowering)."""
    line = refused(capsys, "train-plan", "--hardware-file", DATA / "system_template.toml", "--hardware", "my-cluster",
                   "-p", "3")
    assert "does not divide layers 4" in line


def test_train_plan_hardware_file_missing_is_named(capsys):
    line = refused(capsys, "train-plan", "--hardware-file", "nothere.toml")
    assert "nothere.toml" in line and "unrecognized" not in line


# -- a profile field the eager model documents ------------------------------------------------------------------

def test_dispatch_overhead_us_is_a_profile_field(tmp_path):
    from mhlo_cost.machines.hardware import HardwareError, load_profiles
    from mhlo_cost.roofline.eager import DISPATCH_S, dispatch_overhead

    text = (DATA / "hardware_template.toml").read_text()
    assert "# dispatch_overhead_us" in text
    path = tmp_path / "hw.toml"
    path.write_text(text.replace("# dispatch_overhead_us = 8.0", "dispatch_overhead_us = 12.5"))
    (hw,) = load_profiles(path).values()
    assert dispatch_overhead(hw) == 12.5e-6
    path.write_text(text)
    (hw,) = load_profiles(path).values()
    assert dispatch_overhead(hw) == DISPATCH_S
    path.write_text(text.replace("# dispatch_overhead_us = 8.0", "dispatch_overhead_us = -1"))
    with pytest.raises(HardwareError, match="dispatch_overhead_us"):
        load_profiles(path)
