"""One rank of test_collectives' split test (collx-run, 4 ranks): Context.split into the rows
and columns of a 2 x 2 grid, their collectives beside the parent's, and a bad list. Writes
"ok" or what went wrong to <argv[1]>.<rank>.json."""
import json
import sys
import threading
import traceback

import numpy as np

import collx

ctx = collx.init()
R, P = ctx.rank, ctx.size
outcome = "ok"
try:
    row = ctx.split([R // 2 * 2, R // 2 * 2 + 1], "row%d" % (R // 2))
    col = ctx.split([R % 2, R % 2 + 2], "col%d" % (R % 2), timeout=30)
    assert (row.rank, row.size, col.rank, col.size) == (R % 2, 2, R // 2, 2), \
        (row.rank, row.size, col.rank, col.size)
    assert row.transports[1 - row.rank] == ctx.transports[R ^ 1], row.transports
    x = np.full(1000, R + 1, dtype=np.float64)
    got = {}
    work = row.allreduce(x.copy(), async_op=True)  # (in place: one array per call)
    other = threading.Thread(target=lambda: got.update(col=col.allreduce(x.copy())))
    other.start()
    got["world"] = ctx.allreduce(x.copy())
    other.join()
    work.wait()
    got["row"] = work.result()
    assert got["row"][0] == (R // 2 * 2 + 1) + (R // 2 * 2 + 2), got["row"][0]
    assert got["world"][0] == 10, got["world"][0]
    assert got["col"][0] == (R % 2 + 1) + (R % 2 + 3), got["col"][0]
    gathered = row.allgather(np.array([R], dtype=np.int32))
    assert gathered.ravel().tolist() == [R // 2 * 2, R // 2 * 2 + 1], gathered.tolist()
    try:
        ctx.split([(R + 1) % P], "bad")
    except collx.InvalidArgument as e:
        assert "not among the ranks" in str(e), str(e)
    else:
        raise AssertionError("a list without this rank was accepted")
    col.close()
    ctx.barrier()  # the parent goes on after a split's close()
except Exception:  # noqa: BLE001 - reported
    outcome = traceback.format_exc()
with open("%s.%d.json" % (sys.argv[1], R), "w") as f:
    json.dump(outcome, f)
