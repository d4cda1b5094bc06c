#!/usr/bin/env bash
# The reader of requests and the writers of answers (gpt2/requests.h), and the body of a request
# to the server (gpt2/completions.h), case by case (test/request_check.c): every field, defaults,
# null, unknown fields, stop strings, each complaint word for word and the field it names, text
# that is not JSON, files with blank lines, a last line without '\n', a line over the 4 MiB limit
# followed by a good one, standard input, unreadable files; json_write_string on control
# characters and invalid UTF-8, read back. Built as C, and as C++ (infer_gpu.cu includes the
# header), each build runs every check; the last line counts both. fuzz_request and
# fuzz_completion (test_fuzz) run the same readers on generated input.
. "$(dirname "$0")/lib.sh"
fresh_dir test_requests
CXX=${CXX:-g++}
WARN="-Wall -Wextra -Werror"
$CC -O1 -g $WARN -o "$dir/request_check" test/request_check.c -lm || { echo "FAIL: request_check does not build"; exit 1; }
"$dir/request_check" "$dir" | tee "$dir/c.log"
if command -v "$CXX" >/dev/null; then
  $CXX -x c++ -O1 -g $WARN -o "$dir/request_check_cpp" test/request_check.c -lm \
    || { echo "FAIL: request_check does not build as C++ ($CXX)"; exit 1; }
  "$dir/request_check_cpp" "$dir" >"$dir/cpp.log"
  echo "--- the same as C++ ($CXX): $(tail -n 1 "$dir/cpp.log")"
  grep '^FAIL' "$dir/cpp.log"
else
  echo "note: no $CXX: the header was not built as C++"
fi
# "N passed, N failed" of each build, summed; a build that stopped early has no such line
awk '/^[0-9]+ passed, [0-9]+ failed$/ { p += $1; f += $3; n++ }
     END { if (n < ARGC - 1) f++; printf "%d passed, %d failed\n", p, f; exit f > 0 }' "$dir"/*.log
