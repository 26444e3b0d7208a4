"""Every collective x every element type on 3 ranks (collx-run, real processes, TCP):
each case checks every op (reductions) and every mode (in place, out of place, async) of
the Python module against numpy references. One launch runs the whole matrix; each case
is reported as its own test."""
import json

import pytest

from collective_cases import CASES, case_id
from conftest import WORKERS, run_collx

NRANKS = 3


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    out = tmp_path_factory.mktemp("collectives") / "result"
    proc = run_collx(NRANKS, WORKERS / "collectives.py", out, timeout=240)
    results = []
    for r in range(NRANKS):
        path = out.parent / ("result.%d.json" % r)
        if not path.exists():
            pytest.fail("rank %d wrote no results (collx-run exit %d):\n%s\n%s" %
                        (r, proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:]))
        results.append(json.loads(path.read_text()))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return results


@pytest.mark.parametrize("coll,dtype", CASES, ids=[case_id(c, t) for c, t in CASES])
def test_collective(matrix, coll, dtype):
    key = case_id(coll, dtype)
    outcomes = [ranks.get(key, "not run (an earlier case failed the context)")
                for ranks in matrix]
    if all(o.startswith("skip: ") for o in outcomes):
        pytest.skip(outcomes[0][6:])
    bad = [o for o in outcomes if o != "ok"]
    assert not bad, "\n".join(bad)


def test_split_contexts_run_beside_their_parent(tmp_path):
    """Context.split (4 ranks): rows and columns of a 2 x 2 grid over the parent's
    connections, their calls beside the parent's from two threads, a refused list."""
    out = tmp_path / "split"
    proc = run_collx(4, WORKERS / "split.py", out, timeout=60)
    outcomes = []
    for r in range(4):
        path = tmp_path / ("split.%d.json" % r)
        assert path.exists(), "rank %d wrote nothing:\n%s\n%s" % (r, proc.stdout[-3000:],
                                                                    proc.stderr[-3000:])
        outcomes.append(json.loads(path.read_text()))
    assert outcomes == ["ok"] * 4, "\n".join(outcomes)
    assert proc.returncode == 0, proc.stderr[-3000:]
