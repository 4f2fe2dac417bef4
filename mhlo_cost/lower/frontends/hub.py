"""Models from the libraries hardware teams are handed them from, built from a configuration only (never
weights), on the ``meta`` device: transformers (``--hf CLASS``), diffusers (``--diffusers CLASS``) and timm
(``--timm NAME``). The libraries come with ``pip install 'mhlo-cost[models]'``.

Configurations: transformers and diffusers take a local ``config.json`` (or a folder holding one); for
transformers also the name of a model type the library ships a configuration class for (``llama``,
``t5``: its defaults); without either, the class's default configuration. ``--set key=value`` overrides
single fields (``num_hidden_layers=2``; dotted for nested configs: ``text_config.hidden_size=64``) or passes
a keyword the configuration class reads from its ``**kwargs`` (:func:`settable_keys`); any other key is an
error, with the closest known ones. timm builds a model by name with ``--set`` as
``timm.create_model`` keyword arguments (``depths=[2,2,6,2]``, ``num_classes=10``).

Nothing is downloaded: no hub name is looked up, no weight is read.
"""
from __future__ import annotations

import contextlib
import difflib
import importlib
import json
import os
import re
import sys

from . import FrontendError

LIBRARIES = {"hf": "transformers", "diffusers": "diffusers", "timm": "timm"}
#: --set keys that are model-building options, not config fields (set as ``config._attn_implementation``...)
_SPECIAL = ("attn_implementation", "experts_implementation")


def _import(lib: str):
    """The library ``lib``, its first import with the cyclic collector paused (:mod:`._imports`)."""
    from ._imports import collector_paused

    try:
        with collector_paused() if lib not in sys.modules else contextlib.nullcontext():
            if lib == "timm":
                from . import _torchvision

                return _torchvision.import_timm()
            return importlib.import_module(lib)
    except ModuleNotFoundError as e:
        raise FrontendError(f"{lib} is not installed ({e.name} is missing); install it with: "
                            "pip install 'mhlo-cost[models]'") from None


def import_timm():
    """``import timm`` that works without torchvision (see :mod:`._torchvision`)."""
    return _import("timm")


def import_library(library: str):
    """The library of ``hf``, ``diffusers`` or ``timm`` with torch (the slow imports, as one step)."""
    mod = _import(LIBRARIES[library])
    import torch  # noqa: F401
    return mod


def _closest(word: str, names) -> str:
    near = difflib.get_close_matches(word, list(names), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(near)}?)" if near else ""


def _class(lib: str, name: str):
    from ._imports import collector_paused

    mod = _import(lib)
    try:  # (a lazy library imports the class's module on first use: transformers' modelling code, torch)
        with collector_paused() if name not in vars(mod) else contextlib.nullcontext():
            return getattr(mod, name)
    except (AttributeError, ImportError, ModuleNotFoundError, RuntimeError) as e:
        if isinstance(e, AttributeError):
            return _unknown_class(lib, mod, name)
        raise FrontendError(f"{lib}.{name} cannot be imported: {str(e).splitlines()[0]}") from None


def hf_class(name: str):
    """The transformers class ``name``; FrontendError where transformers has none."""
    return _class("transformers", name)


def _unknown_class(lib: str, mod, name: str):
    known = [n for n in dir(mod) if n[:1].isupper()]
    hint = _closest(name, known)
    if lib == "transformers" and not hint:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        if name in CONFIG_MAPPING:
            hint = f" ({name} is a model type: --hf AutoModel --config {name}, or a class such as " \
                   f"{type(CONFIG_MAPPING[name]()).__name__.removesuffix('Config')}Model)"
    raise FrontendError(f"{lib} has no class {name!r}{hint}")


def _config_file(path: str) -> str:
    p = os.path.join(path, "config.json") if os.path.isdir(path) else path
    if not os.path.isfile(p):
        raise FrontendError(f"{path}: no such configuration file (a config.json or a folder holding one)")
    return p


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise FrontendError(f"{path}: not a readable JSON configuration ({e})") from None
    if not isinstance(data, dict):
        raise FrontendError(f"{path}: a configuration must be a JSON object")
    return data


def _set_nested(cfg, key: str, value, owner: str) -> None:
    *parents, last = key.split(".")
    obj = cfg
    for p in parents:
        if not hasattr(obj, p):
            raise FrontendError(f"{owner} has no field {p!r} (in --set {key})")
        obj = getattr(obj, p)
    known = set(obj.to_dict()) if hasattr(obj, "to_dict") else set(vars(obj))
    if last not in known and not hasattr(obj, last):
        raise FrontendError(f"{type(obj).__name__} has no field {last!r}{_closest(last, known)}")
    setattr(obj, last, value)


# -- transformers ---------------------------------------------------------------------------------------------


def settable_keys(config_class) -> set:
    """The keys ``--set`` takes for a transformers configuration class: its fields (those of its default
    instance, and the aliases of ``attribute_map``), the parameters its ``__init__`` names, and the keywords
    its construction (its own code or a base's) reads from ``**kwargs`` by name (ModernBERT's
    ``global_attn_every_n_layers``, read in ``__post_init__`` to lay out ``layer_types``). Any other key is refused: the base class would store it
    as an attribute that nothing reads (a typo such as ``num_hiden_layers`` changes nothing)."""
    import inspect

    from ._kwargs_keys import construction_reads

    keys = set(config_class().to_dict()) | set(getattr(config_class, "attribute_map", {}))
    params = inspect.signature(config_class.__init__).parameters.values()
    keys |= {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self"}
    return keys | construction_reads(config_class)




def hf_config(cls, config: str | None, overrides: dict):
    """The configuration of a transformers model class: from a config.json, a model type, or the default,
    built with the overrides (so that fields derived in the configuration's ``__init__``, like a
    ``head_dim`` from ``hidden_size``, follow them); dotted keys are set afterwards."""
    tf = _import("transformers")
    config_class, data = getattr(cls, "config_class", None), {}
    if config is not None and (os.path.exists(config) or config.endswith(".json")):
        data = _read_json(_config_file(config))
        if config_class is None:  # an Auto class: the file's model_type decides
            if "model_type" not in data:
                raise FrontendError(f"{config}: no model_type in the file; name a concrete model class")
            config_class = type(tf.AutoConfig.for_model(data["model_type"]))
    elif config is not None:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        if config not in CONFIG_MAPPING:
            raise FrontendError(f"transformers has no model type {config!r}{_closest(config, CONFIG_MAPPING.keys())} "
                                "(give a config.json path or a model type)")
        config_class = CONFIG_MAPPING[config]
    elif config_class is None:
        raise FrontendError(f"{cls.__name__} needs --config (a config.json or a model type such as llama)")
    flat = {k: v for k, v in overrides.items() if "." not in k and k not in _SPECIAL}
    known = settable_keys(config_class)
    for key in flat:
        if key not in known:
            raise FrontendError(f"{config_class.__name__} has no field {key!r}{_closest(key, known)} (--set takes a "
                                "field of the configuration or a keyword its __init__ reads)")
    try:
        cfg = config_class.from_dict({**data, **flat})
        for key, value in overrides.items():
            if "." in key:
                _set_nested(cfg, key, value, type(cfg).__name__)
    except FrontendError:
        raise
    except Exception as e:  # noqa: BLE001 - transformers' own checks of a configuration, as one line
        raise FrontendError(f"{config_class.__name__}: transformers refuses this configuration: {_one_line(e)}") \
            from None
    return cfg


def hf_model_config(name: str, config: str | None, overrides: dict):
    """``hf_config(hf_class(name), config, overrides)``, without importing the class where ``config`` names a model
    type: that configuration comes from transformers' ``CONFIG_MAPPING`` and :func:`hf_config` never reads the
    class, which only building the model needs (importing ``LlamaForCausalLM``'s modelling code past its
    configuration's: about 1.4 CPU s, for a process that never builds the model: ``serve -j 2``'s first). The name is
    still checked first, as :func:`hf_class` checks it, against the names transformers' lazy module lists
    (``_class_to_module``, transformers.utils.import_utils._LazyModule); a name it does not list is looked up as
    before (the same errors, in the same order)."""
    from ._imports import collector_paused

    if config is None or os.path.exists(config) or config.endswith(".json") or not _listed("transformers", name):
        return hf_config(hf_class(name), config, overrides)
    with collector_paused() if "torch" not in sys.modules else contextlib.nullcontext():  # (the configuration's
        return hf_config(None, config, overrides)  # module imports torch in transformers 5, as the class's did)


def _listed(lib: str, name: str) -> bool:
    """Whether the library ``lib`` has ``name`` loaded or lists it to load on first use (a lazy module's map of class
    names to modules), without importing it."""
    mod = _import(lib)
    return name in vars(mod) or name in (getattr(mod, "_class_to_module", None) or {})


def _one_line(e: Exception) -> str:
    """What a library's exception says, in one line: its last line (transformers' validation errors say where
    first, then the cause), without the name of the exception type it quotes."""
    lines = [part.strip() for part in str(e).splitlines() if part.strip()]
    text = re.sub(r"^\w*(Error|Exception|Warning): ", "", lines[-1]) if lines else ""
    return text[:300] or "no reason given"


def config_dtype(cfg) -> str | None:
    """The floating dtype a transformers configuration names (``dtype``, formerly ``torch_dtype``:
    ``"bfloat16"``), None where it names none (or ``"auto"``)."""
    d = getattr(cfg, "dtype", None) if hasattr(cfg, "dtype") else getattr(cfg, "torch_dtype", None)
    name = str(d).removeprefix("torch.") if d is not None else ""
    return name if name in ("float32", "float16", "bfloat16", "float64") else None


def build_hf(name: str, config: str | None = None, overrides: dict | None = None):
    """A transformers model (``LlamaForCausalLM``, ``AutoModelForCausalLM``...) on the meta device, in the dtype
    its configuration names (as ``from_pretrained`` builds it), else torch's default."""
    overrides = dict(overrides or {})
    cls = _class("transformers", name)
    cfg = hf_config(cls, config, overrides)
    import torch  # (after the class and configuration are checked)
    chosen = {k: overrides[k] for k in _SPECIAL if overrides.get(k)}
    dtype = config_dtype(cfg)
    default = torch.get_default_dtype()
    if dtype is not None:
        torch.set_default_dtype(getattr(torch, dtype))
    try:
        return _instantiate(cls, cfg, chosen)
    finally:
        torch.set_default_dtype(default)


def _instantiate(cls, cfg, chosen: dict):
    import torch

    with torch.device("meta"):
        if getattr(cls, "config_class", None) is None and hasattr(cls, "from_config"):  # Auto* classes
            model = cls.from_config(cfg, **chosen)
        else:
            for key, value in chosen.items():
                setattr(cfg, "_" + key, value)
            model = cls(cfg)
    return model


# -- diffusers ------------------------------------------------------------------------------------------------


def build_diffusers(name: str, config: str | None = None, overrides: dict | None = None):
    """A diffusers model (``LatteTransformer3DModel``, ``DiTTransformer2DModel``...) on the meta device."""
    import inspect

    import torch

    cls = _class("diffusers", name)
    if not hasattr(cls, "from_config"):
        raise FrontendError(f"diffusers.{name} is not a model class (no from_config)")
    base = {}
    if config is not None:
        base = {k: v for k, v in _read_json(_config_file(config)).items() if not k.startswith("_")}
    params = inspect.signature(cls.__init__).parameters
    for key in overrides or {}:
        if key not in params:
            known = [p for p in params if p != "self"]
            raise FrontendError(f"{name} has no argument {key!r}{_closest(key, known)}")
    with torch.device("meta"):
        return cls.from_config({**base, **(overrides or {})})


# -- timm -----------------------------------------------------------------------------------------------------


def build_timm(name: str, overrides: dict | None = None):
    """A timm model by name (``convnext_atto``, ``vit_small_patch16_224``), no pretrained weights."""
    import torch

    timm = _import("timm")
    if not timm.is_model(name):
        raise FrontendError(f"timm has no model {name!r}{_closest(name, timm.list_models())}")
    with torch.device("meta"):
        try:
            return timm.create_model(name, pretrained=False, **(overrides or {}))
        except TypeError as e:
            raise FrontendError(f"timm model {name}: {e}") from None


def build(library: str, name: str, config: str | None = None, overrides: dict | None = None):
    """``library`` is ``hf``, ``diffusers`` or ``timm``."""
    if library == "hf":
        return build_hf(name, config, overrides)
    if library == "diffusers":
        return build_diffusers(name, config, overrides)
    if library == "timm":
        if config is not None:
            raise FrontendError("--config applies to --hf and --diffusers; timm models are named by --timm")
        return build_timm(name, overrides)
    raise FrontendError(f"unknown library {library!r} (known: {', '.join(LIBRARIES)})")
