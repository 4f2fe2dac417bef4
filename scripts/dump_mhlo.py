#!/usr/bin/env python3
"""The old name of ``mhlo-cost lower``: ``python scripts/dump_mhlo.py ARGS`` runs ``mhlo-cost lower ARGS``.

Kept so that existing command lines go on working from a checkout; ``mhlo-cost lower --help`` lists the
options (bundled models, ``--module``, ``--hf``, ``--diffusers``, ``--timm``, inputs, frontends).
"""
from __future__ import annotations

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:  # run from a checkout without the package installed
    sys.path.insert(0, _ROOT)

if __name__ == "__main__":
    from mhlo_cost.cli import main

    sys.exit(main(["lower", *sys.argv[1:]]))
