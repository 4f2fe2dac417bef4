"""Hardware profiles: peak rates of a chip, for turning counted costs into time.

The profile itself (:class:`Hardware`: dtype names, fallback rules, time models) is in
:mod:`mhlo_cost.machines.profile`; reading and checking the TOML files, the shipped profiles and the
lookup by name or alias in :mod:`mhlo_cost.machines.catalogue`. Import both from here.
"""

from __future__ import annotations

from .profile import DTYPE_KEYS, Hardware, HardwareError, canonical_dtype
from .catalogue import (check_schema_version, field_notes, get_profile, list_profiles, load_profiles, parse_profiles,
                        profile_names, source_table, template_text)

__all__ = [
    "Hardware",
    "HardwareError",
    "check_schema_version",
    "field_notes",
    "source_table",
    "DTYPE_KEYS",
    "canonical_dtype",
    "list_profiles",
    "get_profile",
    "load_profiles",
    "parse_profiles",
    "profile_names",
    "template_text",
]
