"""The one disk cache (mhlo_cost.files.cache) cannot lie: every damaged entry is computed again (the answer is
the cold one, with a note), never trusted, never exit 70; racing writers and readers see whole entries only;
a cache folder that is a file is one line, exit 2; the code hash follows the rules' source, so an entry kept
before a rule changed is not served after (the training plan's layer costs included: no hand-bumped VERSION).

Entries with a valid checksum but a bad field are built here from the format the module's docstring states
(sha256 of the payload's canonical JSON, a NUL byte and the blob), not with the module's own writer."""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from mhlo_cost.files import cache as fc
from mhlo_cost.files.cache import AMOUNT, COUNT, CacheError, DiskCache, Record, Schema
from stderr_lines import error_line

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = Schema("test/things", 3, Record({"flops": COUNT, "time_s": AMOUNT}))
REQUEST = {"what": "a thing", "size": 7}
GOOD = {"flops": 1234, "time_s": 0.5}


def entry_bytes(payload, key: str, schema=("test/things", 3), blob: bytes = b"", sha: str | None = None) -> bytes:
    """An entry as the format says, its checksum right unless ``sha`` is given."""
    canon = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    sha = sha or hashlib.sha256(canon + b"\0" + blob).hexdigest()
    head = {"schema": list(schema), "key": key, "sha256": sha, "blob_bytes": len(blob), "payload": payload}
    return json.dumps(head, sort_keys=True, separators=(",", ":")).encode() + b"\n" + blob


def _text_entry(path: Path, key: str, number: str) -> None:
    """An entry whose time is written as ``number`` (NaN, Infinity, 1e999): no writer of JSON makes these."""
    path.write_bytes(entry_bytes({"flops": 1234, "time_s": 0.25}, key).replace(b'"time_s":0.25', b'"time_s":' +
                                                                                 number.encode()))


def _damage(kind: str, path: Path, key: str, other_key: str) -> None:
    """Put the damage ``kind`` where the entry for ``key`` is (``path``)."""
    good = entry_bytes(GOOD, key)
    makers = {
        "truncated": lambda: path.write_bytes(good[: len(good) // 2]),
        "empty": lambda: path.write_bytes(b""),
        "not JSON": lambda: path.write_bytes(b"\x00\xffnot json at all\n"),
        "header only, no newline": lambda: path.write_bytes(good.rstrip(b"\n")),
        "NaN": lambda: _text_entry(path, key, "NaN"),
        "Infinity": lambda: _text_entry(path, key, "Infinity"),
        "1e999": lambda: _text_entry(path, key, "1e999"),
        "negative count": lambda: path.write_bytes(entry_bytes({"flops": -5, "time_s": 0.5}, key)),
        "negative time": lambda: path.write_bytes(entry_bytes({"flops": 5, "time_s": -0.5}, key)),
        "count as text": lambda: path.write_bytes(entry_bytes({"flops": "1234", "time_s": 0.5}, key)),
        "count as float": lambda: path.write_bytes(entry_bytes({"flops": 1234.0, "time_s": 0.5}, key)),
        "count as bool": lambda: path.write_bytes(entry_bytes({"flops": True, "time_s": 0.5}, key)),
        "missing field": lambda: path.write_bytes(entry_bytes({"flops": 1234}, key)),
        "unknown field": lambda: path.write_bytes(entry_bytes({**GOOD, "extra": 1}, key)),
        "payload not an object": lambda: path.write_bytes(entry_bytes([1234, 0.5], key)),
        "edited after the checksum": lambda: path.write_bytes(
            entry_bytes({"flops": 99, "time_s": 0.5}, key, sha=json.loads(good.split(b"\n")[0])["sha256"])),
        "another key's entry": lambda: path.write_bytes(entry_bytes(GOOD, other_key)),
        "another schema": lambda: path.write_bytes(entry_bytes(GOOD, key, schema=("test/things", 2))),
        "a blob where none is": lambda: path.write_bytes(entry_bytes(GOOD, key, blob=b"xyz")),
        "a folder": lambda: path.mkdir(),
        "a symlink loop": lambda: os.symlink(path.name, path),
        "a FIFO": lambda: os.mkfifo(path),
    }
    makers[kind]()


KINDS = ["truncated", "empty", "not JSON", "header only, no newline", "NaN", "Infinity", "1e999", "negative count",
         "negative time", "count as text", "count as float", "count as bool", "missing field", "unknown field",
         "payload not an object", "edited after the checksum", "another key's entry", "another schema",
         "a blob where none is", "a folder", "a symlink loop", "a FIFO"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_damaged_entry_is_never_trusted(tmp_path, kind):
    notes: list = []
    cache = DiskCache(tmp_path, SCHEMA, note=notes.append)
    path = cache.path(REQUEST)
    path.parent.mkdir(parents=True)
    _damage(kind, path, cache.key(REQUEST), cache.key({"what": "another thing"}))
    assert cache.get(REQUEST) is None
    assert len(notes) == 1 and notes[0].startswith(f"cache: the entry {path} is not trusted (") \
        and notes[0].endswith("; computed again")
    cache.put(REQUEST, GOOD)  # the answer computed again replaces it (a folder in the way is left, and said)
    if kind == "a folder":
        assert notes[1].startswith(f"cache: cannot keep {path}: ") and "directory" in notes[1]
        assert cache.get(REQUEST) is None and len(notes) == 3
    else:
        assert cache.get(REQUEST) == GOOD and len(notes) == 1


def test_what_is_kept_is_read_back_and_a_missing_entry_says_nothing(tmp_path):
    notes: list = []
    cache = DiskCache(tmp_path, replace(SCHEMA, blob=True), note=notes.append)
    assert cache.get(REQUEST) is None and notes == []
    cache.put(REQUEST, {"flops": 2**80, "time_s": 1e-9}, b"\x00\n\xffblob")
    assert cache.get_blob(REQUEST) == ({"flops": 2**80, "time_s": 1e-9}, b"\x00\n\xffblob")  # exact int, bytes
    path = cache.path(REQUEST)
    path.write_bytes(path.read_bytes()[:-1])  # the blob torn
    assert cache.get_blob(REQUEST) is None and "torn" in notes[-1]
    # what cannot be kept (not finite, out of range) is said, and nothing is written
    cache.put({"n": 1}, {"flops": 1, "time_s": float("inf")}, b"")
    cache.put({"n": 2}, {"flops": -1, "time_s": 1.0}, b"")
    assert [n.split(": ", 2)[0] for n in notes[-2:]] == ["cache", "cache"] and "not finite" not in notes[-1]
    assert "payload.flops is -1, not a count" in notes[-1]
    assert cache.get({"n": 1}) is None and cache.get({"n": 2}) is None
    # no cache (--no-cache): nothing read, nothing written, nothing said
    none = DiskCache(None, SCHEMA, note=notes.append)
    none.put(REQUEST, GOOD)
    assert none.get(REQUEST) is None and none.path(REQUEST) is None


def test_racing_writers_and_readers_see_whole_entries(tmp_path):
    import cache_race

    ctx = multiprocessing.get_context("spawn")
    out, done = ctx.Queue(), ctx.Event()
    reader = ctx.Process(target=cache_race.read, args=(str(tmp_path), done, out))
    writers = [ctx.Process(target=cache_race.write, args=(str(tmp_path), w, 12)) for w in ("a", "b")]
    for p in (reader, *writers):
        p.start()
    for p in writers:
        p.join(600)
    done.set()
    seen = out.get(timeout=600)
    reader.join(600)
    assert [p.exitcode for p in (*writers, reader)] == [0, 0, 0]  # a writer told of a failure raises: exit 1
    assert isinstance(seen, int) and seen >= cache_race.KEYS, seen  # else the reader's note: torn or mixed
    final = DiskCache(tmp_path, cache_race.SCHEMA, note=pytest.fail)
    for k in range(cache_race.KEYS):  # each key: one writer's last round, whole
        meta, blob = final.get_blob({"key": k})
        assert meta["round"] == 11 and (meta, blob) == cache_race.payload(meta["writer"], 11)
    assert not [f for f in (tmp_path / "race" / "entries").iterdir() if f.suffix == ".tmp"]  # none left over


def test_a_cache_folder_that_is_a_file_is_an_error(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(CacheError, match="the cache folder exists and is not a folder"):
        DiskCache(afile, SCHEMA)
    with pytest.raises(CacheError, match="cannot make the cache folder there"):
        DiskCache(afile / "below", SCHEMA)


@pytest.mark.parametrize("argv", [
    ["sweep", "--model", "stdit3", "--small", "--depth", "1", "--hardware", "h100", "-q"],
    ["serve", "--model", "gpt", "--set", "layers=1", "--set", "hidden=32", "--set", "heads=2", "--set", "vocab=64",
     "--decode", "-q"],
    ["train-plan", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128"],
])
@pytest.mark.parametrize("how", ["--cache-dir", "--cache", "default"])
def test_every_command_refuses_a_cache_folder_that_is_a_file(tmp_path, capsys, monkeypatch, argv, how):
    from mhlo_cost.cli import main

    afile = tmp_path / "afile"
    afile.write_text("x")
    if how == "default":  # the default folder, $XDG_CACHE_HOME/mhlo-cost, a file
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        os.replace(afile, tmp_path / "mhlo-cost")
        afile = tmp_path / "mhlo-cost"
    extra = [] if how == "default" else [how, str(afile)]
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err
    line = error_line(err.replace("mhlo-cost: warning: --cache is the old spelling of --cache-dir (same meaning); "
                                  "it goes in 0.3.0\n", "") if how == "--cache" else err)
    assert line == (f"mhlo-cost: error: {afile}: the cache folder exists and is not a folder: give another with "
                    "--cache-dir DIR, or --no-cache")
    assert ("old spelling" in err) == (how == "--cache")


def test_no_cache_and_cache_dir_exclude_each_other(tmp_path, capsys):
    from mhlo_cost.cli import main

    argv = ["train-plan", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128"]
    assert main([*argv, "--no-cache", "--cache-dir", str(tmp_path)]) == 2
    assert error_line(capsys.readouterr().err) == ("mhlo-cost: error: --no-cache keeps nothing: give it or "
                                                   "--cache-dir, not both")


# -- the code hash -------------------------------------------------------------------------------------
@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """A copy of the package that the code hash reads (the process's hash forgotten before and after)."""
    copy = tmp_path / "mhlo_cost"
    shutil.copytree(ROOT / "mhlo_cost", copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(fc, "PACKAGE", copy)
    fc.code_hash.cache_clear()
    yield copy
    fc.code_hash.cache_clear()


def _edit(path: Path) -> None:
    path.write_text(path.read_text() + "\n# a changed rule\n")


def test_the_code_hash_follows_what_can_change_an_answer(package_copy):
    before = fc.hash_sources(package_copy)
    assert before == fc.hash_sources(ROOT / "mhlo_cost")  # the same files, the same hash
    _edit(package_copy / "cli" / "cmd_report.py")  # the command line maps options: not hashed
    assert fc.hash_sources(package_copy) == before
    for changed in ("walk/matrix.py", "roofline/estimate.py", "machines/data/hardware.toml", "views/sweep_row.py"):
        _edit(package_copy / changed)
        after = fc.hash_sources(package_copy)
        assert after != before, changed
        before = after
    (package_copy / "walk" / "new_rules.py").write_text("RULES = {}\n")  # a new module is a new hash too
    assert fc.hash_sources(package_copy) != before
    assert fc.code_hash() == fc.code_hash()  # once per process


def test_an_entry_kept_before_a_rule_changed_is_not_served_after(package_copy, tmp_path):
    cache = DiskCache(tmp_path, SCHEMA)
    cache.put(REQUEST, GOOD)
    assert cache.get(REQUEST) == GOOD
    _edit(package_copy / "walk" / "matrix.py")
    fc.code_hash.cache_clear()  # a new process, after the edit
    assert cache.get(REQUEST) is None  # a new key: the old entry is never read


@pytest.fixture
def layer_costs(monkeypatch):
    """layer_cost with the analysis stubbed: each call of analyse_layer counted, returning ``answer[0]``."""
    pytest.importorskip("optax")
    from mhlo_cost.studies.plan import costs

    calls: list = []
    answer: list = []

    def analyse(cfg, hw, key="", chip="", part="layer"):
        calls.append(part)
        return replace(answer[0], key=key, chip=chip)

    monkeypatch.setattr(costs, "analyse_layer", analyse)
    monkeypatch.setattr(costs, "_MEMO", {})
    return costs, calls, answer


def _cfg_hw():
    from mhlo_cost.network import resolve_profile
    from mhlo_cost.studies.plan.config import ScaleConfig

    return ScaleConfig(layers=4, hidden=64, heads=4, seq=32, vocab=128), resolve_profile("selene")


def _cost(flops: int):
    from mhlo_cost.studies.plan.costs import PHASES, LayerCost

    return LayerCost(key="", chip="", gemm_flops={p: flops for p in PHASES}, vector_flops={p: 1 for p in PHASES},
                     time_s={p: 1e-6 for p in PHASES}, ops=3)


def test_the_plans_layer_cache_does_not_serve_a_stale_cost(package_copy, tmp_path, layer_costs):
    costs, calls, answer = layer_costs
    cfg, hw = _cfg_hw()
    answer[:] = [_cost(100)]
    assert costs.layer_cost(cfg, hw, tmp_path).gemm_flops["forward"] == 100 and calls == ["layer"]
    costs._MEMO.clear()  # another process, same code: read from the disk
    assert costs.layer_cost(cfg, hw, tmp_path).gemm_flops["forward"] == 100 and calls == ["layer"]
    _edit(package_copy / "walk" / "matrix.py")  # a rule changes (an editable install between releases)
    fc.code_hash.cache_clear()
    costs._MEMO.clear()
    answer[:] = [_cost(200)]
    assert costs.layer_cost(cfg, hw, tmp_path).gemm_flops["forward"] == 200 and calls == ["layer", "layer"]
    # a chip whose figures differ under the same name is another request too
    faster = replace(hw, hbm_bandwidth=hw.hbm_bandwidth * 2)
    costs._MEMO.clear()
    costs.layer_cost(cfg, faster, tmp_path)
    assert calls == ["layer", "layer", "layer"]


@pytest.mark.parametrize("kind", ["NaN", "1e999", "negative count", "count as text", "edited after the checksum",
                                  "a folder", "a symlink loop"])
def test_a_damaged_layer_entry_is_computed_again(tmp_path, layer_costs, kind):
    """The plan's own entries: each damage gives the cold answer again, with a note."""
    costs, calls, answer = layer_costs
    cfg, hw = _cfg_hw()
    answer[:] = [_cost(100)]
    cold = costs.layer_cost(cfg, hw, tmp_path)
    (path,) = (tmp_path / "plan" / "layers").iterdir()
    entry = path.read_bytes()
    head = json.loads(entry.split(b"\n")[0])
    bad = dict(head["payload"])
    path.unlink()
    if kind in ("NaN", "1e999"):  # a time written as no JSON writer writes it
        line = entry.split(b"\n")[0]
        path.write_bytes(line.replace(b'"backward":1e-06', b'"backward":' + kind.encode(), 1) + b"\n")
        assert path.read_bytes() != entry
    elif kind in ("negative count", "count as text"):  # a checksum that matches the bad field
        bad["ops"] = -3 if kind == "negative count" else "3"
        path.write_bytes(entry_bytes(bad, head["key"], tuple(head["schema"])))
    elif kind == "edited after the checksum":
        bad["ops"] = 4
        path.write_bytes(entry_bytes(bad, head["key"], tuple(head["schema"]), sha=head["sha256"]))
    else:
        _damage(kind, path, head["key"], "")
    notes: list = []
    costs._MEMO.clear()
    again = costs.layer_cost(cfg, hw, tmp_path, note=notes.append)
    assert again == cold and calls == ["layer", "layer"]  # computed again: the cold answer
    assert notes and notes[0].startswith(f"cache: the entry {path} is not trusted (")


# -- the commands, end to end --------------------------------------------------------------------------
def _run(capsys, argv) -> tuple[str, str]:
    from mhlo_cost.cli import main

    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out, err


def test_train_plan_computes_a_damaged_layer_again(tmp_path, capsys, monkeypatch):
    """A time made NaN, a count edited after its checksum: the plan printed is the cold one, exit 0, a note."""
    pytest.importorskip("optax")
    from mhlo_cost.studies.plan import costs

    monkeypatch.setattr(costs, "_MEMO", {})
    argv = ["train-plan", "--layers", "4", "--hidden", "64", "--heads", "4", "--seq", "32", "--vocab", "128",
            "--format", "json", "--cache-dir", str(tmp_path)]
    cold, _ = _run(capsys, argv)
    entries = sorted((tmp_path / "plan" / "layers").iterdir())
    assert len(entries) == 2  # the layer and the head
    for path in entries:
        line = path.read_bytes().split(b"\n")[0]
        path.write_bytes(line.replace(b'"backward":', b'"backward":NaN,"x":', 1) + b"\n")
    costs._MEMO.clear()  # each run a process of its own
    again, err = _run(capsys, argv)
    assert again == cold and err.count("is not trusted (not JSON") + err.count("is not trusted (holds NaN") == 2
    for path in entries:  # kept again whole; now a count edited, its checksum left as it was
        head = json.loads(path.read_bytes().split(b"\n")[0])
        head["payload"]["ops"] += 1
        path.write_bytes(json.dumps(head, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    costs._MEMO.clear()
    again, err = _run(capsys, argv)
    assert again == cold and err.count("is not trusted (its checksum does not match)") == 2


def test_serve_lowers_a_damaged_step_again(tmp_path, capsys):
    argv = ["serve", "--model", "gpt", "--set", "layers=1", "--set", "hidden=32", "--set", "heads=2", "--set",
            "vocab=64", "--decode", "--format", "json", "--cache-dir", str(tmp_path)]
    cold, _ = _run(capsys, argv)
    (step,) = (tmp_path / "serve" / "steps").iterdir()
    (figures,) = (tmp_path / "serve" / "figures").iterdir()
    head = json.loads(step.read_bytes().split(b"\n")[0])
    step.write_bytes(entry_bytes(head["payload"], head["key"], tuple(head["schema"]), blob=b"not gzip"))
    figures.write_bytes(figures.read_bytes().replace(b'"flops":', b'"flops":-', 1))
    again, err = _run(capsys, argv)
    assert again == cold
    assert f"cache: the entry {step} is not trusted (its IR is not gzipped text); computed again" in err
    assert f"cache: the entry {figures} is not trusted (its checksum does not match); computed again" in err
    _, err = _run(capsys, [*argv, "-q"])  # kept again: read, nothing said
    assert err == ""
