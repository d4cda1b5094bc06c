#!/usr/bin/env python3
"""Lesson 5: the arithmetic of the CUDA model, for one warp and one SM, without a GPU.

  gpu_model.py coalescing                  memory lines and sectors that one warp's 32 float loads touch
  gpu_model.py banks                       shared-memory bank conflicts of one warp's 32 float reads
  gpu_model.py butterfly                   the 5 steps of warp_sum's __shfl_xor_sync butterfly
  gpu_model.py occupancy NAME:THREADS:REGS:SMEM ...
                                           resident blocks and warps per SM of an H100 for kernels
                                           of THREADS threads a block, REGS registers a thread
                                           (ptxas -v) and SMEM bytes of static shared memory a block

The SM limits are those of compute capability 9.0 (H100, H200) in the CUDA C++ Programming
Guide's table of technical specifications; the rounding rules are those of cuda_occupancy.h,
the occupancy calculator that ships with the CUDA toolkit."""
import sys

WARP = 32
LINE, SECTOR = 128, 32   # bytes: a cache line, and the 32-byte sectors the memory system moves
BANKS = 32               # shared memory: 32 banks, 4 bytes wide; word w lies in bank w % 32

# One SM of compute capability 9.0.
SM_REGISTERS = 65536          # 32-bit registers
SM_SHARED = 228 * 1024        # bytes of shared memory (its largest configuration)
SM_THREADS, SM_WARPS, SM_BLOCKS = 2048, 64, 32
SUB_PARTITIONS = 4            # the SM's four schedulers; registers are split among them
REG_UNIT = 256                # registers are given to a warp in multiples of 256
SMEM_UNIT = 128               # shared memory to a block in multiples of 128 bytes
SMEM_RESERVED = 1024          # per block, for the system: 228 KB per SM, at most 227 KB per block


def coalescing():
    print('one warp, lane l loading the float at index i(l); 4 bytes a lane, 128 useful bytes a warp')
    for what, index in [('i = base + l          (consecutive, as step 02 reads k)', lambda l: 4096 + l),
                        ('i = base + 2 l        (every other float)', lambda l: 4096 + 2 * l),
                        ('i = l * 768           (a row of C = 768 floats apart, step 01)', lambda l: l * 768)]:
        addrs = [4 * index(l) for l in range(WARP)]
        lines = len({a // LINE for a in addrs})
        sectors = len({a // SECTOR for a in addrs})
        print(f'  {what}: {lines:2d} lines, {sectors:2d} sectors, {sectors * SECTOR:4d} bytes moved'
              f' ({100 * WARP * 4 / (sectors * SECTOR):.1f}% used)')


def conflict_ways(words):
    """A warp's shared-memory access as 32 word addresses: how many passes it needs (the most
    distinct words in one bank; lanes reading the same word share one read, a broadcast)."""
    per_bank = {}
    for w in words:
        per_bank.setdefault(w % BANKS, set()).add(w)
    return max(len(s) for s in per_bank.values())


def banks():
    print('one warp reading one float per lane from a shared array; passes = the most distinct words in one bank')
    cases = [
        ('Ws[tx][k], rows of 32 floats (lane = tx)', [l * 32 for l in range(WARP)]),
        ('Ws[tx][k], rows of 33 floats (step 03)', [l * 33 for l in range(WARP)]),
        ('As[ty][k], the same word for every lane', [5 * 33 for _ in range(WARP)]),
        # step 05: b[j] = Ws[tx * 8 + j][kk], rows of 9 floats, tx = lane % 16
        ('Ws[tx*8 + j][k], rows of 9 floats (step 05)', [(l % 16 * 8) * 9 for l in range(WARP)]),
    ]
    for what, words in cases:
        ways = conflict_ways(words)
        print(f'  {what:46s} banks {len({w % BANKS for w in words}):2d}, {ways:2d}-way'
              + (' (no conflict)' if ways == 1 else ''))


def butterfly():
    print('warp_sum: lane l starts with v = l; each step adds the value of lane l ^ offset')
    v = list(range(WARP))
    held = [{l} for l in range(WARP)]
    for offset in (16, 8, 4, 2, 1):
        v = [v[l] + v[l ^ offset] for l in range(WARP)]
        held = [held[l] | held[l ^ offset] for l in range(WARP)]
        lanes = sorted(held[0])
        shown = ' '.join(map(str, lanes)) if len(lanes) <= 8 else f'{lanes[0]} {lanes[1]} ... {lanes[-1]} ({len(lanes)})'
        print(f'  offset {offset:2d}: lane 0 pairs with lane {offset:2d}, now holds lanes {shown:24s} v[0] = {v[0]:3d}')
    print(f'  every lane holds {v[0]}: {all(x == v[0] for x in v)} (0 + 1 + ... + 31 = {sum(range(WARP))})')


def round_up(x, unit):
    return (x + unit - 1) // unit * unit


def occupancy(specs):
    print(f'per SM (compute capability 9.0): {SM_REGISTERS} registers, {SM_SHARED // 1024} KB shared memory, '
          f'{SM_THREADS} threads = {SM_WARPS} warps, {SM_BLOCKS} blocks')
    print(f'  {"kernel":22s} {"threads":>7s} {"regs":>4s} {"smem":>6s} | blocks by: {"regs":>4s} {"smem":>4s} '
          f'{"warps":>5s} {"cap":>3s} | blocks {"warps":>5s} occupancy')
    for spec in specs:
        name, threads, regs, smem = spec.split(':')
        threads, regs, smem = int(threads), int(regs), int(smem)
        warps = -(-threads // WARP)
        # registers: a warp's are rounded up to 256; each sub-partition holds whole warps
        per_warp = round_up(regs * WARP, REG_UNIT)
        by_regs = (SM_REGISTERS // SUB_PARTITIONS // per_warp) * SUB_PARTITIONS // warps
        by_smem = SM_SHARED // round_up(smem + SMEM_RESERVED, SMEM_UNIT)
        by_warps = SM_WARPS // warps
        blocks = min(by_regs, by_smem, by_warps, SM_BLOCKS)
        print(f'  {name:22s} {threads:7d} {regs:4d} {smem:6d} | {"":10s} {by_regs:4d} {by_smem:4d} {by_warps:5d} '
              f'{SM_BLOCKS:3d} | {blocks:6d} {blocks * warps:5d} {100 * blocks * warps / SM_WARPS:8.1f}%')


def main(argv):
    if not argv or argv[0] not in ('coalescing', 'banks', 'butterfly', 'occupancy'):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == 'occupancy':
        occupancy(argv[1:])
    else:
        globals()[argv[0]]()
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
