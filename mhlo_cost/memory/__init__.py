"""Memory: peak live bytes per op, per block and per device, from the IR (see docs/memory.md).

The walk records frames (:class:`mhlo_cost.walk.liveness.LivenessRecorder`, into a
:class:`mhlo_cost.walk.frames.Recording`); :mod:`.prepare` and :mod:`.sweep` turn them into live bytes per row
(:mod:`.flat`: a flat frame's backward pass in arrays; :mod:`.opclass`: what an op does to buffers;
:mod:`.eager_hold`: how long PyTorch eager keeps a value); :mod:`.profile` gives the program's figures
(:class:`MemoryProfile`) and :mod:`.params` which arguments are parameters. The tables and summary lines made
of them are views, above this wing: :mod:`mhlo_cost.roofline.memory`.
"""
from .profile import MEMORY_KEYS, MemoryProfile, profile

__all__ = ["MEMORY_KEYS", "MemoryProfile", "profile"]
