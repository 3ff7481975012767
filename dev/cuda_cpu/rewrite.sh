#!/bin/sh
# dev/cuda_cpu/rewrite.sh IN OUT: the CUDA source IN with each kernel launch
#     name<<<grid, block[, shared[, stream]]>>>(args)
# turned into a call the host compiler accepts,
#     cuda_cpu::launcher("name", name, grid, block[, shared[, stream]])(args)
# (a template kernel name<args> is launched as name<args> and reported as name)
# and nothing else changed (a #line directive keeps compiler messages on IN's lines). A launch must
# have its name and `<<<...>>>(` on one line, one launch per line; anything else left with `<<<` is
# refused, so no launch can slip through unconverted. Used only for the CPU runtime (doc/cuda.md).
set -eu
[ $# -eq 2 ] || { echo "usage: $0 IN.cu OUT.cu" >&2; exit 2; }
in=$1
out=$2
{
    printf '#line 1 "%s"\n' "$in"
    sed -E 's/([A-Za-z_][A-Za-z0-9_]*)(<[A-Za-z0-9_:, ]*>)?<<<(.*)>>>\(/cuda_cpu::launcher("\1", \1\2, \3)(/' "$in"
} > "$out.tmp"
if grep -n '<<<\|>>>' "$out.tmp" >&2; then
    echo "$0: $in: the launches above were not converted (one launch per line, name<<<...>>>( together)" >&2
    rm -f "$out.tmp"
    exit 1
fi
mv "$out.tmp" "$out"
