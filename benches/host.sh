#!/bin/sh
# What a host with many cores or with AVX512-BF16 measures that a 2-core AVX2 machine cannot, in
# one run from prebuilt binaries (no cargo, no network at run time). Build them where cargo is:
#   cargo bench --features peers --bench ch10_matmul --no-run   # prints the ch10 binary's path
#   cargo bench --bench ch09_gpt --no-run                       # prints the ch09 binary's path
#   cargo test --release --test ch11_precision --no-run         # prints the ch11 tests' path
# then copy the three files and the repository, and from the repository root run
#   sh benches/host.sh CH10_BINARY CH09_BINARY CH11_TESTS [1,2,4,8,16]
# In order, each step printing its own table:
#   1. the bf16 product's tests (chapter 11): every path the CPU runs against the exact product
#      within its bound, the same bits on any thread count; the AVX512-BF16 kernel where it runs;
#   2. the bf16 product against our f32 product, one thread (chapter 11's goal: 1.5 times);
#   3. the GPT step's products and two squares, ours against faer, one thread (chapter 10,
#      section 8, goal 1: 0.95 or more);
#   4. benches/threads.sh: the product and the training step on each thread count (goal 2).
# Step 1's failure stops the run (a wrong product's speed means nothing); WRITE=1 is passed on
# to step 4 (see benches/threads.sh).
set -eu
if [ $# -lt 3 ]; then
  echo "usage: sh benches/host.sh CH10_BINARY CH09_BINARY CH11_TESTS [THREAD_LIST]" >&2
  exit 2
fi
ch10=$1
ch09=$2
ch11=$3
list=${4:-1,2,4,8,16}
for b in "$ch10" "$ch09" "$ch11"; do
  [ -x "$b" ] || { echo "error: $b: not an executable file (see the build lines at the top)" >&2; exit 2; }
done
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)
bf16=$(grep -m1 -o -w 'avx512_bf16' /proc/cpuinfo || echo "no avx512_bf16")
echo "host:$cpu, $(nproc) CPUs, $bf16, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u)"
echo "== 1. the bf16 product's tests"
"$ch11" bf16_product bf16_path pair_instruction --test-threads 1
echo "== 2. the bf16 product against our f32 product, one thread"
"$ch10" bf16
echo "== 3. the GPT step's products against faer, one thread"
"$ch10" gpt --samples 7
echo "== 4. threads"
sh "$(dirname "$0")/threads.sh" "$ch10" "$ch09" "$list"
