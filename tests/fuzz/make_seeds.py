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


# ---- shm_header: transport/src/shm/arena.h's ArenaHeader identity line (offset 0..71,
# padded to the state line at 128), then the expected world size (i32) and the published
# size (u64; 0: the header's own layout) ----
ARENA_MAGIC = 0x314D48535F584C43
ARENA_VERSION = 3


def arena_header(rank, size, ring, group, job=42, generation=1):
    line = struct.pack("<QIiiIqQqQQQ", ARENA_MAGIC, ARENA_VERSION, rank, size, 256 << 10, 1234,
                       job, generation, 0x1234ABCD, ring, group)
    return line.ljust(128, b"\0") + struct.pack("<iQ", size, 0)


write("shm_header", "two_ranks", arena_header(1, 2, 1 << 20, 256 << 10))
write("shm_header", "eight_ranks_small_rings", arena_header(7, 8, 4096, 64 << 10))
write("shm_header", "largest_ring", arena_header(0, 3, 1 << 30, 256 << 10))
write("shm_header", "address_memfd", "2f1c0a9e.4242.fd7.5513856.9e3779b97f4a7c15")
write("shm_header", "address_posix", "2f1c0a9e.4242.ncollx-4026531836-4242-r1-00ff.5513856.ff")


# ---- store_request: a request's body (op byte, payload), as TcpStore writes it ----
def s(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<I", len(b)) + b


def keys(ks):
    return struct.pack("<I", len(ks)) + b"".join(s(k) for k in ks)


PING, SET, MULTISET, GET, WAIT, ADD, CAS, CHECK, ERASE = range(1, 10)
requests = {
    "ping": bytes([PING]),
    "set": bytes([SET]) + s("rank/0/addr") + s(b"10.0.0.1:4000\0\1"),
    "multiset": bytes([MULTISET]) + keys(["a", "b"]) + struct.pack("<I", 2) + s("1") + s(""),
    "get": bytes([GET]) + struct.pack("<Q", 30000) + keys(["rank/0", "rank/1", "rank/2"]),
    "wait": bytes([WAIT]) + struct.pack("<Q", 5) + keys(["barrier/3"]),
    "add": bytes([ADD]) + s("counter") + struct.pack("<q", -7),
    "compareset": bytes([CAS]) + s("leader") + s("") + s("rank 0"),
    "check": bytes([CHECK]) + keys(["x", "y"]),
    "erase": bytes([ERASE]) + s("x"),
    "client_hello": b"CLXS" + struct.pack("<II", 2, 1) + bytes(range(32)),
}
for name, body in requests.items():
    write("store_request", name, body)

# ---- store_reply: op asked (byte: op - 1), number of keys asked (byte), reply body ----
OK, TIMEOUT, ERROR = 0, 1, 2
replies = {
    "ok_ping": (PING, 0, bytes([OK])),
    "ok_get": (GET, 2, bytes([OK]) + struct.pack("<I", 2) + s("v1") + s(b"\0\1\2")),
    "timeout_get": (GET, 3, bytes([TIMEOUT]) + keys(["rank/2"])),
    "timeout_wait": (WAIT, 1, bytes([TIMEOUT]) + keys(["barrier/3"])),
    "ok_add": (ADD, 1, bytes([OK]) + struct.pack("<q", 42)),
    "ok_compareset": (CAS, 1, bytes([OK]) + s("rank 0")),
    "ok_check": (CHECK, 2, bytes([OK, 1])),
    "ok_erase": (ERASE, 1, bytes([OK, 0])),
    "error": (SET, 1, bytes([ERROR, 2]) + s("key of 0 bytes is outside 1..4096")),
}
for name, (op, n, body) in replies.items():
    write("store_reply", name, bytes([op - 1, n]) + body)
write("store_reply", "server_hello", b"CLXS" + struct.pack("<II", 2, 3) + bytes(64))

# ---- frames: a FuzzedDataProvider script (integers from the end, bytes from the front), so
# a few fixed pseudo-random scripts; the fuzzer finds its way from them ----
rng = random.Random(20)
for i, n in enumerate([96, 200, 400, 800, 1600]):
    write("frames", "script_%d" % i, bytes(rng.getrandbits(8) for _ in range(n)))

# ---- pair_hello: transport/src/tcp/tcp_hello.h's Hello (88 bytes: magic, version, job,
# generation, from, to, stream, streams, eager limit, flags, reserved, nonce) as the harness's
# rank 2 of job 0x1234 generation 1 expects it, an Ack (80 bytes), then an address ----
def hello(frm, to, stream, streams, flags, job=0x1234, generation=1, reserved=None):
    # reserved = flags unless given: the harness's rank holds a secret when it is odd, and
    # uses TLS when its bit 2 is set
    reserved = flags if reserved is None else reserved
    return (b"CLXT" + struct.pack("<IQqiiIIQII", 3, job, generation, frm, to, stream, streams,
                                  256 << 10, flags, reserved) + bytes(range(32)))


def ack(status):
    return b"CLXT" + struct.pack("<IQ", status, 256 << 10) + bytes(64)


write("pair_hello", "ok_no_secret", hello(3, 2, 1, 2, 0) + ack(0) + b"10.0.0.2:4321")
write("pair_hello", "ok_secret", hello(5, 2, 0, 2, 1) + ack(0) + b"[::1]:29500")
write("pair_hello", "wrong_job", hello(3, 2, 0, 2, 0, job=7) + ack(1) + b"192.168.1.1:80")
write("pair_hello", "bad_stream", hello(3, 2, 2, 2, 0) + ack(4) + b"[fe80::1]:1")
write("pair_hello", "ok_secret_tls", hello(4, 2, 1, 2, 3) + ack(0) + b"10.0.0.4:4000")
write("pair_hello", "tls_mismatch", hello(3, 2, 0, 2, 2, reserved=0) + ack(7) + b"10.0.0.3:1")
