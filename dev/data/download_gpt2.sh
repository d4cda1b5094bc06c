#!/usr/bin/env bash
# Downloads OpenAI's GPT-2 124M weights as Hugging Face publishes them (model.safetensors,
# float32, 548 MB) into data/gpt2_124M.safetensors, for infer and for fine-tuning with
# train_cpu -e. Needs internet; the development machine has none, so this script is the one part
# of the project that was never run there. Prints the file's sha256 so you can compare it with the
# one Hugging Face shows on the file's page.
#
#   bash dev/data/download_gpt2.sh [OUT]        (default OUT: data/gpt2_124M.safetensors)
#   ./infer -e data/gpt2_124M.safetensors -p "Hello, I'm a language model,"
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-data/gpt2_124M.safetensors}"
# The same file under the model's old and new names on the Hub.
urls=(
  "https://huggingface.co/gpt2/resolve/main/model.safetensors"
  "https://huggingface.co/openai-community/gpt2/resolve/main/model.safetensors"
)
if [ -f "$out" ]; then
  echo "download_gpt2: $out already exists (delete it to download again)" >&2
  sha256sum "$out"
  exit 0
fi
command -v curl >/dev/null || { echo "download_gpt2: curl not found; install curl" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
tmp="$out.part"
for url in "${urls[@]}"; do
  echo "download_gpt2: downloading $url" >&2
  # -f: an HTTP error is a failure, not an HTML page saved as weights; -L: the Hub redirects
  # to its CDN; -C -: resume a .part left by an interrupted run.
  if curl -fL --retry 3 -C - -o "$tmp" "$url"; then
    mv "$tmp" "$out"
    echo "download_gpt2: wrote $out ($(stat -c %s "$out") bytes)" >&2
    sha256sum "$out"
    exit 0
  fi
  echo "download_gpt2: $url failed" >&2
done
echo "download_gpt2: every download failed; are you online? (a partial file is left at $tmp)" >&2
exit 1
