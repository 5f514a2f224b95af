#!/bin/bash
# int8 against torch fp32: NCBI-disease test F1 of each fine-tuned run folder given, paired (docs/benchmarks.md,
# "Serving on a CPU"). Usage: bench/int8_f1_pairs.sh TEST_FILE RUN [RUN ...]   (prints: run fp32 int8 difference)
set -euo pipefail
test_file=$1; shift
f1() { greenadapt evaluate -m "$1" "$test_file" -q --json "${@:2}" | python -c "import json,sys; r=json.load(sys.stdin); print(f\"{100*r['scores'][r['headline_pool']]['f1']:.2f}\")"; }
for run in "$@"; do
  fp32=$(GREENADAPT_HEARTBEAT=0 f1 "$run" --precision fp32)
  int8=$(GREENADAPT_HEARTBEAT=0 f1 "$run" --runtime onnx --quantize int8)
  echo "$run $fp32 $int8 $(python -c "print(f'{$int8 - $fp32:+.2f}')")"
done
