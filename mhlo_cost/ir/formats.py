"""Inputs that are not MLIR files themselves but hold one, or come close: what the loader does with them.

* A ``jax.export`` artifact (``Exported.serialize()``, a flatbuffer) holds the module as StableHLO
  bytecode: :func:`unwrap` returns that, so ``mhlo-cost report model.jaxexport`` works as on the text
  the module was exported from (locations included).
* Things a user may hand over instead of MLIR get a sentence saying what is needed: XLA's HLO text
  (``HloModule ...``), a zip archive (a ``torch.export`` ``.pt2``), a Python pickle.

Nothing here parses MLIR: the loader does, with jaxlib's bindings.
"""
from __future__ import annotations

_BYTECODE_MAGIC = b"ML\xefR"
_JAX_EXPORT_HINT = b"StableHLO_v"  # the producer string of the bytecode inside a jax.export artifact


class NotMLIR(Exception):
    """The input is something close to MLIR; ``str()`` says what it is and what to hand over instead."""


def looks_like_jax_export(data: bytes) -> bool:
    """A flatbuffer whose payload holds StableHLO bytecode (at an offset: the file is not bytecode itself)."""
    at = data.find(_BYTECODE_MAGIC, 4)
    return at > 0 and data[at + 5: at + 5 + len(_JAX_EXPORT_HINT)] == _JAX_EXPORT_HINT


def jax_export_module(data: bytes, name: str) -> bytes:
    """The StableHLO bytecode of a serialized ``jax.export.Exported``."""
    try:
        from jax import export
    except ImportError as e:  # pragma: no cover - jax is a dependency
        raise NotMLIR(f"{name}: a jax.export artifact, and reading it needs jax ({e})") from None
    try:
        exported = export.deserialize(bytearray(data))
    except ImportError as e:  # flatbuffers, which jax needs for this, is missing
        raise NotMLIR(f"{name}: a jax.export artifact; reading it needs the flatbuffers package "
                      f"(pip install flatbuffers): {e}") from None
    except Exception as e:  # noqa: BLE001 - a truncated or foreign flatbuffer
        first = (str(e).splitlines() or [""])[0]
        raise NotMLIR(f"{name}: looks like a jax.export artifact but cannot be read ({type(e).__name__}: "
                      f"{first}); write it with jax.export.export(...)(...).serialize() of this jax version") \
            from None
    return bytes(exported.mlir_module_serialized)


def unwrap(data: bytes | str, name: str) -> bytes | str:
    """MLIR (text or bytecode) from ``data``: unchanged where it already is (or is unknown: the loader
    says so), the module inside a jax.export artifact, NotMLIR for a near miss."""
    head = data[:64].lstrip()
    if head.startswith("HloModule " if isinstance(data, str) else b"HloModule "):
        raise NotMLIR(f"{name}: XLA HLO text, not MLIR; hand over StableHLO: "
                      "jax.jit(f).lower(...).as_text(debug_info=True), or `mhlo-cost lower`")
    if isinstance(data, str):
        return data
    if data[:4] == _BYTECODE_MAGIC:
        return data
    if looks_like_jax_export(data):
        return jax_export_module(data, name)
    if data[:4] == b"PK\x03\x04":
        raise NotMLIR(f"{name}: a zip archive (a torch.export .pt2?), not MLIR; lower the torch module with "
                      "`mhlo-cost lower --module PKG.MOD:FACTORY` (torchax) instead")
    if data[:1] == b"\x80" and data[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        raise NotMLIR(f"{name}: a Python pickle, not MLIR; for a jax.export.Exported write "
                      "exported.serialize() to the file instead")
    return data
