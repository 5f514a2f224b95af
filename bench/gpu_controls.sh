#!/usr/bin/env bash
# The controls of issue 64 (bench/quality_controls.sh gpu) on a GPU machine that has neither ../shared nor the MiniLM
# package, in one command of at most 10 minutes, with what a cut run keeps brought back.
#
# Here, before the calls (every path below is ignored by git, so it travels only when a call carries it):
#   bench/carry_model.sh pack "$MINILM" carried/pack     # then move part-aa and the small files to carried/minilm-a,
#                                                        # the other parts and the .sha256 to carried/minilm-b
#   carried/data/ner/<set>/{train_dev,test}.tsv          # the NER sets
#   carried/adapted/{w2v,align}                          # the CPU screen's word2vec model and map (the same rows)
# Each carried folder goes in its own call (64 MiB a call). A call's carried paths replace the earlier calls' there, so
# every call but the last keeps what it brought outside the checkout, and the last one runs, from the checkout's root:
#   bench/gpu_controls.sh stash                                          # each earlier call (its carried folder only)
#   OUT=<folder brought back> BUDGET=480 SEEDS=1,2,3,4,5 bench/gpu_controls.sh   # the last: takes the stash back first
# ARMS chooses the arms (bench/quality_controls.sh); MORE_SEEDS (e.g. 1,2,3,4,5 after SEEDS=1,2,3) resumes with more
# seeds in what is left of BUDGET, keeping the finished compare.json of SEEDS if it is cut; CUDA_TESTS runs those
# pytest ids under -m cuda afterwards.
# STASH (default /tmp/greenadapt-carried) is where they wait; the machine must stay warm between the calls.
#
# Under $OUT: summary.txt (machine, versions, each set's table from `greenadapt info`), compare-<set>.json,
# controls.log, runs.tar.gz (every run folder without its weights: predictions, manifests, metrics, logs), split into
# 15 MB parts where larger.
set -uo pipefail
STASH=${STASH:-/tmp/greenadapt-carried}
if [[ ${1:-} == stash ]]; then
  mkdir -p "$STASH" && cp -r carried/* "$STASH"/ && du -sh "$STASH"/*
  exit
fi
if [[ -d $STASH ]]; then mkdir -p carried && cp -rn "$STASH"/* carried/; fi
OUT=${OUT:-gpu-controls}
BUDGET=${BUDGET:-480}
PY=${PY:-python3}
mkdir -p "$OUT" carried/minilm
start=$SECONDS
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  $PY -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
  echo "cpus $(nproc)"; } > "$OUT/summary.txt" 2>&1
if [[ ! -f carried/minilm/model.safetensors ]]; then
  cp carried/minilm-*/* carried/minilm/ && bench/carry_model.sh unpack carried/minilm || { echo "MiniLM did not reassemble" >> "$OUT/summary.txt"; exit 1; }
fi
export WORK=${WORK:-study-controls}
adapted=$WORK/work/carried/model
mkdir -p "$adapted"
[[ -d $adapted/w2v ]] || cp -r carried/adapted/w2v carried/adapted/align "$adapted/"
export DATA=carried/data MINILM=carried/minilm ADAPTED=$adapted GREENADAPT="$PY -m greenadapt" PY
# every arm to the end even if one run learns nothing: the lease is too short to rerun what fail-fast would stop
export GREENADAPT_KEEP_GOING=1 SETS=${SETS:-NCBI-disease BC5CDR-disease} PARALLEL=${PARALLEL:-8} CONTROLS=${CONTROLS-}
[[ -n ${ARMS:-} ]] && export ARMS
# SEEDS first (its compare.json written when whole), then MORE_SEEDS (a superset) with what is left of BUDGET
for seeds in ${SEEDS:-1,2,3,4,5} ${MORE_SEEDS:-}; do
  left=$(( BUDGET - (SECONDS - start) ))
  (( left > 30 )) || break
  SEEDS=$seeds timeout "$left" bench/quality_controls.sh gpu >> "$OUT/controls.log" 2>&1
  echo "quality_controls.sh gpu: exit $? after $(( SECONDS - start )) s (SETS=$SETS SEEDS=$seeds ARMS=${ARMS:-default} PARALLEL=$PARALLEL)" >> "$OUT/summary.txt"
done
if [[ -n ${CUDA_TESTS:-} ]]; then  # e.g. CUDA_TESTS=tests/test_cuda.py::test_two_ddp_processes, with CUDA_TESTS_TIMEOUT seconds
  timeout "${CUDA_TESTS_TIMEOUT:-90}" $PY -m pytest -m cuda -v --tb=short -p no:cacheprovider $CUDA_TESTS > "$OUT/cuda-tests.log" 2>&1
  echo "pytest -m cuda $CUDA_TESTS: exit $?" >> "$OUT/summary.txt"
fi
for set in $SETS; do
  cp "$WORK/compare-$set.json" "$OUT/" 2>/dev/null
  { echo "== $set"; timeout 60 $PY -m greenadapt info "$WORK/finetune/$set" 2>&1; } >> "$OUT/summary.txt"
done
tar -czf "$OUT/runs.tar.gz" --exclude='*.safetensors' --exclude='tokenizer.json' --exclude='vocab.txt' \
    --exclude='checkpoint*' -C "$WORK" finetune
if (( $(stat -c %s "$OUT/runs.tar.gz") > 15000000 )); then
  split -b 15M "$OUT/runs.tar.gz" "$OUT/runs.tar.gz.part-" && rm "$OUT/runs.tar.gz"
fi
ls -la "$OUT" >> "$OUT/summary.txt"
