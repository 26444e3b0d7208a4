"""Runs every case of collective_cases on this rank (started by collx-run) and writes
{case id: "ok" | what went wrong} to <argv[1]>.<rank>.json. Every rank computes the
references itself: rank r's input is a function of (r, case, op).
"""
import json
import sys
import traceback

import numpy as np

import collx
from collective_cases import (CASES, N, case_id, decode, empty, encode, ops_for,
                              reduce_ref, tolerance, values)

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

ctx = collx.init()
R, P = ctx.rank, ctx.size


# What went wrong in the current case. A failed check is recorded rather than raised, so
# that this rank keeps making the case's calls in step with the others.
problems = []


def expect(condition, what):
    if not condition:
        problems.append(what)


def kw(dtype):
    return {"dtype": collx.bfloat16} if dtype == "bfloat16" else {}


def check(what, got, want, dtype, tol=0.0):
    g = decode(got, dtype)
    w = np.asarray(want, dtype=np.float64).reshape(-1)
    if dtype == "complex64" and g.size == 2 * w.size:
        w = np.concatenate([w, w + 1])
    if g.shape != w.shape or not np.allclose(g, w, rtol=tol, atol=0 if tol == 0 else tol):
        problems.append("%s: got %s, want %s" % (what, g.tolist(), w.tolist()))


def finish(result, mode):
    """The value a call returned, waiting first when it was async."""
    if mode == "async":
        if not isinstance(result, collx.Work):
            problems.append("async_op=True returned %r" % type(result))
            return result
        expect(result.wait() is True, "Work.wait() did not return True")
        expect(result.is_completed(), "Work.is_completed() is False after wait()")
        return result.result()
    return result


def reducing(coll, dtype):
    for op in ops_for(dtype):
        opv = collx.ReduceOp.custom(lambda a, b: np.maximum(a, b, out=a), "max") \
            if op == "custom" else op
        tol = tolerance(op, dtype)
        for mode in ("inplace", "out", "async"):
            a = mode == "async"
            what = "%s op=%s mode=%s" % (coll, op, mode)
            if coll == "allreduce":
                mine = values(R, N, 1, op, dtype)
                want = reduce_ref(op, [values(r, N, 1, op, dtype) for r in range(P)], dtype)
                x = encode(mine, dtype)
                if mode == "out":
                    out = empty(N, dtype)
                    got = ctx.allreduce(x, out, opv, **kw(dtype))
                    expect(got is out, "got is not out")
                    check(what + " (input untouched)", x, mine, dtype)
                else:
                    got = finish(ctx.allreduce(x, op=opv, async_op=a, **kw(dtype)), mode)
                    expect(got is x, "got is not x")
                check(what, got, want, dtype, tol)
            elif coll == "reduce":
                root = (1 + len(op)) % P
                mine = values(R, N, 2, op, dtype)
                want = reduce_ref(op, [values(r, N, 2, op, dtype) for r in range(P)], dtype)
                x = encode(mine, dtype)
                if mode == "out":
                    out = empty(N, dtype)
                    got = ctx.reduce(x, out, root, opv, **kw(dtype))
                    check(what + " (input untouched)", x, mine, dtype)
                else:
                    got = finish(ctx.reduce(x, root=root, op=opv, async_op=a, **kw(dtype)), mode)
                if R == root:
                    check(what, got, want, dtype, tol)
                elif got is not None:
                    problems.append(what + ": a rank other than the root got %r" % (got,))
            elif coll == "reduce_scatter":
                full = [values(r, N * P, 3, op, dtype) for r in range(P)]
                want = reduce_ref(op, full, dtype)[R * N:(R + 1) * N]
                x = encode(full[R], dtype, (P, N))
                if mode == "out":
                    out = empty(N, dtype)
                    got = ctx.reduce_scatter(x, out, opv, **kw(dtype))
                    expect(got is out, "got is not out")
                else:
                    got = finish(ctx.reduce_scatter(x, op=opv, async_op=a, **kw(dtype)), mode)
                    expect(tuple(got.shape) == (N,), "shape %s" % (tuple(got.shape),))
                check(what, got, want, dtype, tol)
            elif coll == "reduce_scatterv":
                counts = [r + 1 for r in range(P)]
                total = sum(counts)
                full = [values(r, total, 4, op, dtype) for r in range(P)]
                start = sum(counts[:R])
                want = reduce_ref(op, full, dtype)[start:start + counts[R]]
                x = encode(full[R], dtype)
                if mode == "out":
                    out = empty(counts[R], dtype)
                    got = ctx.reduce_scatterv(x, counts, out, opv, **kw(dtype))
                else:
                    got = finish(ctx.reduce_scatterv(x, counts, op=opv, async_op=a,
                                                     **kw(dtype)), mode)
                check(what, got, want, dtype, tol)


def block(r, n=N, salt=0):
    return values(r, n, 10 + salt, "sum", "uint8") + 10 * (r % 10)


def moving(coll, dtype):
    counts = [r + 1 for r in range(P)]
    displs = [sum(counts[:r]) + 2 * r for r in range(P)]  # with gaps
    span = displs[-1] + counts[-1]
    for mode in ("inplace", "out", "async"):
        a = mode == "async"
        what = "%s mode=%s" % (coll, mode)
        if coll == "broadcast":
            root = P - 1
            x = encode(block(root), dtype) if R == root else empty(N, dtype)
            got = finish(ctx.broadcast(x, root, async_op=a, **kw(dtype)), mode)
            expect(got is x, "got is not x")
            check(what, x, block(root), dtype)
        elif coll == "allgather":
            want = np.concatenate([block(r) for r in range(P)])
            if mode == "inplace":
                out = encode(want * 0 - 7, dtype, (P, N))
                out[R] = encode(block(R), dtype)
                # in place either way: no input, or the input is out's own block
                send = out[R] if dtype in ("int8", "float32", "torch.float32") else None
                got = ctx.allgather(send, out, **kw(dtype))
            elif mode == "out":
                out = empty(N * P, dtype)
                got = ctx.allgather(encode(block(R), dtype), out, **kw(dtype))
                expect(got is out, "got is not out")
            else:
                got = finish(ctx.allgather(encode(block(R), dtype), async_op=True, **kw(dtype)),
                             mode)
                expect(tuple(got.shape) == (P, N), "shape %s" % (tuple(got.shape),))
            check(what, got, want, dtype)
        elif coll == "allgatherv":
            out = empty(span, dtype)
            mine = encode(block(R, counts[R]), dtype)
            if mode == "inplace":
                out[displs[R]:displs[R] + counts[R]] = mine
                got = ctx.allgatherv(None, counts, out, displs, **kw(dtype))
            else:
                got = finish(ctx.allgatherv(mine, counts, out, displs, async_op=a, **kw(dtype)),
                             mode)
            for r in range(P):
                part = got[displs[r]:displs[r] + counts[r]]
                check("%s block %d" % (what, r), part, block(r, counts[r]), dtype)
        elif coll == "gather":
            root = 1 % P
            want = np.concatenate([block(r) for r in range(P)])
            out = empty(N * P, dtype) if mode == "out" and R == root else None
            got = finish(ctx.gather(encode(block(R), dtype), out, root, async_op=a, **kw(dtype)),
                         mode)
            if R == root:
                check(what, got, want, dtype)
            elif got is not None:
                problems.append(what + ": a rank other than the root got %r" % (got,))
        elif coll == "gatherv":
            root = 0
            out = empty(span, dtype) if mode != "inplace" and R == root else None
            got = finish(ctx.gatherv(encode(block(R, counts[R]), dtype), counts, out, displs,
                                     root, async_op=a, **kw(dtype)), mode)
            if R == root:
                for r in range(P):
                    check("%s block %d" % (what, r), got[displs[r]:displs[r] + counts[r]],
                          block(r, counts[r]), dtype)
        elif coll == "scatter":
            root = P - 1
            src = encode(np.concatenate([block(r) for r in range(P)]), dtype, (P, N)) \
                if R == root else None
            out = empty(N, dtype) if mode != "inplace" or R != root else None
            got = finish(ctx.scatter(src, out, root, async_op=a, **kw(dtype)), mode)
            check(what, got, block(R), dtype)
        elif coll == "scatterv":
            root = 0
            src = None
            if R == root:
                src = empty(span, dtype)
                for r in range(P):
                    src[displs[r]:displs[r] + counts[r]] = encode(block(r, counts[r]), dtype)
            out = empty(counts[R], dtype)
            got = finish(ctx.scatterv(src, counts, out, displs, root, async_op=a, **kw(dtype)),
                         mode)
            check(what, got, block(R, counts[R]), dtype)
        elif coll == "alltoall":
            # block j of rank i: values(i*P + j)
            x = encode(np.concatenate([block(R * P + j) for j in range(P)]), dtype, (P, N))
            want = np.concatenate([block(i * P + R) for i in range(P)])
            out = empty(N * P, dtype) if mode == "out" else None
            got = finish(ctx.alltoall(x, out, async_op=a, **kw(dtype)), mode)
            check(what, got, want, dtype)
        elif coll == "alltoallv":
            # rank i sends i + j + 1 elements to rank j
            sc = [R + j + 1 for j in range(P)]
            rc = [i + R + 1 for i in range(P)]
            x = encode(np.concatenate([block(R * P + j, sc[j]) for j in range(P)]), dtype)
            out = empty(sum(rc), dtype)
            got = finish(ctx.alltoallv(x, sc, out, rc, async_op=a, **kw(dtype)), mode)
            check(what, got, np.concatenate([block(i * P + R, rc[i]) for i in range(P)]), dtype)
        elif coll == "sendrecv":
            # a ring: send to the right, receive from the left; the receive is posted first
            right, left = (R + 1) % P, (R - 1) % P
            out = empty(N, dtype)
            w = ctx.recv(out, left, tag=7, async_op=True, **kw(dtype))
            s = ctx.send(encode(block(R), dtype), right, tag=7, async_op=a, **kw(dtype))
            if a:
                s.wait()
            got = finish(w, "async")
            expect(got is out, "got is not out")
            check(what, got, block(left), dtype)


def run_case(coll, dtype):
    del problems[:]
    if dtype.startswith("torch.") and not HAVE_TORCH:
        return "skip: torch is not importable by %s" % sys.executable
    if coll == "barrier":
        ctx.barrier()
        w = ctx.barrier(async_op=True)
        w.wait()
        expect(w.result() is None, "Work.result() of a barrier is not None")
        return "ok"
    if dtype == "bool":  # sum and prod of bools are or and and: the result stays 0 or 1
        x = np.array([R == 0, True, False, R != 0])
        ctx.allreduce(x)
        y = np.array([R == 0, True, False, R != 0])
        ctx.allreduce(y, op="prod")
        expect(x.view(np.uint8).tolist() == [1, 1, 0, 1], "bool sum: %s" % x.view(np.uint8))
        expect(y.view(np.uint8).tolist() == [0, 1, 0, 0], "bool prod: %s" % y.view(np.uint8))
    elif dtype == "complex64":  # sum and avg as pairs of reals; other ops refused
        mine = encode(values(R, N, 1), dtype)
        everyone = [encode(values(r, N, 1), dtype) for r in range(P)]
        x = mine.copy()
        ctx.allreduce(x)
        expect(np.array_equal(x, np.sum(everyone, axis=0)), "complex sum: %s" % x)
        w = ctx.allreduce(mine.copy(), np.empty_like(mine), op="avg", async_op=True)
        got = w.result()
        expect(np.allclose(got, np.mean(everyone, axis=0), rtol=1e-6), "complex avg: %s" % got)
        try:
            ctx.allreduce(mine.copy(), op="max")
            expect(False, "a complex max was accepted")
        except collx.InvalidArgument as e:
            expect("complex64" in str(e) and "max" in str(e), "unclear refusal: %s" % e)
    elif coll in ("allreduce", "reduce", "reduce_scatter", "reduce_scatterv"):
        reducing(coll, dtype)
    else:
        moving(coll, dtype)
    return "ok" if not problems else "rank %d: %s" % (R, "\n".join(problems[:10]))


results = {}
for coll, dtype in CASES:
    try:
        results[case_id(coll, dtype)] = run_case(coll, dtype)
    except Exception as e:  # noqa: BLE001 - every failure is reported by its case
        results[case_id(coll, dtype)] = "rank %d: %s: %s\n%s" % (
            R, type(e).__name__, e, traceback.format_exc())
        print(results[case_id(coll, dtype)], file=sys.stderr, flush=True)  # seen if it hangs
        if isinstance(e, collx.Error) and not isinstance(e, collx.InvalidArgument):
            # the context failed for good: the remaining cases cannot run
            break
    ctx.barrier()

with open("%s.%d.json" % (sys.argv[1], R), "w") as f:
    json.dump(results, f)
ctx.close()
print("rank %d: %d cases" % (R, len(results)))
