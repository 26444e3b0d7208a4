"""Failures across real processes (one per rank, file store, no launcher between them):
mismatches, a killed peer, a stopped peer, abort, and what Python sees of each: the
exception class, collx's message and its parts."""
import os
import signal
import time

import pytest

from conftest import WORKERS

SCRIPT = WORKERS / "failures.py"


def run(ranks, scenario, n=2, timeout=60, env=None):
    return ranks(n, SCRIPT, scenario, timeout=timeout, env=env).wait()


def outcome(results, rank):
    code, text, data = results[rank]
    assert data is not None, "rank %d wrote nothing (exit %s):\n%s" % (rank, code, text)
    return data


@pytest.mark.parametrize("scenario,needle", [
    ("count_mismatch", "float32x"),
    ("dtype_mismatch", "int32"),
    ("collective_mismatch", "broadcast"),
])
def test_mismatch_raises_mismatch_error_on_both_sides(ranks, scenario, needle):
    results = run(ranks, scenario)
    for r in (0, 1):
        d = outcome(results, r)
        assert d.get("error") == "MismatchError", d
        assert "MismatchError" in d["is"] and "Error" in d["is"] and "RuntimeError" in d["is"]
        assert needle in d["message"], d["message"]
        assert d["message"].startswith("rank %d: " % r), d["message"]
        assert d["attrs"]["kind"] == "MismatchError" and d["attrs"]["rank"] == r
        # the context failed for good: the next call raises the first error's kind
        assert d["after"] == "MismatchError", d
    # at least one side fails in the mismatching call itself
    assert "the call" in [outcome(results, r)["raised_by"] for r in (0, 1)]


def test_killed_peer_raises_io_error_naming_it(ranks):
    start = time.monotonic()
    results = run(ranks, "killed_peer", timeout=45)
    elapsed = time.monotonic() - start
    assert results[1][0] == -signal.SIGKILL
    d = outcome(results, 0)
    assert d.get("error") == "IoError", d
    assert "rank 1" in d["message"], d["message"]
    assert d["message"].startswith("rank 0: allreduce"), d["message"]
    assert d["after"] == "IoError", d
    assert elapsed < 30, "noticed only after %.1f s (COLLX_TIMEOUT is 60 s)" % elapsed


@pytest.mark.parametrize("way", ["", "_async"], ids=["blocking", "nonblocking"])
def test_killed_peer_of_a_split_raises_io_error_naming_it(ranks, way):
    start = time.monotonic()
    results = run(ranks, "killed_peer_of_a_split" + way, timeout=45)
    elapsed = time.monotonic() - start
    assert results[1][0] == -signal.SIGKILL
    d = outcome(results, 0)
    assert d.get("shared_memory") is True, d  # its own group in the parent's shared memory
    assert d.get("error") == "IoError", d
    assert "rank 1" in d["message"] and "died or was killed" in d["message"], d["message"]
    assert d["message"].startswith("rank 0: allreduce"), d["message"]
    assert d["parent_after"] == "IoError", d  # the split's fate is its parent's
    assert elapsed < 30, "noticed only after %.1f s (COLLX_TIMEOUT is 60 s)" % elapsed


def test_stopped_peer_raises_timeout_error(ranks):
    r = ranks(2, SCRIPT, "stopped_peer", timeout=40)
    try:
        code, text, data = r.wait(only=[0])[0]
    finally:
        r.procs[1].kill()
    assert data is not None, text
    assert data.get("error") == "TimeoutError", data
    assert "TimeoutError" in data["is"]
    assert "rank 1" in data["message"], data["message"]


def test_flight_record_says_what_each_call_was_and_whom_it_waits_for(ranks):
    results = run(ranks, "flight_record")
    d = outcome(results, 0)
    w = d["waiting"]
    assert w is not None, "rank 0 never saw its call waiting: %s" % d
    assert w["name"] == "allreduce" and w["collective"] and w["waiting_for"] == 1, w
    assert w["waiting_what"] in ("send", "recv", "shm") and w["ended"] is None, w
    assert w["waiting_since"] >= w["started"], w
    done = d["after"][-1]
    assert done["state"] == "completed" and done["seq"] == w["seq"], done
    assert done["dtype"] == "float32" and done["count"] == 1000 and done["op"] == "sum", done
    assert done["duration_ms"] >= 300, done  # it waited for rank 1
    assert done["describe"].startswith("allreduce#%d (" % done["seq"]), done
    assert set(done) >= {"id", "algorithm", "transports", "root", "peer", "started", "running",
                         "timeout_ms", "error", "error_text", "step", "steps"}, done
    assert d.get("error") == "TimeoutError", d
    f = d["failed"]
    assert f["name"] == "barrier" and f["state"] == "failed", f
    assert f["error"] == "TimeoutError" and "timed out" in f["error_text"], f
    assert outcome(results, 1)["after"][-1]["state"] == "completed"


def test_dump_state_names_the_rank_that_holds_the_job(ranks):
    results = run(ranks, "dump_state")
    report = outcome(results, 0)["report"]
    assert report.startswith("collx hang report"), report
    assert "rank 1: has not called allreduce#" in report, report


def test_timeout_error_carries_the_hang_report(ranks):
    r = ranks(2, SCRIPT, "hang_note", timeout=40,
              env={"COLLX_TIMEOUT": "5s", "COLLX_HANG_REPORT_AFTER": "1s"})
    try:
        code, text, data = r.wait(only=[0])[0]
    finally:
        r.procs[1].kill()
    assert data is not None, text
    assert data.get("error") == "TimeoutError", data
    assert "collx hang report" in data["message"], data["message"]
    assert "rank 1: has not called allreduce#" in data["message"], data["message"]
    assert "collx hang report" in data["attrs"]["detail"], data["attrs"]


def test_stats_count_calls_messages_and_failures(ranks, tmp_path):
    traces = tmp_path / "traces"
    results = run(ranks, "stats", env={"COLLX_TRANSPORT": "tcp", "COLLX_TRACE": str(traces)})
    for r in (0, 1):
        d = outcome(results, r)
        assert d.get("error") == "Aborted", d
        s = d["stats"]
        assert set(s) == {"calls", "failed_calls", "collectives", "messages_sent", "bytes_sent",
                          "messages_received", "bytes_received", "waiting_s",
                          "shared_memory_waiting_s", "peers", "transports", "algorithms"}, s
        assert s["calls"] == 3 and s["failed_calls"] == 1, s
        assert s["collectives"] == {"allreduce": 1, "barrier": 2}, s
        # ring at P=2: one reduce-scatter and one allgather step, 2000 bytes each way each.
        ring = [a for a in s["algorithms"] if a["algorithm"] == "ring"]
        assert ring == [{"collective": "allreduce", "algorithm": "ring", "calls": 1,
                         "bytes": 4000}], s["algorithms"]
        [peer] = s["peers"]
        assert peer["rank"] == 1 - r and peer["transport"] == "tcp", peer
        assert peer["messages_sent"] >= 2 and peer["bytes_sent"] == 4000, peer
        assert s["transports"]["tcp"]["messages_sent"] == s["messages_sent"], s
        assert s["transports"]["tcp"]["shared_calls"] == 0, s
        assert s["waiting_s"] >= 0.0, s
        path = d["trace_path"]
        assert path.startswith(str(traces / "collx-trace-")), path
        assert path.endswith("-g0-r%d.json" % r) and os.path.exists(path), path


def test_revoke_fails_every_other_ranks_call_with_revoked_error_naming_it(ranks):
    results = run(ranks, "revoke", n=3)
    for r in (0, 2):
        d = outcome(results, r)
        assert d.get("error") == "RevokedError", d
        assert "RevokedError" in d["is"] and "Error" in d["is"], d
        assert d["attrs"]["peer"] == 1 and d["attrs"]["kind"] == "RevokedError", d
        assert "rank 1 revoked generation 0" in d["message"], d
        assert "the test revoked it" in d["message"], d


def test_the_survivors_of_a_killed_rank_agree_on_it_and_shrink(ranks):
    results = run(ranks, "agree", n=4, timeout=45)
    assert results[2][0] == -signal.SIGKILL
    for r in (0, 1, 3):
        d = outcome(results, r)
        assert d.get("failed_with") == "IoError", d
        assert d["agreed_failed"] == [2], d
        assert d["flags"] == (2**64 - 1) & ~0b1011, d
        new_rank = r if r < 2 else r - 1
        assert d["shrunk"] == [new_rank, 3, 1, 6.0], d  # 1 + 2 + 3
        assert d["old_after_shrink"] == "RevokedError", d


def test_a_uniform_call_raises_on_every_rank_when_one_ranks_part_fails(ranks):
    results = run(ranks, "uniform", n=4, timeout=45)
    assert results[3][0] == -signal.SIGKILL, results[3][1]
    for r in (0, 1, 2):
        d = outcome(results, r)
        assert d["healthy"] == 4.0, d
        assert d["async"] == "InvalidArgument", d
        assert "gather" not in d, d  # (without uniform, ranks 1 and 2 would return)
        assert d.get("error") == "IoError", d
        assert "rank 3" in d["message"], d
        if r != 0:
            assert "this rank's part completed, but not every rank's (failed rank 3)" in \
                d["message"], d
            assert d["attrs"]["op"] == "gather (uniform)", d


def test_a_newcomer_takes_the_killed_ranks_place_in_reform(ranks):
    results = run(ranks, "replace", n=5, timeout=60)
    assert results[2][0] == -signal.SIGKILL, results[2][1]
    for r in (0, 1, 3, 4):
        d = outcome(results, r)
        assert d.get("error") is None, d
        if r != 4:
            # (RevokedError where a survivor's reform() revoked the context before the
            # failure's own notice reached this rank)
            assert d.get("failed_with") in ("IoError", "RevokedError"), d
            assert d["reformed"] == [[2], [2], [0, 1, -1, 3]], d
            assert d["causes"] == {"2": "killed"}, d  # its process ended
            assert d["context_is_new"], d
        rank = 2 if r == 4 else r
        assert d["after"][:4] == [rank, 4, 1, 10.0], d  # 1 + 2 + 3 + 4
        if r == 4:  # the newcomer reaches everyone over tcp
            assert d["after"][4] == ["tcp", "tcp", "self", "tcp"], d
        assert d["again"] == [rank, 4, [], []], d


def test_a_newcomer_is_appended_beyond_the_first_size(ranks):
    results = run(ranks, "append", n=3, timeout=60, env={"COLLX_MAX_SIZE": "3"})
    for r in (0, 1, 2):
        d = outcome(results, r)
        assert d.get("error") is None, d
        assert d["after"][:4] == [r, 3, 1, 6.0], d  # 1 + 2 + 3
        assert "this context has 0 such places" in d["beyond"], d
    assert outcome(results, 2)["after"][4] == ["tcp", "tcp", "self"]


def test_abort_wakes_a_blocked_call_with_aborted(ranks):
    d = outcome(run(ranks, "abort"), 0)
    assert d.get("error") == "Aborted", d
    assert "the test aborted" in d["message"]


def test_blocking_call_releases_the_gil(ranks):
    d = outcome(run(ranks, "gil"), 0)
    assert d.get("ok"), d
    assert d["waited"] > 0.2, d  # rank 0 really waited for rank 1 ...
    assert d["ticks_during_call"] > 1000, d  # ... while its other thread kept running


def test_custom_op_exception_is_raised_after_the_call(ranks):
    results = run(ranks, "custom_op_raises")
    for r in (0, 1):
        d = outcome(results, r)
        assert d.get("error") == "ValueError", d
        assert "on purpose" in d["message"]
        assert d["after"] == "barrier succeeded", d  # the context is still usable


def test_dropped_async_work_keeps_its_arrays_until_done(ranks):
    results = run(ranks, "dropped_work")
    for r in (0, 1):
        d = outcome(results, r)
        assert d.get("ok") is True, d
    d = outcome(results, 0)
    assert d["alive_while_running"] is True, d  # the dropped call's array is still borrowed
    assert d["memory_untouched"] is True, d  # ... so nothing else got its memory
    assert d["released_after"] is True, d  # and it is let go once the call ended
    assert outcome(results, 1)["peer_result"] is True
