#!/bin/bash
# Prompt-lookup speculation, ferrox against llama.cpp, one thread, in alternating rounds:
# ferrox run --spec none, ferrox run --spec ngram, llama-lookup, and llama-bench's plain decode
# after as many prompt tokens as llama-lookup counted (docs/PERFORMANCE.md, issue 15).
#
#   tools/bench/spec_vs_llama.sh NAME MODEL PROMPT_FILE N_TOKENS ROUNDS
#
# FERROX (default build/release/ferrox) and LLAMA_BIN (default /tmp/llama.cpp/build/bin, with
# llama-lookup and llama-bench built) locate the programs; outputs go to OUT (default
# /tmp/spec_vs_llama). Each round also checks that ferrox's two texts are byte-identical.
set -euo pipefail
name=$1 model=$2 prompt=$3 n=$4 rounds=$5
ferrox=${FERROX:-build/release/ferrox}
llama=${LLAMA_BIN:-/tmp/llama.cpp/build/bin}
out=${OUT:-/tmp/spec_vs_llama}
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
    for mode in none ngram; do
        "$ferrox" run -m "$model" -f "$prompt" -n "$n" --temp 0 --ignore-eos -t 1 -c 2048 \
            --spec "$mode" --draft-max 16 -v >"$out/$name.$mode.out" 2>"$out/$name.$mode.err"
        tps=$(grep -o "generated: .* (\([0-9.]*\) tokens/s)" "$out/$name.$mode.err" |
            sed 's/.*(\([0-9.]*\) tokens.*/\1/')
        echo "$name ferrox-$mode round $r: $tps tok/s $(grep -o 'acceptance.*' "$out/$name.$mode.err" || true)"
    done
    cmp -s "$out/$name.none.out" "$out/$name.ngram.out" || echo "$name round $r: TEXTS DIFFER"
    "$llama/llama-lookup" -m "$model" -f "$prompt" -n "$n" --temp 0 -t 1 -c 2048 \
        --spec-draft-n-max 16 --ignore-eos >"$out/$name.llama.out" 2>"$out/$name.llama.err"
    echo "$name llama-lookup round $r: $(grep -o 'decoded.*' "$out/$name.llama.err")" \
        "$(grep -o 'accept  .*' "$out/$name.llama.err")"
    n_prompt=$(grep -o "encoded *[0-9]*" "$out/$name.llama.err" | grep -o "[0-9]*$")
    tg=$("$llama/llama-bench" -m "$model" -p 0 -n "$n" -d "$n_prompt" -t 1 -o csv 2>/dev/null |
        tail -1 | awk -F, '{print $(NF-1)}')
    echo "$name llama-bench tg$n at depth $n_prompt round $r: $tg"
done
