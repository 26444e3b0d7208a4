"""One rank of test_torch_backend: torch.distributed with the default group on backend
"collx" (init_method from argv) and a second group over the same ranks on backend "gloo".
Runs every case of torch_cases (or, with --smoke, a few ops) and, unless --no-ddp, trains a
small model with DistributedDataParallel on both backends. Writes {case: "ok" | what went
wrong} to argv[1].

    torch_backend.py OUT INIT_METHOD RANK WORLD_SIZE [--smoke] [--no-ddp]
"""
import copy
import gc
import json
import sys
import time
import traceback
import weakref

import torch
import torch.distributed as dist

import collx
import collx.torch  # noqa: F401  (registers the backend)
from torch_cases import CASES

out, init, R, P = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
smoke = "--smoke" in sys.argv
torch.manual_seed(0)
torch.set_num_threads(1)

dist.init_process_group("collx", init_method=init, rank=R, world_size=P)
WORLD = dist.group.WORLD
GLOO = dist.new_group(backend="gloo")
results = {"backend": dist.get_backend()}


class Mismatch(Exception):
    pass


def same(what, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        raise Mismatch("%s: collx %s, gloo %s" % (what, got.tolist(), want.tolist()))


def data(rank, n, dtype, salt=0, op="sum"):
    """Small integers, exact in every type; per rank."""
    i = torch.arange(n, dtype=torch.int64)
    if op == "product":
        v = 1 + (rank + i + salt) % 2
    elif op in ("band", "bor", "bxor"):
        v = (rank * 37 + i * 11 + salt) % 100
    else:
        v = (rank * 3 + i * 5 + salt) % 9
        if dtype not in ("uint8",):
            v = v - 4
    return v.to(getattr(torch, dtype))


# Types gloo 1.13 cannot move or reduce: it computes the reference in float64 instead
# (exact: the values are small integers). A failed gloo call is not retried: a gloo error
# resurfaces in the group's next barrier.
GLOO_LACKS = (torch.bfloat16,)


def widened(t):
    return t.to(torch.float64) if t.dtype in GLOO_LACKS else t.clone()


def gloo_all_reduce(t, op):
    """gloo's all_reduce of t."""
    x = widened(t)
    dist.all_reduce(x, op=op, group=GLOO)
    return x.to(t.dtype)


def gloo_all_gather(t):
    """Every rank's t (list), by gloo."""
    x = widened(t)
    lst = [torch.empty_like(x) for _ in range(P)]
    dist.all_gather(lst, x, group=GLOO)
    return [y.to(t.dtype) for y in lst]


def gloo_broadcast(t, root):
    x = widened(t)
    dist.broadcast(x, root, group=GLOO)
    return x.to(t.dtype)


def gloo_all_to_all_single(inp, recv=None, send=None):
    x = widened(inp)
    rows = sum(recv) if recv else inp.shape[0]
    out = torch.empty((rows,) + tuple(inp.shape[1:]), dtype=x.dtype)
    dist.all_to_all_single(out, x, recv, send, group=GLOO)
    return out.to(inp.dtype)


def all_reduce_case(dtype):
    ops = ["sum", "product", "min", "max", "avg"]
    if dtype in ("int8", "uint8", "int32", "int64"):
        ops += ["band", "bor", "bxor"]
    for name in ops:
        op = getattr(dist.ReduceOp, name.upper())
        x = data(R, 11, dtype, 1, name)
        got = x.clone()
        dist.all_reduce(got, op=op)
        if name == "avg":  # gloo has no AVG: its sum, divided
            s = gloo_all_reduce(x, dist.ReduceOp.SUM)
            want = (torch.div(s, P, rounding_mode="trunc") if not s.is_floating_point()
                    else (s.double() / P).to(s.dtype))
        else:
            want = gloo_all_reduce(x, op)
        same("all_reduce %s %s" % (dtype, name), got, want)


def op_case(op, dtype):
    n = 6
    x = data(R, n, dtype, 2)
    if op == "all_gather":
        got = [torch.full((n,), -1, dtype=x.dtype) for _ in range(P)]
        dist.all_gather(got, x)
        for r, (g, w) in enumerate(zip(got, gloo_all_gather(x))):
            same("all_gather block %d" % r, g, w)
        # outputs that are one tensor's rows: no copy, same result
        rows = torch.full((P, n), -1, dtype=x.dtype)
        dist.all_gather(list(rows.unbind(0)), x)
        same("all_gather into rows", rows, torch.stack(gloo_all_gather(x)))
    elif op == "all_gather_uneven":
        mine = data(R, R + 1, dtype, 3)
        got = [torch.full((r + 1,), -1, dtype=x.dtype) for r in range(P)]
        dist.all_gather(got, mine)
        for r in range(P):
            same("all_gather_uneven block %d" % r, got[r], data(r, r + 1, dtype, 3))
        # gloo: pad to the longest, gather, cut
        padded = torch.zeros(P, dtype=x.dtype)
        padded[:R + 1] = mine
        for r, w in enumerate(gloo_all_gather(padded)):
            same("all_gather_uneven vs gloo %d" % r, got[r], w[:r + 1])
    elif op == "all_gather_into_tensor":
        got = torch.full((P * n,), -1, dtype=x.dtype)
        dist.all_gather_into_tensor(got, x)
        same("all_gather_into_tensor", got, torch.cat(gloo_all_gather(x)))
        # in place: the input is this rank's block of the output
        inplace = torch.full((P * n,), -1, dtype=x.dtype)
        inplace[R * n:(R + 1) * n] = x
        dist.all_gather_into_tensor(inplace, inplace[R * n:(R + 1) * n])
        same("all_gather_into_tensor in place", inplace, got)
    elif op in ("reduce_scatter", "reduce_scatter_tensor"):
        full = data(R, P * n, dtype, 4)
        want = gloo_all_reduce(full, dist.ReduceOp.SUM)[R * n:(R + 1) * n]
        got = torch.full((n,), -1, dtype=x.dtype)
        if op == "reduce_scatter":
            dist.reduce_scatter(got, list(full.chunk(P)))
        else:
            dist.reduce_scatter_tensor(got, full)
        same(op, got, want)
        if op == "reduce_scatter":  # uneven blocks: rank i gets i + 1 elements
            sizes = [r + 1 for r in range(P)]
            full = data(R, sum(sizes), dtype, 5)
            start = sum(sizes[:R])
            want = gloo_all_reduce(full, dist.ReduceOp.MAX)[start:start + sizes[R]]
            got = torch.full((sizes[R],), -1, dtype=x.dtype)
            dist.reduce_scatter(got, list(full.split(sizes)), op=dist.ReduceOp.MAX)
            same("reduce_scatter uneven max", got, want)
    elif op == "broadcast":
        for root in range(P):
            got = x.clone()
            dist.broadcast(got, root)
            same("broadcast from %d" % root, got, gloo_broadcast(x, root))
    elif op == "reduce":
        root = P - 1
        got = x.clone()
        dist.reduce(got, root, op=dist.ReduceOp.MAX)
        want = gloo_all_reduce(x, dist.ReduceOp.MAX)  # (a gloo call on every rank)
        if R == root:
            same("reduce max at the root", got, want)
    elif op == "gather":
        root = 1 % P
        got = [torch.full((n,), -1, dtype=x.dtype) for _ in range(P)] if R == root else None
        dist.gather(x, got, dst=root)
        want = gloo_all_gather(x)  # (a gloo call on every rank)
        if R == root:
            for r, (g, w) in enumerate(zip(got, want)):
                same("gather block %d" % r, g, w)
    elif op == "scatter":
        root = 0
        blocks = [data(r, n, dtype, 6) + 0 for r in range(P)]
        got = torch.full((n,), -1, dtype=x.dtype)
        dist.scatter(got, blocks if R == root else None, src=root)
        same("scatter", got, blocks[R])
    elif op == "all_to_all":
        ins = [data(R * P + j, j + 1, dtype, 7) for j in range(P)]  # R sends j + 1 to j
        got = [torch.full((R + 1,), -1, dtype=x.dtype) for _ in range(P)]
        dist.all_to_all(got, ins)
        for i in range(P):
            same("all_to_all from %d" % i, got[i], data(i * P + R, R + 1, dtype, 7))
    elif op in ("all_to_all_single", "all_to_all_single_splits"):
        if op == "all_to_all_single":
            inp = torch.cat([data(R * P + j, 2 * n, dtype, 8) for j in range(P)]).view(P * 2, n)
            got = torch.full_like(inp, -1)
            dist.all_to_all_single(got, inp)
            same("all_to_all_single", got, gloo_all_to_all_single(inp))
        else:  # rows: rank R sends R + j + 1 rows of n to rank j
            send = [R + j + 1 for j in range(P)]
            recv = [i + R + 1 for i in range(P)]
            inp = torch.cat([data(R * P + j, send[j] * n, dtype, 9) for j in range(P)]).view(
                -1, n)
            got = torch.full((sum(recv), n), -1, dtype=x.dtype)
            dist.all_to_all_single(got, inp, recv, send)
            same("all_to_all_single with splits", got, gloo_all_to_all_single(inp, recv, send))
    elif op == "send_recv":
        right, left = (R + 1) % P, (R - 1) % P
        got = torch.full((n,), -1, dtype=x.dtype)
        rw = dist.irecv(got, left, tag=3)
        sw = dist.isend(x, right, tag=3)
        sw.wait()
        rw.wait()
        same("irecv from the left", got, data(left, n, dtype, 2))
        # blocking pair, even ranks send first
        got2 = torch.full((n,), -1, dtype=x.dtype)
        if R % 2 == 0:
            dist.send(x, right)
            dist.recv(got2, left)
        else:
            dist.recv(got2, left)
            dist.send(x, right)
        same("recv from the left", got2, data(left, n, dtype, 2))
    elif op == "all_reduce_coalesced":
        ts = [data(R, k + 1, dtype, k) for k in range(3)]
        got = [t.clone() for t in ts]
        dist.all_reduce_coalesced(got)
        for k, (g, t) in enumerate(zip(got, ts)):
            same("all_reduce_coalesced %d" % k, g, gloo_all_reduce(t, dist.ReduceOp.SUM))
    else:
        raise Mismatch("unknown op " + op)


def ddp_case():
    """DistributedDataParallel: the same model, data and steps with backend collx and with
    backend gloo end with the same parameters (and every rank agrees)."""
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4))
    start = [p.detach().clone() for p in model.parameters()]
    trained = {}
    for name, group in (("collx", WORLD), ("gloo", GLOO)):
        net = torch.nn.parallel.DistributedDataParallel(
            copy.deepcopy(model), process_group=group, bucket_cap_mb=0.002)  # several buckets
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        gen = torch.Generator().manual_seed(100 + R)  # each rank its own data
        for _ in range(6):
            xb = torch.randn(16, 8, generator=gen)
            yb = torch.randn(16, 4, generator=gen)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(net(xb), yb)
            loss.backward()
            opt.step()
        trained[name] = [p.detach().clone() for p in net.module.parameters()]
    for a, b, s in zip(trained["collx"], trained["gloo"], start):
        if not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
            raise Mismatch("DDP parameters differ: max |collx - gloo| = %g" %
                           (a - b).abs().max().item())
        if torch.equal(a, s):
            raise Mismatch("DDP did not change a parameter")
    flat = torch.cat([p.reshape(-1) for p in trained["collx"]])
    for r, other in enumerate(gloo_all_gather(flat)):
        if not torch.equal(other, flat):
            raise Mismatch("rank %d ended with other parameters than rank %d" % (r, R))


def dropped_work_case():
    """A handle dropped while its call runs: the group keeps the tensor (alive, its memory not
    freed and reused under the call) until the call ends, then lets it go."""
    n = 1 << 18  # 1 MiB: past COLLX_TORCH_EAGER_BYTES, so the call runs in the background
    if R == 0:
        x = torch.full((n,), 1.0)
        ref = weakref.ref(x)
        dist.all_reduce(x, async_op=True)  # the handle dropped at once
        del x
        gc.collect()
        if ref() is None:
            raise Mismatch("the tensor of a dropped call in flight was freed")
        junk = [torch.full((n,), -5.0) for _ in range(4)]  # where freed memory would go
        dist.barrier(group=GLOO)  # the peers join the call only now
    else:
        dist.barrier(group=GLOO)
        x = torch.full((n,), float(R + 1))
        dist.all_reduce(x)
        same("the peer of a dropped call", x, torch.full((n,), P * (P + 1) / 2))
    # Every call of the group releases what the dropped calls that ended held: within a few
    # calls after the dropped one (all ranks loop alike, rank 0 says when to stop).
    for _ in range(500):
        dist.barrier()
        held = torch.tensor([int(R == 0 and ref() is not None)])
        dist.all_reduce(held, group=GLOO)
        if held.item() == 0:
            break
        time.sleep(0.01)
    else:
        raise Mismatch("the tensor of a dropped call was still held long after it ended")
    if R == 0:
        for j in junk:
            same("memory beside a dropped call's tensor", j, torch.full((n,), -5.0))


def run(case):
    if case.startswith("all_reduce-"):
        dtype = case.split("-", 1)[1]
        if dtype == "complex64":  # sum as pairs of reals
            x = torch.complex(data(R, 5, "float32"), data(R, 5, "float32", 1))
            got = x.clone()
            dist.all_reduce(got)
            want = torch.view_as_complex(gloo_all_reduce(torch.view_as_real(x).contiguous(),
                                                         dist.ReduceOp.SUM))
            same("all_reduce complex64", got, want)
        else:
            all_reduce_case(dtype)
    elif case == "barrier":
        dist.barrier()
        dist.barrier(async_op=True).wait()
    elif case == "async_work":
        ks = (0, 4, 10, 15, 18)  # up to 1 MiB: past COLLX_TORCH_EAGER_BYTES
        xs = [data(R, 1 << k, "float32", k) for k in ks]
        works = [dist.all_reduce(x, async_op=True) for x in xs]
        for w in works:
            assert w.wait()
            assert w.is_completed() and w.is_success()
        for k, x in zip(ks, xs):
            same("async all_reduce %d" % k, x,
                 gloo_all_reduce(data(R, 1 << k, "float32", k), dist.ReduceOp.SUM))
    elif case == "future":
        x = data(R, 64, "float32", 5)
        fut = dist.all_reduce(x, async_op=True).get_future()
        chained = fut.then(lambda f: f.value()[0] * 2)
        value = fut.wait()
        same("future value", value[0], gloo_all_reduce(data(R, 64, "float32", 5),
                                                         dist.ReduceOp.SUM))
        same("chained future", chained.wait(), value[0] * 2)
    elif case == "dropped_work":
        dropped_work_case()
    elif case == "non_contiguous":
        t = torch.zeros(4, 3).t()
        try:
            dist.all_reduce(t)
        except collx.InvalidArgument as e:
            if "not contiguous" not in str(e) or "rank %d" % R not in str(e):
                raise Mismatch("unclear error: %s" % e)
        else:
            raise Mismatch("a non-contiguous tensor was accepted")
    elif case == "unsupported_dtype_moves_as_bytes":
        x = (torch.arange(6, dtype=torch.int16) + 100 * R)
        got = [torch.zeros(6, dtype=torch.int16) for _ in range(P)]
        dist.all_gather(got, x)
        for r in range(P):
            same("int16 all_gather %d" % r, got[r], torch.arange(6, dtype=torch.int16) + 100 * r)
        try:
            dist.all_reduce(x)
        except collx.InvalidArgument:
            pass
        else:
            raise Mismatch("an int16 all_reduce was accepted")
    else:
        op, dtype = case.rsplit("-", 1)
        op_case(op, dtype)


cases = CASES
if smoke:
    cases = ["all_reduce-float32", "all_gather_into_tensor-float32", "broadcast-int64",
             "barrier", "future"]
for case in cases:
    print("case", case, flush=True)
    try:
        run(case)
        results[case] = "ok"
    except Exception as e:  # noqa: BLE001 - reported per case
        results[case] = "rank %d: %s: %s\n%s" % (R, type(e).__name__, e,
                                                   traceback.format_exc(limit=4))
        if isinstance(e, collx.Error) and not isinstance(e, collx.InvalidArgument):
            break  # the group failed for good
    dist.barrier(group=GLOO)
if "--no-ddp" not in sys.argv:
    try:
        ddp_case()
        results["ddp"] = "ok"
    except Exception as e:  # noqa: BLE001
        results["ddp"] = "rank %d: %s: %s\n%s" % (R, type(e).__name__, e, traceback.format_exc())
with open(out, "w") as f:
    json.dump(results, f)
dist.barrier(group=GLOO)
dist.destroy_process_group()
