#!/usr/bin/env python3
"""Lesson 1: how BPE merges are learnt, on a toy text of lower-case words and spaces. The pieces
are GPT-2's for such a text (an optional space, then letters); each distinct piece is counted
once with its frequency. Then, a few times: count the adjacent pairs weighted by frequency,
merge the most frequent everywhere. A tie goes to the pair of lowest ids, left first: ids 0..255
are the bytes, merge i makes id 256 + i. A space is shown as GPT-2's files show it, 'Ġ'.
Exercise 10 asks for the real thing: in C, on bytes, with the project's pre-tokenizer."""
import re
from collections import Counter

text = "the cat sat on the mat the hat sat on the cat"
words = Counter(re.findall(r" ?[a-z]+", text))  # piece -> how often it occurs
print("pieces:", " | ".join(f"{piece.replace(' ', 'Ġ')} x{count}" for piece, count in words.items()))
words = {tuple(piece): count for piece, count in words.items()}  # a piece as a list of tokens

ids = {chr(b): b for b in range(256)}  # token -> id


def show(word):
    return " ".join(token.replace(" ", "Ġ") for token in word)


for rank in range(6):
    pairs = Counter()
    for word, count in words.items():
        for pair in zip(word, word[1:]):
            pairs[pair] += count
    best = min(pairs, key=lambda pair: (-pairs[pair], ids[pair[0]], ids[pair[1]]))
    ties = [f"{show(pair)}" for pair, n in pairs.items() if n == pairs[best] and pair != best]
    new = best[0] + best[1]
    ids[new] = 256 + rank
    print(f"merge {rank}: {show(best[:1])} + {show(best[1:])} -> {show([new])} (id {256 + rank}), count "
          f"{pairs[best]}" + (f"; tied with: {', '.join(ties)}" if ties else ""))
    merged = {}
    for word, count in words.items():
        out, i = [], 0
        while i < len(word):  # left to right
            if word[i:i + 2] == best:
                out.append(new)
                i += 2
            else:
                out.append(word[i])
                i += 1
        merged[tuple(out)] = count
    words = merged
    print("   ", " | ".join(f"{show(word)} x{count}" for word, count in words.items()))
