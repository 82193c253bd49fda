#!/usr/bin/env python3
"""How torch.utils.data.DataLoader orders and draws, for eigenformer's DataLoader (tests/data/dataloader_reference.json).

Usage: /usr/bin/python3 tools/reference/tokenizers/dataloader_reference.py [--out FILE]
Needs torch (Debian's python3-torch 1.13). Every run writes the same bytes.

Each case builds DataLoader(range(n), batch_size, shuffle, drop_last[, generator=g]) after
torch.manual_seed(seed) (and g.manual_seed(generator_seed) when a generator is passed), iterates it for
several epochs and records every batch, then one more int64 draw from the generator the loader used
(`after`), which tells how many numbers the epochs consumed. What PyTorch 1.13 does, and the tests check:

  * iter(loader) draws one int64 (`_base_seed`, meant for worker processes) from the loader's generator
    (the global one when none is passed), shuffled or not;
  * shuffle=True without a generator: at the first batch RandomSampler draws another int64 from the global
    generator, seeds a fresh torch.Generator with it and takes torch.randperm(n) from that one;
  * shuffle=True with generator=g: RandomSampler takes torch.randperm(n, generator=g) directly, and once
    the epoch is exhausted it computes (and throws away) a second randperm(n, generator=g), the tail of
    its num_samples // n + num_samples % n loop.

An int64 draw is random_() on an int64 tensor: two 32-bit Mersenne Twister outputs, high word first,
modulo 2**63.
"""

import argparse
import json
import os

import torch
from torch.utils.data import DataLoader

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))

CASES = [
    # name, n, batch_size, shuffle, drop_last, seed, generator_seed (None: global generator), epochs
    ("global_shuffle_n10_b3", 10, 3, True, False, 123, None, 3),
    ("global_shuffle_n10_b3_drop_last", 10, 3, True, True, 123, None, 2),
    ("global_shuffle_n100_b16", 100, 16, True, False, 0, None, 2),
    ("global_shuffle_n1_b4", 1, 4, True, False, 42, None, 2),
    ("global_sequential_n10_b4", 10, 4, False, False, 123, None, 2),
    ("generator_shuffle_n10_b3", 10, 3, True, False, 0, 7, 3),
    ("generator_shuffle_n10_b5_drop_last", 10, 5, True, True, 0, 7, 3),
    ("generator_shuffle_n37_b8", 37, 8, True, False, 0, 2024, 2),
    ("generator_sequential_n10_b4", 10, 4, False, False, 0, 7, 2),
]


def int64_draw(generator=None):
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


def run(name, n, batch_size, shuffle, drop_last, seed, generator_seed, epochs):
    torch.manual_seed(seed)
    g = None
    if generator_seed is not None:
        g = torch.Generator()
        g.manual_seed(generator_seed)
    loader = DataLoader(list(range(n)), batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, generator=g)
    batches = [[b.tolist() for b in loader] for _ in range(epochs)]
    return {"name": name, "n": n, "batch_size": batch_size, "shuffle": shuffle, "drop_last": drop_last,
            "seed": seed, "generator_seed": generator_seed, "epochs": batches, "after": int64_draw(g)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "dataloader_reference.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    cases = [run(*c) for c in CASES]
    # The first global draws after manual_seed(123), for the int64 draw itself.
    torch.manual_seed(123)
    draws = [int64_draw() for _ in range(3)]
    lines = ['{"cases":[']
    lines += [json.dumps(c, sort_keys=True, separators=(",", ":")) + ("," if i + 1 < len(cases) else "")
              for i, c in enumerate(cases)]
    lines.append('],"format":"eigenformer-fixtures","int64_draws_seed123":' + json.dumps(draws) +
                 ',"torch":' + json.dumps(torch.__version__) + ',"version":1}')
    with open(args.out, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{args.out}: {os.path.getsize(args.out)} bytes, {len(cases)} cases")


if __name__ == "__main__":
    main()
