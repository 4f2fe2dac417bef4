"""The one table of limits (mhlo_cost.studies.limits) and the study options that check against it before any
work (issue 43, item 5): the Python API gets the same limits as the command line."""
from __future__ import annotations

from itertools import product

import pytest

from mhlo_cost.studies.limits import LIMITS, LimitError, OptionError, check, check_list, count, most


# -- the table -------------------------------------------------------------------------------------------------

def test_every_limit_is_a_positive_whole_number_with_a_unit():
    for name, (top, unit) in LIMITS.items():
        assert type(top) is int and top > 0 and unit, name
    assert most("devices") == 2 ** 20


@pytest.mark.parametrize("value", [0, -1, True, 8.0, "8", None])
def test_a_count_is_a_positive_int(value):
    with pytest.raises(LimitError, match="--tp must be a positive whole number"):
        check("devices", value, "--tp")


def test_the_limit_itself_is_allowed_and_one_more_is_not():
    assert check("devices", most("devices"), "--tp") == most("devices")
    with pytest.raises(LimitError, match=r"--tp 1,048,577 is above the limit of 1,048,576 devices \(limit 'devices'"):
        check("devices", most("devices") + 1, "--tp")


def test_a_list_keeps_each_value_once_in_the_order_given():
    assert check_list("batch", [8, 1, 8, 2, 1], "--batches") == (8, 1, 2)
    with pytest.raises(LimitError, match="names no value"):
        check_list("batch", [], "--batches")
    assert len(check_list("batch", [1] * 100_000, "--batches")) == 1  # duplicates do not count
    with pytest.raises(LimitError, match="limit 'values'"):
        check_list("batch", range(1, most("values") + 2), "--batches")


def test_count():
    assert count(most("points"), "points", "x") == most("points")
    with pytest.raises(LimitError, match="limit 'points'"):
        count(most("points") + 1, "points", "the sweep")


def test_a_limit_error_is_an_option_error_and_a_value_error():
    assert issubclass(LimitError, OptionError) and issubclass(OptionError, ValueError)


# -- serve -------------------------------------------------------------------------------------------------------

def _serve(**kw):
    from mhlo_cost.lower.inference.steps import StepRequest
    from mhlo_cost.machines.hardware import get_profile
    from mhlo_cost.studies.serve.study import ServeOptions

    req = kw.pop("request", None) or StepRequest(model="gpt")
    return ServeOptions(req, get_profile("h100"), **kw)


def test_serve_lists_deduplicated_in_order():
    o = _serve(batches=[32, 1, 8, 1, 32], contexts=(2048, 2048), tps=[2, 1, 2])
    assert (o.batches, o.contexts, o.tps) == ((32, 1, 8), (2048,), (2, 1))


def test_serve_points_are_the_product_of_the_lists():
    n = int(most("points") ** 0.5) + 1  # n x n points: above the limit, though each list is well within its own
    with pytest.raises(LimitError, match=f"the sweep has {n * n:,} points"):
        _serve(batches=list(range(1, n + 1)), contexts=list(range(1, n + 1)))


def test_serve_single_values_and_their_lists():
    from mhlo_cost.lower.inference.steps import StepRequest

    with pytest.raises(OptionError, match="--tps sweeps the tp"):
        _serve(tp=2, tps=[1, 2])
    with pytest.raises(OptionError, match="--batches sweeps the batch"):
        _serve(request=StepRequest(model="gpt", batch=4), batches=[1, 2])
    with pytest.raises(OptionError, match="a prefill of 512 tokens does not fit a cache of 256"):
        _serve(request=StepRequest(mode="prefill", model="gpt", tokens=512, context=512), contexts=[1024, 256])
    with pytest.raises(LimitError, match="--context"):
        _serve(request=StepRequest(model="gpt", context=most("positions") + 1))


def test_serve_model_checks_read_the_configuration_only():
    from mhlo_cost.lower.inference.steps import StepRequest
    from mhlo_cost.studies.serve.study import ServeStudy

    study = ServeStudy(_serve(request=StepRequest(model="gpt", overrides=(("heads", 8), ("hidden", 512))), tp=8))
    study.check()
    assert "step" not in study.__dict__  # nothing lowered
    with pytest.raises(LimitError, match="limit 'layers'"):
        ServeStudy(_serve(request=StepRequest(model="gpt", overrides=(("layers", most("layers") + 1),)))).check()


# -- train-plan --------------------------------------------------------------------------------------------------

def _old_split_count(gpus: int, micro_batches=(1, 2, 4), recomputes=("full", "selective"), interleaves=(1, 2, 3),
                     max_t: int = 8) -> int:
    """The configurations the sweep considers, counted by walking every pipeline degree up to ``gpus`` (the
    way the sweep enumerated them before it found divisors): the closed form's independent check."""
    n = 0
    for t in (1, 2, 4, 8, 16, 32, 64):
        if gpus % t or t > max_t and t > 8:
            continue
        for pp in range(1, gpus // t + 1):
            if (gpus // t) % pp == 0:
                n += sum(1 for _, _, v in product(micro_batches, recomputes, interleaves) if not (v > 1 and pp == 1))
    return n


@pytest.mark.parametrize("gpus", [1, 2, 6, 8, 64, 96, 720, 1024, 5040])
@pytest.mark.parametrize("kw", [{}, {"max_t": 64}, {"interleaves": (1,)}, {"micro_batches": (1,), "interleaves": (2, 3)}])
def test_split_count_is_the_number_of_splits(gpus, kw):
    from mhlo_cost.studies.plan.config import ScaleConfig
    from mhlo_cost.studies.plan.search import split_count, splits

    expected = _old_split_count(gpus, **kw)
    assert split_count(gpus, **kw) == expected == sum(1 for _ in splits(ScaleConfig(), gpus, **kw))


def test_split_count_of_the_degrees_kept():
    """A [training] spec's lists keep some degrees: counted as the splits it keeps."""
    from mhlo_cost.studies.plan.config import ScaleConfig
    from mhlo_cost.studies.plan.search import split_count, splits

    def only(t, p, d):
        return t in (2, 8) and p in (1, 3, 4)

    kept = sum(1 for c, _ in splits(ScaleConfig(), 96) if only(c.t, c.p, c.d))
    assert split_count(96, only=only) == kept == sum(1 for _ in splits(ScaleConfig(), 96, only=only)) > 0


def test_splits_in_the_order_of_growing_pipeline_degree():
    from mhlo_cost.studies.plan.config import ScaleConfig
    from mhlo_cost.studies.plan.search import splits

    got = [(c.t, c.p) for c, _ in splits(ScaleConfig(), 12, micro_batches=(1,), recomputes=("full",),
                                         interleaves=(1,))]
    assert got == [(1, 1), (1, 2), (1, 3), (1, 4), (1, 6), (1, 12), (2, 1), (2, 2), (2, 3), (2, 6),
                   (4, 1), (4, 3)]


def test_plan_options_limits():
    from mhlo_cost.studies.plan.config import ScaleConfig
    from mhlo_cost.studies.plan.study import PlanOptions

    with pytest.raises(LimitError, match="--sweep GPUS"):
        PlanOptions(ScaleConfig(), None, gpus=most("devices") * 2)
    with pytest.raises(LimitError, match="limit 'points'"):
        PlanOptions(ScaleConfig(), None, gpus=720720)
    with pytest.raises(LimitError, match="-t x -p x -d"):
        PlanOptions(ScaleConfig(heads=1024, hidden=1024, layers=1024, global_batch=1024, t=1024, p=1024, d=1024),
                    None)
    with pytest.raises(OptionError, match="heads 3 do not divide hidden 100"):
        PlanOptions(ScaleConfig(hidden=100, heads=3), None, gpus=8)
    PlanOptions(ScaleConfig(), None, gpus=most("devices"))  # 2**20: few divisors, within the points limit


def test_model_config_sizes_replace_the_models():
    from mhlo_cost.studies.plan.config import MODELS, model_config

    cfg = model_config("gpt-22b", layers=3, t=2)
    assert (cfg.layers, cfg.hidden, cfg.t) == (3, MODELS["gpt-22b"]["hidden"], 2)


# -- sweep ---------------------------------------------------------------------------------------------------------

def test_grid_counts_before_it_makes_points():
    from mhlo_cost.studies.sweep.grid import make_grid

    g = make_grid({"model": "gpt", "devices": [1, 1, 1], "hardware": ["h100", "h100"], "dtype": ["bf16", "bf16"]})
    assert len(g.points) == 1 and g.hardware == ["h100"]
    shapes = [f"{i}_64_64" for i in range(1, 1001)]
    with pytest.raises(LimitError, match="limit 'points'"):  # 1,000 x 5 x 1 x 1: counted, not made
        make_grid({"shape": shapes, "parallel": ["ulysses"], "devices": [2, 4, 8, 16, 32], "hardware": ["h100"]})
    with pytest.raises(LimitError, match="limit 'layers'"):
        make_grid({"model": "gpt", "hardware": ["h100"], "options": {"layers": most("layers") + 1}})


def test_training_spec_lists_deduplicated(tmp_path):
    from mhlo_cost.studies.sweep.spec import read_spec

    p = tmp_path / "s.toml"
    p.write_text('model = "gpt-22b"\nhardware = ["selene", "selene"]\ndevices = [16, 8, 16]\n'
                 "[training]\ntensor = [8, 4, 8]\n")
    s = read_spec(str(p))
    assert s["devices"] == [16, 8] and s["hardware"] == ["selene"] and s["training"]["tensor"] == [8, 4]


# -- the report study ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, words", [({"blocks": "rms", "block_pattern": "x"}, "--block-pattern"),
                                       ({"blocks": "scope", "norms_per_block": 2}, "--norms-per-block"),
                                       ({"block_pattern": "x", "norms_per_block": 2}, "--norms-per-block"),
                                       ({"blocks": "layers"}, "--blocks"), ({"steps": 0}, "--steps")])
def test_study_options_refuse_what_the_blocks_would_ignore(kw, words):
    from mhlo_cost.studies.study import StudyOptions

    with pytest.raises(OptionError, match=words):
        StudyOptions("x.mlir", **kw)
    StudyOptions("x.mlir", blocks="rms", norms_per_block=2)
    StudyOptions("x.mlir", blocks="stages", block_pattern="x")
