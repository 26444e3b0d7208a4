#!/usr/bin/env python3
"""Writes the binary seed corpora of tests/fuzz/corpus/ (the text ones are written by hand).

Run from anywhere: python3 tests/fuzz/make_seeds.py. Each seed is a valid input of its
harness (see the harness's comment for the input's layout); libFuzzer mutates from there.
"""
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(harness, name, data):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- settings: a byte choosing the setting (its index in the registry, modulo their
# number), then a value; each value with a few choosers ----
values = ["8", "64K", "1.5M", "30s", "500ms", "off", "yes", "posix", "tcp",
          "info,collx.tcp=debug", "tcp://node1:29500", "/tmp/rules.json", "auto", "0", "2GiB"]
for i, v in enumerate(values):
    for chooser in (i, i + 17, i + 41):
        write("settings", "%s_%d" % (v.replace("/", "_").replace(":", "_"), chooser),
              bytes([chooser]) + v.encode())
