"""shards_make.py: token shards written the way llm.c's data scripts write them, for the tests.

llm.c (dev/data/data_common.py, used by its fineweb.py) writes a shard as a header of 256 int32
(magic, version, token count, the rest zero) followed by the ids: GPT-2's as uint16 (magic
20240520, version 1), llama-3's as uint32 (magic 20240801, version 7); FineWeb's shards are
NAME_val_000000.bin (the first) and NAME_train_000001.bin, ... . GPT-2's files are written and
read by dev/reference/gpt2_ref.py (the Python references' writer, not the C code under test).

    shards_make.py split TOKENS.bin PREFIX N1,N2,...   the ids of TOKENS.bin (a token file) cut into
                                                      PREFIX_train_000001.bin, ... of N1, N2, ... ids
                                                      (the rest into one more shard)
    shards_make.py big PREFIX SHARDS TOKENS V          SHARDS shards of TOKENS random ids below V
    shards_make.py write OUT VERSION ID,ID,...         one shard of these ids (version 7: llm.c's llama-3
                                                      file, its magic and uint32 ids)
    shards_make.py state STATE.bin                      the data position a state file records
    shards_make.py rss ARGS...                          runs ARGS, prints its peak resident memory (MB)
"""

import os
import resource
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "dev", "reference"))
from gpt2_ref import read_tokens, write_tokens  # noqa: E402  GPT-2's token files (version 1)


def write_shard(path, ids, version=1):
    if version == 1:
        return write_tokens(path, ids)
    header = np.zeros(256, dtype=np.int32)  # another version, or llm.c's llama-3 file (version 7)
    header[0], header[1], header[2] = 20240801 if version == 7 else 20240520, version, len(ids)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(ids, dtype=np.uint32 if version == 7 else np.uint16).tobytes())


def main():
    cmd = sys.argv[1]
    if cmd == "split":
        ids, prefix = read_tokens(sys.argv[2]), sys.argv[3]
        start, k = 0, 1
        for n in [int(x) for x in sys.argv[4].split(",")] + [None]:
            end = len(ids) if n is None else start + n
            write_shard("%s_train_%06d.bin" % (prefix, k), ids[start:end])
            start, k = end, k + 1
    elif cmd == "big":
        prefix, shards, n, V = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        rng = np.random.default_rng(0)
        for k in range(shards):
            write_shard("%s_train_%06d.bin" % (prefix, k + 1), rng.integers(0, V, n))
    elif cmd == "write":
        write_shard(sys.argv[2], [int(x) for x in sys.argv[4].split(",")], int(sys.argv[3]))
    elif cmd == "state":
        with open(sys.argv[2], "rb") as f:
            h = np.frombuffer(f.read(1024), dtype=np.int32)
        q = lambda i: int(h[i].astype(np.int64) & 0xffffffff | (int(h[i + 1]) << 32))
        print("pass %d shard %d batch %d shards %d batches %d" % (q(8), q(16), q(10), h[18], q(20)))
    elif cmd == "rss":
        subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, check=True)
        print("%.0f" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
