#!/usr/bin/env bash
# dev/fresh_copy.sh 'COMMAND': a test command as README documents it, run in a fresh copy of the
# repository, so that it must build everything its programs need by itself (a suite of make check).
# The copy holds what a clone would: the files git tracks, and those it does not ignore, as they are
# in the working tree (so a change not yet committed is tested too), and no build output, in a scratch
# directory. The command's output passes through; its last line is the test program's "N passed,
# N failed", and its exit status is the command's. Where the command fails to build, that line is
# missing and the runner counts a failure.
#     dev/fresh_copy.sh 'make test_gpt2cu_cpu && ./test_gpt2cu_cpu'
set -u
[ $# -eq 1 ] || { echo "usage: dev/fresh_copy.sh 'COMMAND'"; exit 2; }
cd "$(dirname "$0")/.." || exit 2
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || { echo "fresh_copy: not a git checkout"; exit 2; }
copy=$(mktemp -d "${TMPDIR:-/tmp}/fresh_copy.XXXXXX") || exit 2
trap 'rm -rf -- "$copy"' EXIT
# files deleted in the working tree but still tracked are left out, as a commit of the tree would
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [ -e "$f" ] && printf '%s\0' "$f"
done | tar --null -T - -cf - | tar -xf - -C "$copy" || { echo "fresh_copy: cannot copy the tree"; exit 2; }
cd "$copy" || exit 2
echo "in a fresh copy: $1"
bash -c "$1"
