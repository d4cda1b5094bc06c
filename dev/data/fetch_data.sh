#!/usr/bin/env bash
# Fetch the three source files the project needs into OUT_DIR (default data/raw), checking sha256.
# With DATA_DIR set (or given as the second argument), copy them from that local folder instead of
# downloading: the offline route, e.g. DATA_DIR=../shared/data.
set -euo pipefail
out="${1:-data/raw}"
src="${2:-${DATA_DIR:-}}"
mkdir -p "$out"

# name, canonical URL, sha256
files=(
  "tinyshakespeare.txt https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt 86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
  "encoder.json https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json 196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
  "vocab.bpe https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe 1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
)

for entry in "${files[@]}"; do
  read -r name url sum <<<"$entry"
  dest="$out/$name"
  if [ -f "$dest" ] && echo "$sum  $dest" | sha256sum -c --status; then
    continue
  fi
  tmp="$dest.part.$$"
  if [ -n "$src" ]; then
    if [ ! -f "$src/$name" ]; then
      echo "fetch_data: $src/$name not found (DATA_DIR=$src should hold $name)" >&2
      exit 1
    fi
    cp "$src/$name" "$tmp" && chmod u+w "$tmp"
  else
    echo "fetch_data: downloading $url" >&2
    if command -v curl >/dev/null; then
      curl -fsSL --retry 2 -o "$tmp" "$url" || { rm -f "$tmp"; echo "fetch_data: download of $url failed; offline? set DATA_DIR to a folder holding $name" >&2; exit 1; }
    elif command -v wget >/dev/null; then
      wget -q -O "$tmp" "$url" || { rm -f "$tmp"; echo "fetch_data: download of $url failed; offline? set DATA_DIR to a folder holding $name" >&2; exit 1; }
    else
      echo "fetch_data: neither curl nor wget found; set DATA_DIR to a folder holding $name" >&2
      exit 1
    fi
  fi
  if ! echo "$sum  $tmp" | sha256sum -c --status; then
    rm -f "$tmp"
    echo "fetch_data: sha256 of $name does not match $sum" >&2
    exit 1
  fi
  mv "$tmp" "$dest"
done
