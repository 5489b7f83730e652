#!/bin/bash
# The benchmark targets of issues 19, 20 and 13 measured side by side with llama.cpp, as their
# texts ask: alternating rounds of ferrox and llama.cpp with the same options, the streaming read
# bandwidth measured around every decode run, and medians over the rounds. Each round prints one
# line per measurement; the summary at the end gives the medians and whether each target holds.
#
#   tools/bench/targets_vs_llama.sh [ROUNDS]            (default 3)
#
# SECTIONS (default "dense depth parallel") chooses what runs:
#  - dense (issue 19): for each of MODELS (SHAPE:TYPE, default the issue's five dense files),
#    `bench -p 512 -n 128` against `llama-bench` with the same options, both pp512 and tg128.
#    Targets: pp512 at least 4x llama.cpp's; tg128 at least 90% of the roofline, the weight
#    bytes a token reads over the bandwidth read just before and just after ferrox's run.
#    MODELS may add gpt-oss-20b:MXFP4_MOE (a 12 GB file, 24 GB of memory with its packed
#    copy): its roofline counts the experts a token uses, and its target is 85%.
#  - depth (issue 20): for each of DEPTH_MODELS (default the 1B Q4_K_M and qwen3-0.6b Q8_0) and
#    cache type (f16, q8_0), `-p 512 -n 32 -d DEPTH` (default 4096) with `-ctk` / `-ctv` on both
#    sides, llama-bench with flash attention off and on (the better of the two counts; a q8_0
#    value cache runs with it on only). Targets:
#    tg32 at least 85% of the roofline (weights plus the keys and values a token reads at that
#    depth) and at least 2x llama.cpp's; pp512 at the depth at least 4x llama.cpp's.
#  - parallel (issue 13): smollm2-135m Q8_0, `bench --parallel 1,16 -npp 128 -ntg 128` against
#    `llama-batched-bench -c 8192 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 1,16`. Targets: the
#    aggregate decode (S_TG) at 16 sequences at least 6x ferrox's at 1 and 5x llama.cpp's at 16.
#
# Models are written once by `ferrox synth` (seed 1) into OUT (default /tmp/targets_vs_llama)
# and reused. T (default 2) is the thread count of every run. FERROX (default
# build/release/ferrox) and LLAMA_BIN (default /tmp/llama.cpp/build/bin: llama-bench and
# llama-batched-bench built from source with CMake) locate the programs. The machine's speed
# drifts by 10-25% from minute to minute (often more on a shared host): compare the figures of
# one run of this script, never figures from different hours.
set -euo pipefail
rounds=${1:-3}
sections=${SECTIONS:-dense depth parallel}
models=${MODELS:-smollm2-135m:Q8_0 qwen3-0.6b:Q8_0 llama-3.2-1b:Q4_K_M llama-3.2-1b:Q8_0 \
llama-3.2-1b:IQ4_XS}
depth_models=${DEPTH_MODELS:-llama-3.2-1b:Q4_K_M qwen3-0.6b:Q8_0}
depth=${DEPTH:-4096}
t=${T:-2}
ferrox=${FERROX:-build/release/ferrox}
llama=${LLAMA_BIN:-/tmp/llama.cpp/build/bin}
out=${OUT:-/tmp/targets_vs_llama}
mkdir -p "$out"
results="$out/results.txt" # one "key value" line per measurement, for the summary
: >"$results"

model_path() { echo "$out/${1%%:*}.${1#*:}.gguf"; }

ensure_model() {
    local path
    path=$(model_path "$1")
    [ -f "$path" ] || "$ferrox" synth --shape "${1%%:*}" --type "${1#*:}" -o "$path" -t "$t" >&2
    echo "$path"
}

# The streaming read bandwidth in GB/s on T threads, as `ferrox bench-kernels` measures it.
bandwidth() {
    "$ferrox" bench-kernels -t q8_0 -s 576x1536 -r 1 -j "$t" --runs 1 2>/dev/null |
        awk '/^bandwidth/ { print $4 }'
}

# A uint32 metadata value of a model (KEY after the architecture's prefix), empty when absent.
meta_u32() {
    "$ferrox" inspect "$1" | awk -v k="$2" '$1 ~ "\\." k "$" && $2 == "uint32" { print $3 }'
}

# The weight bytes a decode token reads: every tensor but the token embedding, which is read
# whole only when it is also the output projection (no output.weight); of a mixture of experts'
# routed expert tensors (*_exps.*) the share of the experts a token uses (expert_used_count of
# expert_count).
weight_bytes() {
    local used count
    used=$(meta_u32 "$1" expert_used_count)
    count=$(meta_u32 "$1" expert_count)
    "$ferrox" inspect "$1" | awk -v used="${used:-0}" -v count="${count:-0}" '
        $1 == "token_embd.weight" { embd = $(NF-1) }
        $1 == "output.weight" { untied = 1 }
        $1 ~ /_exps\./ { exps += $(NF-1) }
        $1 == "tensor" && $2 == "bytes" { total = $3 }
        END {
            used_exps = count > 0 ? exps * used / count : 0
            printf "%.0f\n", total - (untied ? embd : 0) - exps + used_exps
        }'
}

# "moe" for a mixture of experts (its decode target is 85% of the roofline), else "dense".
kind() {
    [ -n "$(meta_u32 "$1" expert_count)" ] && echo moe || echo dense
}

# The bytes of keys and values a decode token reads at depth D with cache type TYPE.
kv_bytes() {
    local path=$1 d=$2 type=$3 layers heads_kv dk dv
    layers=$(meta_u32 "$path" block_count)
    heads_kv=$(meta_u32 "$path" attention.head_count_kv)
    dk=$(meta_u32 "$path" attention.key_length)
    dv=$(meta_u32 "$path" attention.value_length)
    if [ -z "$dk" ]; then # head size = embedding / heads
        dk=$(($(meta_u32 "$path" embedding_length) / $(meta_u32 "$path" attention.head_count)))
    fi
    dv=${dv:-$dk}
    awk -v l="$layers" -v h="$heads_kv" -v d="$d" -v e=$((dk + dv)) -v type="$type" 'BEGIN {
        per = type == "f16" ? 2 : type == "q8_0" ? 34 / 32 : 4
        printf "%.0f\n", l * h * d * e * per }'
}

# pp and tg t/s of `ferrox bench -o csv` or `llama-bench -o csv` (avg_ts, the last column but
# one; pp rows come first).
pp_tg() { awk -F, 'NR > 1 { gsub(/"/, ""); printf "%s ", $(NF-1) }'; }

record() { echo "$1 $2" >>"$results"; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { print a / b }'; }
larger() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "" || b > a ? b : a) }'; }

# The roofline in t/s: BYTES a token over the mean of the bandwidth readings B0 and B1 (GB/s).
roofline() {
    awk -v b0="$1" -v b1="$2" -v bytes="$3" 'BEGIN { print (b0 + b1) / 2 * 1e9 / bytes }'
}

# Stops with a message when a bench printed no figure (a file it cannot load, a bad option).
need() {
    local what=$1 v
    shift
    for v in "$@"; do
        [ -n "$v" ] || { echo "$what printed no figure" >&2; exit 1; }
    done
}

dense_round() {
    local m=$1 r=$2 path kind bytes b0 b1 fpp ftg lpp ltg roof
    path=$(model_path "$m")
    kind=$(kind "$path")
    bytes=$(weight_bytes "$path")
    b0=$(bandwidth)
    read -r fpp ftg <<<"$("$ferrox" bench -m "$path" -p 512 -n 128 -t "$t" -r 1 -o csv \
        2>/dev/null | pp_tg)"
    b1=$(bandwidth)
    read -r lpp ltg <<<"$("$llama/llama-bench" -m "$path" -p 512 -n 128 -t "$t" -r 1 -o csv \
        2>/dev/null | pp_tg)"
    need "ferrox bench or llama-bench on $path" "$fpp" "$ftg" "$lpp" "$ltg" "$b0" "$b1"
    roof=$(roofline "$b0" "$b1" "$bytes")
    awk -v m="$m" -v r="$r" -v fpp="$fpp" -v ftg="$ftg" -v lpp="$lpp" -v ltg="$ltg" \
        -v b0="$b0" -v b1="$b1" -v roof="$roof" 'BEGIN {
        printf "%s round %d: pp512 ferrox %.1f llama.cpp %.1f (x%.2f); tg128 ferrox %.1f " \
               "llama.cpp %.1f (x%.2f); bandwidth %.1f, %.1f GB/s, roofline %.1f t/s, " \
               "share %.0f%%\n",
               m, r, fpp, lpp, fpp / lpp, ftg, ltg, ftg / ltg, b0, b1, roof, 100 * ftg / roof }'
    record "$kind:$m:pp_ratio" "$(ratio "$fpp" "$lpp")"
    record "$kind:$m:tg_share" "$(ratio "$ftg" "$roof")"
}

depth_round() {
    local m=$1 type=$2 r=$3 path bytes b0 b1 fpp ftg lpp ltg pp tg fa roof
    path=$(model_path "$m")
    bytes=$(($(weight_bytes "$path") + $(kv_bytes "$path" "$depth" "$type")))
    b0=$(bandwidth)
    read -r fpp ftg <<<"$("$ferrox" bench -m "$path" -p 512 -n 32 -d "$depth" -ctk "$type" \
        -ctv "$type" -t "$t" -r 1 -o csv 2>/dev/null | pp_tg)"
    b1=$(bandwidth)
    need "ferrox bench -d $depth -ctk $type on $path" "$fpp" "$ftg" "$b0" "$b1"
    lpp='' ltg=''
    for fa in 0 1; do
        read -r pp tg <<<"$("$llama/llama-bench" -m "$path" -p 512 -n 32 -d "$depth" -ctk "$type" \
            -ctv "$type" -fa "$fa" -t "$t" -r 1 -o csv 2>/dev/null | pp_tg)"
        # llama.cpp takes a quantized V cache only with flash attention: q8_0 has one figure
        [ -n "$pp" ] || continue
        lpp=$(larger "$lpp" "$pp")
        ltg=$(larger "$ltg" "$tg")
    done
    need "llama-bench -ctk $type, flash attention off and on, on $path" "$lpp" "$ltg"
    roof=$(roofline "$b0" "$b1" "$bytes")
    awk -v m="$m" -v c="$type" -v d="$depth" -v r="$r" -v fpp="$fpp" -v ftg="$ftg" \
        -v lpp="$lpp" -v ltg="$ltg" -v b0="$b0" -v b1="$b1" -v roof="$roof" 'BEGIN {
        printf "%s %s cache, depth %d, round %d: pp512 ferrox %.1f llama.cpp %.1f (x%.2f); " \
               "tg32 ferrox %.1f llama.cpp %.1f (x%.2f); bandwidth %.1f, %.1f GB/s, roofline " \
               "%.1f t/s, share %.0f%%\n",
               m, c, d, r, fpp, lpp, fpp / lpp, ftg, ltg, ftg / ltg, b0, b1, roof,
               100 * ftg / roof }'
    record "depth:$m:$type:pp_ratio" "$(ratio "$fpp" "$lpp")"
    record "depth:$m:$type:tg_ratio" "$(ratio "$ftg" "$ltg")"
    record "depth:$m:$type:tg_share" "$(ratio "$ftg" "$roof")"
}

# S_TG of the rows with pl 1 and pl 16 of a --parallel / llama-batched-bench jsonl.
stg_1_16() {
    awk '{ pl = $0; sub(/.*"pl": ?/, "", pl); sub(/[,}].*/, "", pl)
           s = $0; sub(/.*"speed_tg": ?/, "", s); sub(/[,}].*/, "", s)
           v[pl] = s } END { print v[1], v[16] }'
}

parallel_round() {
    local r=$1 path f1 f16 l1 l16
    path=$(model_path smollm2-135m:Q8_0)
    read -r f1 f16 <<<"$("$ferrox" bench -m "$path" --parallel 1,16 -npp 128 -ntg 128 -t "$t" \
        -o json 2>/dev/null | stg_1_16)"
    read -r l1 l16 <<<"$("$llama/llama-batched-bench" -m "$path" -c 8192 -b 2048 -ub 512 \
        -npp 128 -ntg 128 -npl 1,16 -t "$t" --output-format jsonl 2>/dev/null | stg_1_16)"
    need "ferrox bench --parallel or llama-batched-bench on $path" "$f1" "$f16" "$l1" "$l16"
    awk -v r="$r" -v f1="$f1" -v f16="$f16" -v l1="$l1" -v l16="$l16" 'BEGIN {
        printf "smollm2-135m:Q8_0 round %d: S_TG ferrox PL1 %.1f PL16 %.1f (x%.2f its PL1); " \
               "llama.cpp PL1 %.1f PL16 %.1f; PL16 x%.2f llama.cpp\n",
               r, f1, f16, f16 / f1, l1, l16, f16 / l16 }'
    record "parallel:own_ratio" "$(ratio "$f16" "$f1")"
    record "parallel:llama_ratio" "$(ratio "$f16" "$l16")"
}

has() { case " $sections " in *" $1 "*) return 0 ;; esac; return 1; }

has dense && for m in $models; do ensure_model "$m" >/dev/null; done
has depth && for m in $depth_models; do ensure_model "$m" >/dev/null; done
has parallel && ensure_model smollm2-135m:Q8_0 >/dev/null

for r in $(seq 1 "$rounds"); do
    if has dense; then for m in $models; do dense_round "$m" "$r"; done; fi
    if has depth; then
        for m in $depth_models; do for c in f16 q8_0; do depth_round "$m" "$c" "$r"; done; done
    fi
    if has parallel; then parallel_round "$r"; fi
done

# Medians over the rounds, and each target's verdict.
echo "--- medians of $rounds round(s)"
sort -k1,1 -k2,2g "$results" | awk '
    function flush(  med, goal) {
        if (key == "") return
        med = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
        goal = key ~ /pp_ratio$/ ? 4 : key ~ /depth.*tg_ratio$/ ? 2 \
             : key ~ /(depth|moe).*tg_share$/ ? 0.85 : key ~ /tg_share$/ ? 0.90 \
             : key ~ /own_ratio$/ ? 6 : 5
        printf "%-44s median %6.2f  target %4.2f  %s\n", key, med, goal,
               (med >= goal ? "met" : "not met")
    }
    $1 != key { flush(); key = $1; n = 0 }
    { v[++n] = $2 } # ascending within a key (sorted above)
    END { flush() }'
