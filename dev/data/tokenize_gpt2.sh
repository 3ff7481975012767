#!/usr/bin/env bash
# GPT-2 BPE tokenization into llm.c token shards + a decode table.
#
#   dev/data/tokenize_gpt2.sh [--single | --val VAL.txt] INPUT.txt OUTPUT_PREFIX
#
# Writes OUTPUT_PREFIX_train.bin / OUTPUT_PREFIX_val.bin (90/10 split of the
# token stream; or with --single one OUTPUT_PREFIX.bin; or with --val, INPUT
# as train and VAL.txt as val) and OUTPUT_PREFIX_decode.bin.
# Formats are described at the top of tokenize_gpt2.js.
#
# Needs node + npm. On first use it installs the npm package gpt-3-encoder
# (pinned) into dev/data/node_modules, with its npm cache in
# dev/data/.npm-cache; both are git-ignored. Nothing global is installed.
set -euo pipefail

ENCODER_PKG="gpt-3-encoder"
ENCODER_VERSION="1.1.4"

die() { echo "tokenize_gpt2: FAILED: $*" >&2; exit 1; }
# First two "npm error" lines of a log, on one line (e.g. "code E404 404 Not Found ...").
npm_error() { grep -v 'A complete log' "$1" 2>/dev/null | grep -m 2 'npm error' | sed 's/^npm error //' | tr '\n' ' ' | sed 's/ $//'; }

SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"

command -v node >/dev/null 2>&1 || die "node not found (apt-get install nodejs)"

installed_version() {
  node -e 'try { process.stdout.write(require(process.argv[1]).version) } catch (e) {}' \
    "$SCRIPT_DIR/node_modules/$ENCODER_PKG/package.json" 2>/dev/null || true
}

if [[ "$(installed_version)" != "$ENCODER_VERSION" ]]; then
  command -v npm >/dev/null 2>&1 || die "npm not found (apt-get install npm)"
  echo "tokenize_gpt2: installing $ENCODER_PKG@$ENCODER_VERSION into dev/data/node_modules" >&2
  LOG="$(mktemp "${TMPDIR:-/tmp}/tokenize_gpt2_npm.XXXXXX")"
  # --no-save/--no-package-lock: leave no package.json or lock file behind.
  if ! ( cd "$SCRIPT_DIR" && npm install --prefix "$SCRIPT_DIR" --cache "$SCRIPT_DIR/.npm-cache" \
          --no-save --no-package-lock --no-audit --no-fund --loglevel=error \
          "$ENCODER_PKG@$ENCODER_VERSION" ) >"$LOG" 2>&1; then
    msg="$(npm_error "$LOG")"; rm -f "$LOG"
    die "npm install $ENCODER_PKG@$ENCODER_VERSION ($msg)"
  fi
  rm -f "$LOG"
  [[ "$(installed_version)" == "$ENCODER_VERSION" ]] || die "npm install $ENCODER_PKG@$ENCODER_VERSION left no usable package"
fi

exec node "$SCRIPT_DIR/tokenize_gpt2.js" "$@"
