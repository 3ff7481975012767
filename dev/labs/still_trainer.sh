#!/usr/bin/env bash
# A degenerate run, for testing the labs' drivers (dev/labs/lab_check_broken.py --drivers): ./train_gpt2
# with the flags a lab gives it, except learning rate 0, so no weight moves (AdamW at lr 0 moves
# nothing, weight decay included), and at most 12 steps, so a probe the lab asks for every 50 steps
# exists at step 0 alone (a series with one point) and one it reads at step 50 does not exist. For
# speed, validation is one batch of a 4 KB head of the validation text (unless the lab names its own -j).
#   dev/labs/llm_labs.py NAME --bin dev/labs/still_trainer.sh --out DIR --runs DIR/runs
set -euo pipefail
ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)"
val="${TMPDIR:-/tmp}/still_trainer_val.txt"
if [[ ! -s "$val" ]]; then
  head -c 4096 "$ROOT/data/moby_val.txt" >"$val.$$" && mv -f "$val.$$" "$val"
fi
args=() lr=0 j=0
while (( $# )); do
  case "$1" in
    -l) args+=(-l 0); lr=1; shift 2 ;;
    -x) args+=(-x "$(( $2 < 12 ? $2 : 12 ))"); shift 2 ;;
    -m) args+=(-m 1); shift 2 ;;
    -j) args+=(-j "$2"); j=1; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
(( lr )) || args+=(-l 0)
(( j )) || args+=(-j "$val")
exec "$ROOT/train_gpt2" "${args[@]}"
