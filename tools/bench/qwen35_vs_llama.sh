#!/bin/bash
# Qwen3.5 (Gated DeltaNet + gated attention, issue 16), ferrox against llama.cpp on the synth
# shapes, in alternating rounds of `ferrox bench` and `llama-bench` with the same options; each
# round prints both engines' prefill (pp) and decode (tg) t/s and the ratio ferrox / llama.cpp.
#
#   tools/bench/qwen35_vs_llama.sh [ROUNDS]            (default 3)
#
# MODELS (default "qwen35-0.8b:Q8_0 qwen35moe-12l-32e:Q4_K_M") are SHAPE:TYPE pairs, written once
# by `ferrox synth` into OUT (default /tmp/qwen35_vs_llama) and reused by later runs. P, N and T
# (default 512, 128, 2) are -p, -n and -t of both benches, one repetition per round (-r 1, after
# each bench's own warm-up). FERROX (default build/release/ferrox) and LLAMA_BIN (default
# /tmp/llama.cpp/build/bin) locate the programs. Both engines otherwise keep their defaults: an
# f16 KV cache, and llama-bench chooses flash attention itself (-fa auto).
#
# Where prefill time goes (LAYERS=1; needs perf): after the rounds, one prefill of P tokens per
# model and engine under `perf record` (PERF_FREQ samples/s, default 499), and from its report:
#  - ferrox, per layer kind: the inclusive samples of fx_delta_block_on_worker (Gated DeltaNet
#    layers) and fx_attn_block_on_worker (gated attention) over those of fx_forward_on_worker,
#    each with its projections, norms and waits at the workers' barriers (the FFN or MoE block
#    after either is counted apart), times the prefill's time per token (from the same run's
#    t/s), over the number of layers of the kind: microseconds per token per layer. The call
#    chains come from frame pointers, so this runs a second ferrox built with them
#    (build/profile, made here with `make BUILD=build/profile`): DWARF unwinding cannot climb
#    out of the packed matmul's 59 KB stack frame, and would credit no layer with its matmuls.
#  - both engines: the self samples of the kernels only one kind of layer runs, the delta-rule
#    recurrence with the causal conv (ferrox's *delta_rows* and *conv_rows*, llama.cpp's
#    ggml_compute_forward_gated_delta_net and _ssm_conv) against attention itself (ferrox's
#    fx_attn_run and fx_attn_finish, llama.cpp's flash_attn_ext or soft_max): for ferrox as a
#    share of its forward pass, for llama.cpp of the samples in its operators (libggml-cpu; its
#    workers' waits in OpenMP, between operators, left out). llama.cpp's graph does not say which
#    layer a matmul belongs to, so only these kernels compare across the engines.
set -euo pipefail
rounds=${1:-3}
models=${MODELS:-qwen35-0.8b:Q8_0 qwen35moe-12l-32e:Q4_K_M}
p=${P:-512} n=${N:-128} t=${T:-2}
ferrox=${FERROX:-build/release/ferrox}
llama=${LLAMA_BIN:-/tmp/llama.cpp/build/bin}
out=${OUT:-/tmp/qwen35_vs_llama}
mkdir -p "$out"

model_path() { echo "$out/${1%%:*}.${1#*:}.gguf"; }

# t/s of the pp and tg rows of a csv from either bench (avg_ts is the last column but one).
pp_tg() { awk -F, 'NR > 1 { gsub(/"/, ""); printf "%s ", $(NF-1) }'; }

for m in $models; do
    path=$(model_path "$m")
    [ -f "$path" ] || "$ferrox" synth --shape "${m%%:*}" --type "${m#*:}" -o "$path" -t "$t"
    # llama-bench exits 0 with no rows for a file it cannot load: check that it ran.
    rows=$("$llama/llama-bench" -m "$path" -p 8 -n 0 -t "$t" -r 1 -o csv 2>"$out/load.err" | wc -l)
    [ "$rows" -ge 2 ] || { echo "llama-bench cannot run $path:"; tail -5 "$out/load.err"; exit 1; }
done

for r in $(seq 1 "$rounds"); do
    for m in $models; do
        path=$(model_path "$m")
        read -r fpp ftg <<<"$("$ferrox" bench -m "$path" -p "$p" -n "$n" -t "$t" -r 1 -o csv \
            2>/dev/null | pp_tg)"
        read -r lpp ltg <<<"$("$llama/llama-bench" -m "$path" -p "$p" -n "$n" -t "$t" -r 1 \
            -o csv 2>/dev/null | pp_tg)"
        awk -v m="$m" -v r="$r" -v p="$p" -v n="$n" -v fpp="$fpp" -v ftg="$ftg" -v lpp="$lpp" \
            -v ltg="$ltg" 'BEGIN {
            printf "%s round %d: pp%d ferrox %.2f llama.cpp %.2f t/s (x%.2f), " \
                   "tg%d ferrox %.2f llama.cpp %.2f t/s (x%.2f)\n",
                   m, r, p, fpp, lpp, fpp / lpp, n, ftg, ltg, ftg / ltg }'
    done
done

[ "${LAYERS:-0}" = 1 ] || exit 0

profiler=build/profile/ferrox
make -s -j2 BUILD=build/profile CFLAGS=-fno-omit-frame-pointer "$profiler"

# Inclusive shares: lines of children%, self%, [.], symbol (-g none: no call chains printed).
children() { perf report -i "$1" --children --stdio --sort symbol -g none 2>/dev/null | grep '%'; }
inclusive() { awk -v s="$2" '$4 == s { sub(/%/, "", $1); print $1; exit }' <"$1"; }
# Self shares: lines of self%, library, [.], symbol; summed over the symbols matching a regex,
# or over a library's.
selfs() { perf report -i "$1" --no-children --stdio --sort dso,symbol 2>/dev/null | grep '%'; }
self_sum() { awk -v re="$2" '$0 ~ re { sub(/%/, "", $1); x += $1 } END { print x + 0 }' <"$1"; }
dso_sum() { awk -v re="$2" '$2 ~ re { sub(/%/, "", $1); x += $1 } END { print x + 0 }' <"$1"; }
# (awk reads to the end: with pipefail, a closed pipe would fail the script)
key_u32() { "$ferrox" inspect "$1" | awk -v k="$2" '$1 ~ "\\." k "$" { print $3 }'; }
freq=${PERF_FREQ:-499}

for m in $models; do
    path=$(model_path "$m")
    blocks=$(key_u32 "$path" block_count)
    nextn=$(key_u32 "$path" nextn_predict_layers)
    n_delta=$("$ferrox" inspect "$path" | grep -c '\.ssm_a ')
    n_attn=$((blocks - nextn - n_delta))

    perf record -q -F "$freq" --call-graph fp -o "$out/ferrox.perf" -- \
        "$profiler" bench -m "$path" -p "$p" -n 0 -t "$t" -r 1 -o csv >"$out/ferrox.csv" 2>/dev/null
    children "$out/ferrox.perf" >"$out/ferrox.children"
    selfs "$out/ferrox.perf" >"$out/ferrox.self"
    tps=$(pp_tg <"$out/ferrox.csv")
    fwd=$(inclusive "$out/ferrox.children" fx_forward_on_worker)
    for kind in delta attn ffn moe; do
        share=$(inclusive "$out/ferrox.children" "fx_${kind}_block_on_worker")
        [ -n "$share" ] || continue # a dense model has no MoE blocks, and the reverse
        case $kind in
        delta) count=$n_delta ;;
        attn) count=$n_attn ;;
        *) count=$((n_delta + n_attn)) ;;
        esac
        awk -v m="$m" -v p="$p" -v k="$kind" -v s="$share" -v f="$fwd" -v tps="$tps" \
            -v c="$count" 'BEGIN {
            printf "%s ferrox pp%d (%.1f t/s under perf): %s blocks %.1f%% of the forward pass, " \
                   "%d layers, %.0f us per token per layer\n",
                   m, p, tps, k, 100 * s / f, c, 1e6 / tps * (s / f) / c }'
    done
    awk -v m="$m" -v f="$fwd" -v d="$(self_sum "$out/ferrox.self" 'delta_rows|conv_rows')" \
        -v a="$(self_sum "$out/ferrox.self" 'fx_attn_(run|finish)')" 'BEGIN {
        printf "%s ferrox kernels: recurrence+conv %.1f%%, attention %.1f%% of the forward " \
               "pass\n", m, 100 * d / f, 100 * a / f }'

    # llama.cpp's workers wait in OpenMP (libgomp) between operators: its share is left out.
    perf record -q -F "$freq" -o "$out/llama.perf" -- \
        "$llama/llama-bench" -m "$path" -p "$p" -n 0 -t "$t" -r 1 -o csv >"$out/llama.csv" 2>/dev/null
    selfs "$out/llama.perf" >"$out/llama.self"
    awk -v m="$m" -v p="$p" -v tps="$(pp_tg <"$out/llama.csv")" \
        -v c="$(dso_sum "$out/llama.self" libggml-cpu)" \
        -v d="$(self_sum "$out/llama.self" 'gated_delta_net|ssm_conv')" \
        -v a="$(self_sum "$out/llama.self" 'flash_attn_ext|soft_max')" 'BEGIN {
        printf "%s llama.cpp pp%d (%.1f t/s under perf) kernels: recurrence+conv %.1f%%, " \
               "attention %.1f%% of its operators (libggml-cpu)\n", m, p, tps, 100 * d / c, 100 * a / c }'
done
