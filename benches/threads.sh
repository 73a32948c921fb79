#!/bin/sh
# The thread benchmarks from prebuilt binaries (no cargo, no network at run time), for a host with
# many cores. Build them where cargo is, then copy the two files and the repository:
#   cargo bench --features peers --bench ch10_matmul --no-run   # prints the ch10 binary's path
#   cargo bench --bench ch09_gpt --no-run                       # prints the ch09 binary's path
# Run from the repository root:  sh benches/threads.sh CH10_BINARY CH09_BINARY [1,2,4,8,16]
# With WRITE=1 it also saves data/ch10_threads.csv and rewrites the appendix's sections (the
# binaries write into the repository they were built from: run them from the same path, or copy
# data/ch10_threads.csv back and run `cargo bench --features peers --bench ch10_matmul -- --redraw`).
set -eu
ch10=$1
ch09=$2
list=${3:-1,2,4,8,16}
write=""
[ "${WRITE:-0}" = 1 ] && write="--write"
echo "host: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
"$ch10" --threads "$list" --samples 7 $write
"$ch09" --threads "$list" --rounds "${ROUNDS:-1}" $write
