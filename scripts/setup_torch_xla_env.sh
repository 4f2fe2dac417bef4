#!/usr/bin/env bash
# Creates .venv-torch-xla: torch 2.9.0 + torch-xla 2.9.0 (CPU via PJRT_DEVICE=CPU) + numpy + this package.
# torch-xla pins torch 2.9.0, whose PyPI wheel pulls the CUDA packages (about 7 GB, a few minutes).
# The main environment keeps torch 2.13 + torchax; mhlo_cost.lower.frontends.torch_xla_frontend runs the
# lowering in this venv as a subprocess (scripts/torch_xla_dump.py).
# Usage: bash scripts/setup_torch_xla_env.sh [VENV_DIR]   (default: .venv-torch-xla in the repository root)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-torch-xla}"
PY="${PYTHON:-python3}"
# Disk it needs: about 7.1 GB installed, and pip unpacks each wheel from a temporary copy beside it.
NEED_GB=${TORCH_XLA_NEED_GB:-12}
start=$(date +%s)
if PJRT_DEVICE=CPU "$VENV/bin/python" -c "import torch, torch_xla" >/dev/null 2>&1; then
    echo "torch-xla venv already at $VENV"
    exit 0
fi
parent="$(dirname "$VENV")"
free_gb=$(( $(df -Pk "$parent" | awk 'NR==2 {print $4}') / 1048576 ))
tmp_gb=$(( $(df -Pk "${TMPDIR:-/tmp}" | awk 'NR==2 {print $4}') / 1048576 ))
if [ "$free_gb" -lt "$NEED_GB" ] || [ "$tmp_gb" -lt 4 ]; then
    echo "setup_torch_xla_env: $free_gb GB free beside $VENV and $tmp_gb GB in ${TMPDIR:-/tmp}:" \
         "torch 2.9 + torch-xla need about $NEED_GB GB and 4 GB; not set up" >&2
    exit 3
fi
# A half-made venv would look usable to the tests (they look for its python): remove it on any failure.
trap 'echo "setup_torch_xla_env: failed; removing the half-made $VENV" >&2; rm -rf "$VENV"' ERR
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
export PIP_NO_CACHE_DIR=1   # no second copy of the GBs of wheels in pip's cache
"$VENV/bin/python" -m pip install --upgrade pip >/dev/null
"$VENV/bin/python" -m pip install --quiet "torch==2.9.0" "torch-xla==2.9.0" numpy
# The package itself, without its jax dependencies: the venv only lowers torch modules.
"$VENV/bin/python" -m pip install --quiet --no-deps -e "$ROOT"
PJRT_DEVICE=CPU "$VENV/bin/python" -c "import torch, torch_xla; print('torch', torch.__version__, 'torch_xla', torch_xla.__version__)"
echo "torch-xla venv ready at $VENV in $(( $(date +%s) - start )) s"
