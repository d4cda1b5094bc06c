#!/usr/bin/env bash
# The coverage that the fuzz corpora reach in the code each target tests: the target is built
# again with clang's source-based coverage (-fprofile-instr-generate -fcoverage-mapping), run once
# over its seeds, regression inputs and working corpus (FUZZ_WORK, default build/fuzz/corpus), and
# llvm-cov counts, over the functions of the reader under test (listed below), the lines run and
# the branches taken both ways. The full per-function report is build/fuzz/cov/TARGET.txt.
#
# Usage: test/fuzz/coverage.sh TARGET...   (make fuzz-coverage: every target)
cd "$(dirname "$0")/../.." || exit 1
out=build/fuzz/cov
work=${FUZZ_WORK:-build/fuzz/corpus}
mkdir -p "$out"
profdata=$(command -v llvm-profdata || command -v llvm-profdata-14)
llvmcov=$(command -v llvm-cov || command -v llvm-cov-14)
[ -n "$profdata" ] && [ -n "$llvmcov" ] || { echo "error: llvm-profdata and llvm-cov are needed (Debian: llvm)"; exit 1; }
# the reader each target tests: FILE:FUNCTION ...
functions() {
  local tok="tokenizer_encode encode_ordinary bpe_piece push_candidate heap_push heap_pop scratch_reserve
             pretoken_length run_end utf8_char tokenizer_lookup tokenizer_pair idlist_push"
  # the JSON reader's functions that both of its file formats call (gpt2/json.h)
  local json="json_reader json_fail json_byte json_skip_space json_peek json_accept json_expect json_next
              json_end json_hex4 json_escape json_string_begin json_string_char json_digits json_number_text
              json_int"
  local json_any="json_string json_skip_string json_skip_nested json_skip_value json_number json_accept_word
                  json_bool json_accept_null"
  case $1 in
    encode) echo "gpt2/tokenizer.h: $tok gpt2/utf8.h: utf8_decode" ;;
    decode) echo "tokenizer.c: decode_ids_check gpt2/tokenizer.h: tokenizer_decode" ;;
    tokenizer_file) echo "gpt2/tokenizer.h: tokenizer_init tokenizer_build_tables pair_insert table_size_for
                          gpt2/io.h: read_header_check" ;;
    vocab) echo "tokenizer.c: read_encoder_json read_encoder_entry token_text_to_bytes check_merges check_merge_line
                 read_all_check read_path_check gpt2/tokenizer.h: tokenizer_build_tables gpt2/json.h: $json" ;;
    checkpoint) echo "gpt2/checkpoint.h: gpt2_build_from_file gpt2_read_llmc gpt2/model.h: gpt2_check_config" ;;
    safetensors) echo "gpt2/safetensors.h: st_json_name st_json_int_array st_json_tensor st_dtype_size safetensors_find
                       safetensors_parse_header st_compare_ranges safetensors_check_entries safetensors_open
                       safetensors_read safetensors_close gpt2/checkpoint.h: hf_load hf_layer_of hf_config
                       hf_check_rest hf_tensors gpt2_read_safetensors gpt2_build_from_file
                       gpt2/json.h: $json $json_any" ;;
    tokens) echo "gpt2/dataloader.h: dataloader_init shard_open_check shard_check dataloader_seek dataloader_next_batch
                  dataloader_load gpt2/io.h: read_header_check" ;;
    shards) echo "gpt2/dataloader.h: dataloader_name_shards dataloader_add_shard dataloader_init shard_open_check
                  shard_check shuffle_indices dataloader_order_shards dataloader_order_batches dataloader_seek
                  dataloader_next_batch dataloader_load dataloader_unload dataloader_free gpt2/io.h: read_header_check" ;;
    state) echo "gpt2/checkpoint.h: read_state gpt2/io.h: read_header_check" ;;
    json) echo "gpt2/json.h: $json $json_any gpt2/utf8.h: utf8_decode utf8_encode" ;;
    request) echo "gpt2/requests.h: request_complain request_field request_number request_field_value
                   request_object request_parse request_free request_reader_open request_reader_close
                   request_next_line request_read request_record_end request_write_error request_write_ms
                   request_write_result gpt2/json.h: json_catch json_kind_name json_write_string
                   gpt2/utf8.h: utf8_invalid_length" ;;
    completion) echo "gpt2/completions.h: completion_free completion_prompt_string completion_prompt completion_neutral
                      completion_bool completion_field_value completion_object completion_parse
                      gpt2/requests.h: request_vcomplain request_key request_lookup request_stop_string
                      request_stop_value request_number request_field_value" ;;
  esac
}

status=0
for target in "$@"; do
  bin=$out/fuzz_$target
  ${FUZZ_CC:-clang} -g -O1 -fsanitize=fuzzer -fprofile-instr-generate -fcoverage-mapping -Wno-unknown-pragmas \
    "test/fuzz/fuzz_$target.c" -o "$bin" -lm || { status=1; continue; }
  dirs=()
  for d in "$work/$target" "test/fuzz/corpus/$target" "test/fuzz/regress/$target"; do [ -d "$d" ] && dirs+=("$d"); done
  rm -f "$out/$target".profraw*
  # -runs=0: run every corpus input once, fuzz nothing; a regression input may fail a check in an
  # older build, so the exit status is not the point here
  LLVM_PROFILE_FILE="$out/$target.profraw" "$bin" -runs=0 -close_fd_mask=2 "${dirs[@]}" >"$out/$target.run.log" 2>&1
  "$profdata" merge -sparse "$out/$target.profraw" -o "$out/$target.profdata" || { status=1; continue; }
  # per function: Name Regions Miss Cover Lines Miss Cover Branches Miss Cover, file by file
  files=$(functions "$target" | grep -o '[a-z0-9_/]*\.[ch]:' | tr -d : | sort -u)
  # shellcheck disable=SC2086
  "$llvmcov" report "$bin" -instr-profile="$out/$target.profdata" -show-functions $files >"$out/$target.txt"
  awk -v want="$(functions "$target" | tr -s ' \n' ' ')" '
    BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) if (w[i] !~ /:$/) f[w[i]] = 1 }
    NF == 10 { name = $1; sub(/.*:/, "", name)
               if (name in f) { seen[name] = 1; lines += $5; lmiss += $6; br += $8; bmiss += $9 } }
    END { for (k in f) if (!(k in seen)) missing = missing " " k
          printf "%d of %d lines (%.1f%%), %d of %d branches (%.1f%%)", lines - lmiss, lines,
                 100 * (lines - lmiss) / (lines ? lines : 1), br - bmiss, br, 100 * (br - bmiss) / (br ? br : 1)
          if (missing != "") printf "; not found:%s", missing
          printf "\n" }' "$out/$target.txt" >"$out/$target.summary"
  echo "fuzz_$target: $(cat "$out/$target.summary") of the reader it tests"
done
exit $status
