#!/usr/bin/env bash
# Creates .venv-torch-xla: torch 2.9.0 + torch-xla 2.9.0 (CPU via PJRT_DEVICE=CPU) + numpy + this package.
# torch-xla pins torch 2.9.0, whose PyPI wheel pulls the CUDA packages (about 7 GB, a few minutes).
# The main environment keeps torch 2.13 + torchax; mhlo_cost.frontends.torch_xla_frontend runs the
# lowering in this venv as a subprocess (scripts/torch_xla_dump.py).
# Usage: bash scripts/setup_torch_xla_env.sh [VENV_DIR]   (default: .venv-torch-xla in the repository root)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-torch-xla}"
PY="${PYTHON:-python3}"
start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --upgrade pip >/dev/null
"$VENV/bin/python" -m pip install --quiet "torch==2.9.0" "torch-xla==2.9.0" numpy
# The package itself, without its jax dependencies: the venv only lowers torch modules.
"$VENV/bin/python" -m pip install --quiet --no-deps -e "$ROOT"
PJRT_DEVICE=CPU "$VENV/bin/python" -c "import torch, torch_xla; print('torch', torch.__version__, 'torch_xla', torch_xla.__version__)"
echo "torch-xla venv ready at $VENV in $(( $(date +%s) - start )) s"
