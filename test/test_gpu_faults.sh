#!/usr/bin/env bash
# The kernel checks catch broken kernels: dev/gpu/gpu_check.cu, built for the CPU emulator with a
# set of planted faults, each a bug of the kind a real one would be (a term left out, a bound one
# short, a scale forgotten, a stage read before it landed), must fail the check that covers that
# kernel, and pass with no fault planted. One build holds them all: in the emulator's translation
# of gpu_check (build/emu/gpu_check.cpp, every gpt2/gpu header inlined) each fault's ORIGINAL text,
# which must occur exactly once, becomes
#     (emu_plant(K) ? (FAULTY) : (ORIGINAL))          an expression
#     if (emu_plant(K)) { FAULTY } else { ORIGINAL }   a statement (ORIGINAL ends with ';')
# on the same line (its number unchanged), and EMU_PLANT=K at run time picks fault K. A fault whose text no longer
# occurs once fails this test: update the table with the kernel.
set -u
. "$(dirname "$0")/lib.sh"
if ! command -v "${CXX:-g++}" >/dev/null; then echo "skipped: no C++ compiler (${CXX:-g++})"; exit 77; fi
make -s build/emu/gpu_check.cpp || { echo "FAIL: the emulator's translation of gpu_check"; exit 1; }
dir=build/faults
mkdir -p $dir
export ASAN_OPTIONS=detect_leaks=0

# NAME|CHECK|ORIGINAL|FAULTY|ENV (the check is gpu_check's name for it, run --quick; ENV: variables
# for the run, e.g. a schedule that exposes a missing wait)
faults=$(cat <<'EOF'
norm_drops_a_term|clip|(double)v.z * v.z + (double)v.w * v.w|(double)v.z * v.z|
norm_second_load_dropped|clip|squares_of(a) + squares_of(b)|squares_of(a)|
norm_unscaled_factor|clip|clip_factor(s->norm, grad_scale, max_norm)|clip_factor(s->norm, 1.0f, max_norm)|
norm_ranges_all_read_as_the_first|clip|s->partial[blockIdx.x][i]|s->partial[0][i]|
mean_loss_wrong_count|model|(float)(sum / n)|(float)(sum / blockDim.x)|
adamw_without_clip|adamw|grads[i] * step->grad_factor|grads[i]|
adamw_ignores_divergence|adamw|i >= n \|\| !step->finite|i >= n|
layernorm_forward_bias_of_column_0|layernorm|y[e] = (s * (x[k * P + e] - m)) * w[e] + b[e];|y[e] = (s * (x[k * P + e] - m)) * w[e] + b[0];|
layernorm_backward_rows_skipped|layernorm|row += gridDim.x * LAYERNORM_ROWS|row += gridDim.x|
layernorm_backward_last_block_dropped|layernorm|b < blocks|b < blocks - 1|
layernorm_backward_wrong_term|layernorm|gn_sum += g * n[j];|gn_sum += g * dy[j];|
classifier_merge_unscaled|classifier|(m2 == mm ? s2 : s2 * expf(m2 - mm))|(m2 == mm ? s2 : s2)|
classifier_padding_not_zero|classifier|col < V|col <= V|
encoder_forward_wpe_column_0|encoder|e[j] += p[j];|e[j] += p[0];|
encoder_wpe_wrong_batch_stride|encoder|load_values<W>(d, dout + (size_t)b * T * C + idx);|load_values<W>(d, dout + (size_t)b * C + idx);|
encoder_wte_carry_wrong_half|encoder|load_values<W>(sum, partial + (size_t)(2 * chunk + 1) * C + c);|load_values<W>(sum, partial + (size_t)(2 * chunk) * C + c);|
flash_wgmma_mask_hides_diagonal|attention_bf16|k0 + 8 * j + 2 * q + (e & 1) > row + 8 * (e >> 1)|k0 + 8 * j + 2 * q + (e & 1) >= row + 8 * (e >> 1)|
flash_wgmma_rescale_of_other_row|attention_bf16|o[i] *= rescale[i % 4 / 2]|o[i] *= rescale[i % 2]|
flash_forward_sum_not_rescaled|attention_bf16|l[r] *= rescale[r];|l[r] *= 1.0f;|
flash_forward_diagonal_unmasked|attention_bf16|k0 + TILE - 1 > wrow|k0 + TILE - 1 > wrow + 15|
flash_dkv_diagonal_step_skipped|attention_bf16|if (i0 + x0 < wkey) continue;|if (i0 + x0 <= wkey) continue;|
flash_dkv_reads_lse_as_d|attention_bf16|a.D + rows + i0|a.lse2 + rows + i0|
flash_dq_diagonal_tile_skipped|attention_bf16|if (k0 > wrow) break;|if (k0 >= wrow) break;|
EOF
)

$PY - "$dir/gpu_check_faults.cpp" "$faults" <<'PY' || { echo "FAIL: a fault's text does not occur exactly once"; exit 1; }
import re, sys
out, table = sys.argv[1], sys.argv[2]
src = open("build/emu/gpu_check.cpp").read()
for k, line in enumerate(l for l in table.splitlines() if l.strip()):
    name, check, orig, faulty, env = [f.replace("\\|", "|") for f in re.split(r"(?<!\\)\|", line)]
    n = src.count(orig)
    if n != 1:
        sys.exit(f"fault {name}: its original text occurs {n} times in build/emu/gpu_check.cpp: {orig}")
    if orig.endswith(";"):
        planted = f"if (emu_plant({k})) {{ {faulty} }} else {{ {orig} }}"
    else:
        planted = f"(emu_plant({k}) ? ({faulty}) : ({orig}))"
    src = src.replace(orig, planted)
# the selector, on a line of its own before the translation's first #line, which numbers the rest
src = ("static bool emu_plant(int k) { static const int p = getenv(\"EMU_PLANT\") ? atoi(getenv(\"EMU_PLANT\")) : -1; "
       "return p == k; }\n") + src
open(out, "w").write(src)
PY
# built as the emulator's other programs but without the sanitizers: every fault here shows as
# wrong values, which the checks compare (test_gpu_emu runs the checks themselves under them);
# it builds in a fifth of the time
make -s $dir/gpu_check_faults -f - <<MK || { echo "FAIL: gpu_check with the planted faults does not build"; exit 1; }
include Makefile
$dir/gpu_check_faults: $dir/gpu_check_faults.cpp dev/emu/cuda_emu.h
	\$(CXX) -O1 -std=c++17 \$(EMU_BUILD) \$(filter -fopenmp,\$(CFLAGS)) -include dev/emu/cuda_emu.h -I. -Wno-psabi \$< -o \$@
MK

status=0
checks=$(cut -d'|' -f2 <<<"$faults" | sort -u | tr '\n' ' ')
if $dir/gpu_check_faults --quick $checks >$dir/none.log 2>&1; then
  echo "ok   no fault planted: gpu_check --quick $checks passes"
else
  echo "FAIL: with no fault planted, gpu_check --quick $checks fails:"; grep FAIL $dir/none.log | head; status=1
fi
k=0
while IFS= read -r line; do
  [ -z "$line" ] && continue
  IFS='|' read -r name check _ <<<"${line//\\|/}"
  env=${line##*|}
  log=$dir/$name.log
  env EMU_PLANT=$k $env $dir/gpu_check_faults --quick "$check" >"$log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] && grep -qE "FAIL|error" "$log"; then
    echo "ok   $name: gpu_check --quick $check fails (exit $rc): $(grep -m1 -E "FAIL|error" "$log" | sed 's/^ *//' | cut -c1-110)"
  else
    echo "FAIL $name: gpu_check --quick $check passed with the fault planted"; status=1
  fi
  k=$((k + 1))
done <<<"$faults"
[ $status -eq 0 ] && echo "PASS: every planted fault is caught by its kernel's check"
exit $status
