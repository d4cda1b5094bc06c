#!/usr/bin/env bash
# The JSON reader (gpt2/json.h) on the cases its grammar names: numbers as JSON writes them and
# nothing else (no 01, -, .5, 1., NaN, Infinity; none beyond the doubles), every string escape,
# surrogate pairs and their lone halves, raw control characters and invalid UTF-8, true, false,
# null, values skipped up to the depth limit, and where the error line says the problem is.
# test_fuzz runs the reader on generated input (fuzz_json); this checks the answers by name.
. "$(dirname "$0")/lib.sh"
fresh_dir test_json
$CC -O1 -Wall -Wextra -Werror -o "$dir/json_check" test/json_check.c -lm || { echo "FAIL: json_check does not build"; exit 1; }
failed=0

# gives KIND TEXT WANT: json_check KIND prints WANT for TEXT (printf's escapes apply to TEXT)
gives() {
  local got
  got=$(printf -- "$2" | "$dir/json_check" $1 2>&1)
  if [ $? -eq 0 ] && [ "$got" = "$3" ]; then echo "ok   $1 $2: $got"
  else echo "FAIL $1 $2: got '$got', want '$3'"; failed=1; fi
}
# refused KIND TEXT PATTERN: json_check KIND stops with one error line matching PATTERN
refused() {
  printf -- "$2" | "$dir/json_check" $1 >/dev/null 2>"$dir/err"
  local rc=$?
  if [ $rc -eq 1 ] && [ "$(wc -l <"$dir/err")" -eq 1 ] && grep -qE -- "^error: input: $3" "$dir/err"; then
    echo "ok   $1 $2: $(cat "$dir/err")"
  else echo "FAIL $1 $2: exit $rc (want 1 and one line matching '$3'):"; cat "$dir/err"; failed=1; fi
}

gives number '-1' '-1'
gives number ' 0.8 ' '0.80000000000000004'
gives number '1e-3' '0.001'
gives number '2E+5' '200000'
gives number '-0' '-0'
gives number '1.7976931348623157e308' '1.7976931348623157e+308'
gives number '1e-400' '0'   # below the doubles: 0, as Python and JavaScript read it
refused number '01' 'number with a leading zero at byte 0 \(line 1\)'
refused number '-' "expected a digit after '-' at byte 1"
refused number '.5' 'expected a number at byte 0'
refused number '1.' 'expected a digit after the decimal point at byte 2'
refused number '1e+' 'expected a digit in the exponent at byte 3'
refused number '+1' 'expected a number at byte 0'
refused number 'NaN' 'expected a number'
refused number '-Infinity' "expected a digit after '-'"
refused number '1e309' 'number out of range \(beyond 1.8e308\) at byte 0'
refused number '-2e308' 'number out of range'
refused number '1 2' 'unexpected text after the JSON value at byte 2'
gives 'int 50256' '50256' '50256'
gives 'int 100' '100' '100'
refused 'int 100' '101' 'value too large \(more than 100\) at byte 0'
refused 'int 9223372036854775807' '99999999999999999999999' 'value too large \(more than 9223372036854775807\)'
refused 'int 100' '-1' 'expected a non-negative integer value at byte 0'
refused 'int 100' '1.0' 'expected a non-negative integer value'
refused 'int 100' '1e2' 'expected a non-negative integer value'
refused 'int 100' '007' 'number with a leading zero'
gives string '"a\\"\\\\\\/\\b\\f\\n\\r\\t"' '61225c2f080c0a0d09'
gives string '"\\u00e9\\u4E2D"' 'c3a9e4b8ad'
gives string '"\\ud83d\\ude00"' 'f09f9880'
gives string '"caf\xc3\xa9"' '636166c3a9'
gives string '"\\u0000"' '00'
gives 'string 4' '"abc"' '616263'
refused 'string 4' '"abcd"' 'string too long \(more than 3 bytes\) at byte 5'
refused 'string 4' '"ab\xc3\xa9"' 'string too long \(more than 3 bytes\) at byte 5'
refused string '"\\ud83d"' 'lone surrogate in \\u escape at byte 7'
refused string '"\\ude00"' 'lone surrogate in \\u escape'
refused string '"\\ud83d\\u0041"' 'bad surrogate pair in \\u escape'
refused string '"\\u12"' 'truncated \\u escape'
refused string '"\\u12g4"' 'bad hex digit in \\u escape'
refused string '"\\x"' 'unknown escape at byte 2'
refused string '"a\tb"' 'control character in string at byte 2'
refused string '"\xed\xa0\x80"' 'invalid UTF-8 in string at byte 1'
refused string '"\xc0\x80"' 'invalid UTF-8 in string'
refused string '"abc' 'unterminated string at byte 4'
refused string "'a'" 'expected a string at byte 0'
gives bool 'true' 'true'
gives bool ' false' 'false'
refused bool 'tru' 'expected true or false'
gives null 'null' 'null'
gives value '{"a": [1, -2.5e3, "x", true, false, null, {}, []], "b": {"c": {}}}' 'ends at byte 66'
gives value "$(printf '%.0s[' {1..16})$(printf '%.0s]' {1..16})" 'ends at byte 32'
refused value "$(printf '%.0s[' {1..17})$(printf '%.0s]' {1..17})" 'nested too deeply \(more than 16 levels\) at byte 16'
refused value '[1, 2,]' 'expected a value at byte 6'
refused value '[1 2]' "expected ',' or '\\]' at byte 3"
refused value '{"a" 1}' "expected ':' at byte 5"
refused value '{1: 2}' 'expected a string at byte 1'
refused value '[\n1,\n01]' 'number with a leading zero at byte 5 \(line 3\)'
refused value '' 'expected a value at byte 0'

[ $failed -eq 0 ] && echo "PASS"
exit $failed
