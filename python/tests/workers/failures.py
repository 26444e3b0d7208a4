"""One rank of a failure scenario (test_failures.py starts each rank as its own process over a
file store): does what the scenario says and writes what it saw to argv[1] as JSON
{"error": class name, "message": ..., "is": [collx classes it is an instance of], ...}.

    failures.py OUT SCENARIO
"""
import gc
import json
import os
import signal
import sys
import threading
import time
import weakref

import numpy as np

import collx

out, scenario = sys.argv[1], sys.argv[2]
result = {}


def record(e):
    result["error"] = type(e).__name__
    result["message"] = str(e)
    result["is"] = [c.__name__ for c in (collx.Error, collx.IoError, collx.TimeoutError,
                                         collx.MismatchError, collx.InvalidArgument,
                                         collx.Aborted, collx.RevokedError, RuntimeError,
                                         ValueError)
                    if isinstance(e, c)]
    result["attrs"] = {k: getattr(e, k, None) for k in ("kind", "rank", "peer", "op", "detail")}


def write():
    with open(out, "w") as f:
        json.dump(result, f)


if scenario == "replace" and os.environ["COLLX_RANK"] == "4":
    # The fifth process is a newcomer: it waits until the job's ranks take it in.
    ctx = collx.join(timeout=30)
elif scenario == "replace":
    ctx = collx.init(rank=int(os.environ["COLLX_RANK"]), size=4)
elif scenario == "append" and os.environ["COLLX_RANK"] == "2":
    ctx = collx.join(timeout=30)  # appended: a job of 2 that may grow to 3 (COLLX_MAX_SIZE)
elif scenario == "append":
    ctx = collx.init(rank=int(os.environ["COLLX_RANK"]), size=2)
else:
    ctx = collx.init()
R = ctx.rank
try:
    if scenario.endswith("_mismatch"):
        result["raised_by"] = "the call"
        if scenario == "count_mismatch":
            # rank 0 reduces 8 elements, rank 1 reduces 16
            ctx.allreduce(np.ones(8 if R == 0 else 16, np.float32))
        elif scenario == "dtype_mismatch":
            # same bytes, different types: float32 against int32
            ctx.allreduce(np.ones(8, np.float32 if R == 0 else np.int32))
        elif scenario == "collective_mismatch":
            if R == 0:
                ctx.allreduce(np.ones(4, np.float32))
            else:
                ctx.broadcast(np.ones(4, np.float32), root=1)
        # A rank whose part had completed learns of the mismatch at its next call.
        result["raised_by"] = "the next call"
        ctx.barrier(timeout=10)
    elif scenario == "killed_peer":
        ctx.allreduce(np.ones(4, np.float32))  # the job works first
        if R == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.3)
        ctx.allreduce(np.ones(1 << 16, np.float32))
    elif scenario.startswith("killed_peer_of_a_split"):
        # Rank 1 dies while rank 0 waits for it in the split's shared-memory allreduce
        # (blocking, or nonblocking: the engine's waits): an IoError naming rank 1, in the
        # split and in the default context it shares its fate with.
        pair = ctx.split([0, 1], "pair")
        result["shared_memory"] = pair.shared_memory
        pair.allreduce(np.ones(4, np.float32), algorithm="shm")  # the job works first
        if R == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.3)
        x = np.ones(1 << 16, np.float32)
        try:
            if scenario.endswith("_async"):
                pair.allreduce(x, algorithm="shm", async_op=True).wait()
            else:
                pair.allreduce(x, algorithm="shm")
        finally:
            try:
                ctx.barrier(timeout=10)
                result["parent_after"] = "ok"
            except collx.Error as e:
                result["parent_after"] = type(e).__name__
    elif scenario == "stopped_peer":
        ctx.barrier()
        if R == 1:
            os.kill(os.getpid(), signal.SIGSTOP)  # the test kills it afterwards
        ctx.allreduce(np.ones(4, np.float32), timeout=1.5)
    elif scenario == "flight_record":
        # While rank 0 waits in a blocking allreduce for rank 1 (0.5 s late), another thread
        # of rank 0 reads the flight recorder; then a call fails and the recorder says how.
        seen = []
        if R == 0:
            def look():
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline and not seen:
                    calls = ctx.flight_record()
                    if calls and calls[-1]["state"] == "waiting":
                        seen.append(calls[-1])
                    time.sleep(0.01)
            reader = threading.Thread(target=look)
            reader.start()
        else:
            time.sleep(0.5)
        ctx.allreduce(np.ones(1000, np.float32))
        if R == 0:
            reader.join()
            result["waiting"] = seen[0] if seen else None
        result["after"] = ctx.flight_record()
        if R == 1:
            time.sleep(1.5)  # rank 0's next call times out
        else:
            try:
                ctx.barrier(timeout=0.3)
            except collx.Error as e:
                record(e)
            result["failed"] = ctx.flight_record()[-1]
    elif scenario == "dump_state":
        # Rank 1 is busy in Python while rank 0 waits in an allreduce; another thread of rank
        # 0 asks for a hang report, which names rank 1.
        # (rank 0 marks the report made with a file beside both ranks' outputs)
        reported = os.path.join(os.path.dirname(out), "dump_state.reported")
        if R == 1:
            deadline = time.monotonic() + 20
            while not os.path.exists(reported) and time.monotonic() < deadline:
                time.sleep(0.02)
        else:
            def report():
                time.sleep(0.3)
                result["report"] = ctx.dump_state()
                open(reported, "w").close()
            reporter = threading.Thread(target=report)
            reporter.start()
        ctx.allreduce(np.ones(16, np.float32))
        if R == 0:
            reporter.join()
    elif scenario == "hang_note":
        # Rank 1 never makes the call: rank 0's TimeoutError carries the job's diagnosis
        # (COLLX_TIMEOUT=5s, COLLX_HANG_REPORT_AFTER=1s from the test).
        ctx.barrier()
        if R == 1:
            time.sleep(8)
        else:
            ctx.allreduce(np.ones(16, np.float32))
    elif scenario == "stats":
        # Known calls, then one that fails: what ctx.stats() says of them; and the trace this
        # rank writes (COLLX_TRACE set by the test).
        ctx.allreduce(np.ones(1000, np.float32), algorithm="ring")
        ctx.barrier()
        result["trace_path"] = ctx.trace_path
        ctx.abort("the test aborts")
        try:
            ctx.barrier()
        except collx.Error as e:
            record(e)
        result["stats"] = ctx.stats()
    elif scenario == "abort":
        # rank 0 aborts its own context from another thread while it waits for rank 1
        if R == 0:
            threading.Timer(0.3, lambda: ctx.abort("the test aborted")).start()
            ctx.allreduce(np.ones(4, np.float32))
        else:
            time.sleep(1.0)
    elif scenario == "revoke":
        # rank 1 revokes while ranks 0 and 2 wait for it in an allreduce
        if R == 1:
            time.sleep(0.3)
            ctx.revoke("the test revoked it")
        else:
            ctx.allreduce(np.ones(4, np.float32))
    elif scenario == "agree":
        # rank 2 dies between allreduces; the survivors agree on it
        try:
            for i in range(100):
                if R == 2 and i == 3:
                    os.kill(os.getpid(), signal.SIGKILL)
                ctx.allreduce(np.ones(1 << 14, np.float32))
        except collx.Error as e:
            result["failed_with"] = type(e).__name__
        flags, failed = ctx.agree(~(1 << R) & (2**64 - 1), timeout=30)
        result["flags"] = flags
        result["agreed_failed"] = failed
        # ... and go on without it
        new = ctx.shrink(timeout=30)
        x = np.full(1 << 16, float(new.rank + 1), np.float32)
        new.allreduce(x)
        result["shrunk"] = [new.rank, new.size, new.generation, float(x[0])]
        try:
            ctx.barrier(timeout=2)
            result["old_after_shrink"] = "ok"
        except collx.Error as e:
            result["old_after_shrink"] = type(e).__name__
        new.close()
    elif scenario == "uniform":
        # A healthy uniform call returns everywhere; a nonblocking one is refused. Then ranks
        # 0-2 gather to rank 0 while rank 3 dies instead: the senders' parts complete, the
        # root's cannot, and every survivor raises all the same.
        x = np.ones(1 << 10, np.float32)
        ctx.allreduce(x, uniform=True)
        result["healthy"] = float(x[0])
        try:
            ctx.allreduce(x, uniform=True, async_op=True)
            result["async"] = "returned"
        except collx.Error as e:
            result["async"] = type(e).__name__
        if R == 3:
            time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGKILL)
        mine = np.full(4, R, np.int32)
        gathered = np.full(16, -1, np.int32) if R == 0 else None
        ctx.gather(mine, gathered, root=0, algorithm="linear", timeout=20, uniform=True)
        result["gather"] = "returned"
    elif scenario == "replace":
        # rank 2 dies between allreduces; the survivors re-form with the newcomer in its place
        result["rank"] = R
        if os.environ["COLLX_RANK"] != "4":
            try:
                for i in range(100):
                    if R == 2 and i == 3:
                        os.kill(os.getpid(), signal.SIGKILL)
                    ctx.allreduce(np.ones(1 << 14, np.float32))
            except collx.Error as e:
                result["failed_with"] = type(e).__name__
            reformed = ctx.reform(timeout=30, replacement_wait=30)
            new, failed, joined, rank_of = reformed
            result["reformed"] = [failed, joined, rank_of]
            result["causes"] = {str(r): c for r, (c, _) in reformed.causes.items()}
            result["context_is_new"] = reformed.context is new
        else:
            new = ctx
        x = np.full(1 << 16, float(new.rank + 1), np.float32)
        new.allreduce(x)
        result["after"] = [new.rank, new.size, new.generation, float(x[0]), list(new.transports)]
        # Later, one more newcomer-less check on the new context: nothing failed.
        again, failed, joined, _ = new.reform(timeout=30)
        result["again"] = [again.rank, again.size, failed, joined]
        again.close()
    elif scenario == "append":
        # Nobody failed: the two ranks grow by one, the newcomer appended as rank 2.
        new = ctx if os.environ["COLLX_RANK"] == "2" else ctx.grow(1, timeout=30)
        x = np.full(1 << 16, float(new.rank + 1), np.float32)
        new.allreduce(x)
        result["after"] = [new.rank, new.size, new.generation, float(x[0]), list(new.transports)]
        try:
            new.grow(1, timeout=30)
        except collx.InvalidArgument as e:
            result["beyond"] = str(e)
        new.close()
    elif scenario == "gil":
        # While rank 0 waits in a blocking allreduce (rank 1 arrives 0.5 s late), another
        # Python thread of rank 0 keeps running: the call released the GIL.
        ticks = [0]
        stop = threading.Event()

        def spin():
            while not stop.is_set():
                ticks[0] += 1

        t = threading.Thread(target=spin)
        if R == 0:
            t.start()
            time.sleep(0.05)
            before = ticks[0]
            t0 = time.perf_counter()
            ctx.allreduce(np.ones(4, np.float32))
            waited = time.perf_counter() - t0
            result["ticks_during_call"] = ticks[0] - before
            result["waited"] = waited
            stop.set()
            t.join()
        else:
            time.sleep(0.5)
            ctx.allreduce(np.ones(4, np.float32))
        result["ok"] = True
    elif scenario == "custom_op_raises":
        def bad(a, b):
            raise ValueError("the custom op failed on purpose")

        ctx.allreduce(np.ones(4, np.float32), op=collx.ReduceOp.custom(bad, "bad"))
        result["ok"] = True
    elif scenario == "dropped_work":
        # A Work dropped while its call runs: the array stays borrowed (alive, its memory not
        # freed and reused under the call) until the call ends, then the context lets it go.
        n = 1 << 18  # 1 MiB: it cannot all travel before the peer joins
        flag = os.path.join(os.path.dirname(os.path.abspath(out)), "dropped_work.flag")
        if R == 0:
            x = np.full(n, 1.0, np.float32)
            ref = weakref.ref(x)
            ctx.allreduce(x, async_op=True)  # the Work dropped at once
            del x
            gc.collect()
            result["alive_while_running"] = ref() is not None
            junk = [np.full(n, -5.0, np.float32) for _ in range(4)]  # where freed memory goes
            open(flag, "w").close()  # the peer joins the call only now
        else:
            deadline = time.monotonic() + 30
            while not os.path.exists(flag) and time.monotonic() < deadline:
                time.sleep(0.01)
            x = np.full(n, 2.0, np.float32)
            ctx.allreduce(x)
            result["peer_result"] = bool((x == 3.0).all())
        ctx.barrier()
        if R == 0:
            # Every use of the context releases what the dropped calls that ended held.
            deadline = time.monotonic() + 30
            while ref() is not None and time.monotonic() < deadline:
                time.sleep(0.01)
                ctx.rank
            result["released_after"] = ref() is None
            result["memory_untouched"] = all(bool((j == -5.0).all()) for j in junk)
        # Many dropped at once, then a call that must see the context work.
        for i in range(20):
            ctx.allreduce(np.full(1 << 14, float(R), np.float32), async_op=True)
        y = np.ones(4, np.float32)
        ctx.allreduce(y)
        result["ok"] = bool((y == ctx.size).all())
    else:
        raise SystemExit("unknown scenario " + scenario)
    result.setdefault("ok", True)
    write()
    ctx.close()  # an orderly goodbye: the peers' last reads are not cut short
    sys.exit(0)
except Exception as e:  # noqa: BLE001 - the scenario is what the exception says
    record(e)
    # After a failure the context refuses later calls with the first error.
    try:
        ctx.barrier(timeout=2)
        result["after"] = "barrier succeeded"
    except collx.Error as later:
        result["after"] = type(later).__name__
write()
os._exit(0)  # not waiting for peers that were killed or stopped
