"""Memory: peak live bytes per op, per block and per device, from the IR (see README, "Memory").

The walk records frames (:mod:`.record`); :mod:`.prepare` and :mod:`.sweep` turn them into live bytes per row;
:mod:`.profile` gives the program's figures (:class:`MemoryProfile`); :mod:`.views` the tables and summary lines.
"""
from .profile import MEMORY_KEYS, MemoryProfile, profile

__all__ = ["MEMORY_KEYS", "MemoryProfile", "profile"]
