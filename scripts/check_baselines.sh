#!/usr/bin/env bash
# Regenerate the bundled example and STDiT3 IR with `mhlo-cost lower` and check their per-block FLOP
# counts against the baselines committed in tests/fixtures/baselines/.
#   bash scripts/check_baselines.sh            # exit 1 and a table when a count moved
#   bash scripts/check_baselines.sh --update   # rewrite the baselines, saying what changed
set -euo pipefail
cd "$(dirname "$0")/.."
mode=check
if [ "${1:-}" = "--update" ]; then mode=update; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

names=(gpt_small stdit3_204_640_360 stdit3_small_megatron4)
args=("--model gpt"
      "--model stdit3 --shape 204_640_360"
      "--model stdit3 --small --heads 4 --parallel megatron --devices 4")
status=0
for i in "${!names[@]}"; do
  name=${names[$i]}
  # shellcheck disable=SC2086
  mhlo-cost lower ${args[$i]} -o "$tmp/$name.mlir" -q
  base=tests/fixtures/baselines/$name.flops.json
  if [ "$mode" = update ]; then
    mhlo-cost baseline "$tmp/$name.mlir" -o "$base" --update -q
  else
    if mhlo-cost check "$tmp/$name.mlir" --baseline "$base" -q; then
      echo "ok   $name"
    else
      echo "FAIL $name (refresh with: bash scripts/check_baselines.sh --update)"
      status=1
    fi
  fi
done
exit $status
