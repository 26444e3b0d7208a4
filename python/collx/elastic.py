"""Training that goes on when a rank is lost, in process and without a new rendezvous.

In the style of Horovod's elastic API: the loop keeps its state in a ``State`` and commits it
(an in-memory copy) as it goes; when a collective fails because a rank died, stopped or was
cut off, ``run`` re-forms the context (``Context.reform``: the survivors, with a newcomer in
each failed rank's place when one waits), every rank takes back its last committed state,
the ranks agree on the newest committed step, the state is broadcast from a rank that has
it (a newcomer has none), and the loop is called again from there::

    state = collx.elastic.State(weights=w, momentum=m)     # numpy arrays or CPU tensors

    def train(ctx, state):
        while state.step < steps:
            grad = compute(state.weights, batch(state.step, ctx.rank, ctx.size))
            ctx.allreduce(grad)
            state.weights -= lr * grad / ctx.size
            state.step += 1
            state.commit()

    collx.elastic.run(train, state)

Under ``collx-run --on-failure replace`` a dead rank's replacement starts with
``COLLX_JOIN=1``: its ``run`` joins the job (``collx.init()`` does), receives the state and
trains on in the dead rank's place and number.
"""
import os

import numpy as _np

from ._collx import Error, ExcludedError, ReduceOp
from . import init as _init

__all__ = ["State", "run"]


def _is_tensor(value):
    return type(value).__module__.startswith("torch")


def _copy(value):
    return value.detach().clone() if _is_tensor(value) else _np.array(value, copy=True)


def _fits(kept, value):
    return (_is_tensor(kept) == _is_tensor(value) and kept.shape == value.shape
            and kept.dtype == value.dtype)


def _assign(target, source):
    if _is_tensor(target):
        target.copy_(source)
    else:
        target[...] = source


class State:
    """The training state: named arrays (numpy arrays or CPU tensors, changed in place by the
    loop) and the step. ``commit()`` keeps a copy of all of it in memory; after a failure
    ``run`` brings every rank back to the newest copy any rank has."""

    def __init__(self, **arrays):
        for name, value in arrays.items():
            if not (_is_tensor(value) or isinstance(value, _np.ndarray)):
                raise TypeError("State: %s is a %s, not a numpy array or a tensor"
                                % (name, type(value).__name__))
        object.__setattr__(self, "_arrays", dict(arrays))
        object.__setattr__(self, "step", 0)
        object.__setattr__(self, "_committed", None)
        self.commit()

    def __getattr__(self, name):
        arrays = object.__getattribute__(self, "_arrays")
        if name in arrays:
            return arrays[name]
        raise AttributeError(name)

    def __setattr__(self, name, value):
        arrays = object.__getattribute__(self, "_arrays")
        if name in arrays:
            # ``state.weights -= ...`` lands here after an in-place change: keep the array
            _assign(arrays[name], value)
        else:
            object.__setattr__(self, name, value)

    @property
    def arrays(self):
        """The named arrays (the objects themselves)."""
        return dict(self._arrays)

    @property
    def committed_step(self):
        """The step of the last commit (-1: none, a newcomer's before it received one)."""
        return self._committed[0] if self._committed is not None else -1

    def commit(self):
        """Keeps a copy of every array and the step (in memory)."""
        # Into the last commit's copies where they fit (same shape and type): no new memory,
        # whose first touch (page faults) would cost more than the copy itself.
        last = self._committed[1] if self._committed is not None else {}
        copies = {}
        for name, value in self._arrays.items():
            kept = last.get(name)
            if kept is not None and _fits(kept, value):
                _assign(kept, value)
                copies[name] = kept
            else:
                copies[name] = _copy(value)
        object.__setattr__(self, "_committed", (self.step, copies))

    def restore(self):
        """Takes back the last commit (arrays in place, and the step)."""
        step, saved = self._committed
        for name, value in saved.items():
            _assign(self._arrays[name], value)
        object.__setattr__(self, "step", step)

    def _forget(self):
        object.__setattr__(self, "_committed", None)


def _synchronize(ctx, state):
    """Every rank of ``ctx`` takes the newest committed state of any rank (_transfer), and
    commits it."""
    root = _transfer(ctx, state)
    state.commit()
    return root


def _transfer(ctx, state):
    """The ranks agree on the newest committed step (an allreduce of the steps), and the
    lowest rank that has it broadcasts its arrays to the others. Returns that rank."""
    steps = _np.array([state.committed_step], _np.int64)
    ctx.allreduce(steps, op=ReduceOp.MAX)
    newest = int(steps[0])
    if newest < 0:
        raise RuntimeError("collx.elastic: no rank has a committed state to go on from")
    holder = _np.array([ctx.rank if state.committed_step == newest else ctx.size], _np.int64)
    ctx.allreduce(holder, op=ReduceOp.MIN)
    root = int(holder[0])
    for name in sorted(state.arrays):
        ctx.broadcast(state.arrays[name], root=root)
    object.__setattr__(state, "step", newest)
    return root


def run(train, state, ctx=None, *, replacement_wait=10.0, timeout=None, newcomer=None,
        attempts=5, on_reform=None):
    """Calls ``train(ctx, state)`` until it returns, re-forming after every failure.

    ``ctx``: the context to start on (default ``collx.init()``). ``newcomer``: whether this
    process joined a running job (default: ``COLLX_JOIN=1`` in the environment, as
    ``collx-run --on-failure replace`` sets it for a replacement): it first receives the
    state. After a ``collx.Error`` other than ``ExcludedError`` (this process was left out:
    raised), every live rank calls ``Context.reform`` (waiting up to ``replacement_wait``
    seconds for newcomers; a survivor lost meanwhile makes every rank try again, up to
    ``attempts`` times), takes back its last commit and then the newest one any rank has,
    and calls ``train`` again. ``on_reform(ctx, failed, joined)``, when given, is told of
    each re-form. Returns what ``train`` returned, and the context it ended on."""
    if ctx is None:
        ctx = _init(timeout=timeout)
    if newcomer is None:
        newcomer = os.environ.get("COLLX_JOIN", "").lower() in ("1", "true", "yes", "on")
    if newcomer:
        state._forget()
    pending = newcomer  # the state is to be agreed on before training
    reforms = 0
    while True:
        try:
            if pending:
                _synchronize(ctx, state)
                pending = False
            return train(ctx, state), ctx
        except ExcludedError:
            raise
        except Error:
            reforms += 1
            if reforms > attempts * 16:
                raise
            for attempt in range(1, attempts + 1):
                try:
                    ctx, failed, joined, _ = ctx.reform(timeout=timeout,
                                                        replacement_wait=replacement_wait)
                    break
                except ExcludedError:
                    raise
                except Error:
                    if attempt == attempts:
                        raise
            if state.committed_step >= 0:
                state.restore()
            pending = True
            if on_reform is not None:
                on_reform(ctx, failed, joined)
