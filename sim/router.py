"""Routing arriving requests to replicas, and the arrival process that feeds the router."""

from __future__ import annotations

import math
from collections.abc import Sequence
from heapq import heappush

import numpy as np
import simpy
from simpy.events import NORMAL

from sim.llm_d import LlmdConfig, LlmdPicker

ROUTERS = ("round_robin", "least_requests", "least_tokens", "kv_aware", "llm_d")


class Router:
    """Sends each request to one replica.

    - ``round_robin``: replicas in turn;
    - ``least_requests``: the replica with the fewest outstanding (waiting or running)
      requests, ties to the lowest index;
    - ``least_tokens``: the fewest outstanding tokens (prompt + output of its unfinished
      requests), ties to the lowest index;
    - ``kv_aware``: NVIDIA Dynamo's KV router (``--router-mode kv``, temperature 0; its
      cost in ai-dynamo/dynamo lib/llm/src/kv_router/scheduler.rs @db19bd2a,
      ``DefaultWorkerSelector.select_worker``): the replica with the lowest
      ``weight`` x prefill blocks + active blocks, where prefill blocks are the prompt
      tokens it would still have to prefill with this request -- those of the requests
      routed to it that have not had their first token yet, plus this one's not found in
      its prefix cache (the cached full blocks its prefix cache holds for the prompt now,
      ``PrefixCachingBlockManager.lookup``; none without prefix caching) -- over the block
      size, and active blocks the KV blocks its running requests hold plus the prompt's
      blocks not cached there. ``weight`` is Dynamo's ``--kv-overlap-score-weight``
      (default 1). Departures: Dynamo breaks a tie at random, SpecSim to the lowest
      index; Dynamo learns the cached blocks from the workers' KV events and estimates
      the active ones, SpecSim reads both from the replica as they are;
    - ``llm_d``: llm-d's endpoint picker as its tiered-prefix-cache guide configures it
      (queue, KV-use, GPU- and CPU-prefix and no-hit LRU scorers at weight 1, max score,
      a tie at random from ``rng``; ``llm_d`` the guide's knobs): ``sim.llm_d``.
    """

    def __init__(self, replicas: Sequence, kind: str = "round_robin",
                 weight: float = 1.0, llm_d: LlmdConfig | None = None,
                 rng: np.random.Generator | None = None) -> None:
        if kind not in ROUTERS:
            raise ValueError(f"unknown router {kind!r}; known: {', '.join(ROUTERS)}")
        self.replicas = list(replicas)
        self.kind = kind
        self.weight = float(weight)
        self._next = 0
        # kv_aware: per replica, {request: prompt tokens it prefills} until its first token
        self._prefilling: list[dict[int, int]] = [{} for _ in self.replicas]
        self.picker = None
        if kind == "llm_d" and len(self.replicas) > 1:
            self.picker = LlmdPicker(self.replicas, llm_d or LlmdConfig(),
                                     np.random.default_rng(0) if rng is None else rng)

    def choose(self, rid: int | None = None) -> int:
        """Index of the replica request ``rid`` (the next one) goes to."""
        if len(self.replicas) == 1:
            return 0
        if self.kind == "round_robin":
            i = self._next
            self._next = (i + 1) % len(self.replicas)
            return i
        if self.kind == "kv_aware":
            return self._kv_aware(rid)
        if self.picker is not None:
            return self.picker.choose(rid, self.replicas[0].env.now)
        key = "outstanding_requests" if self.kind == "least_requests" else "outstanding_tokens"
        loads = [getattr(r, key) for r in self.replicas]
        return loads.index(min(loads))

    def submit(self, rid: int) -> None:
        """Route request ``rid`` now."""
        self.replicas[self.choose(rid)].submit(rid)

    def _kv_aware(self, rid: int) -> int:
        """``choose`` for ``kv_aware`` (the class docstring)."""
        best, best_logit, best_new = 0, math.inf, 0
        for i, r in enumerate(self.replicas):
            size = r.limits.block_size
            prompt = int(r.table.prompt_tokens[rid])
            cached = 0 if r.prefix is None else r.prefix.lookup(rid, prompt)[0]
            new = prompt - cached * size
            logit = (self.weight * (self._pending_prefill(i) + new) / size
                     + r.kv.used_blocks + (-(-prompt // size) - cached))
            if logit < best_logit:
                best, best_logit, best_new = i, logit, new
        self._prefilling[best][rid] = best_new
        return best

    def _pending_prefill(self, i: int) -> int:
        """Prompt tokens of the requests routed to replica ``i`` that have not had their
        first token yet (Dynamo's router counts a request's until its first token)."""
        pending = self._prefilling[i]
        if pending:
            first = self.replicas[i].log.first_token_at
            for rid in [rid for rid in pending if first[rid] == first[rid]]:
                del pending[rid]  # (NaN until its first token)
        return sum(pending.values())


def arrivals(env: simpy.Environment, arrival_at, router, counter: list[int]):
    """The arrival process: submit each request at its arrival time (sorted ascending) to
    ``router`` (a ``Router``, or the one replica: anything with ``submit(rid)``).

    ``counter[0]`` counts arrived requests so the runner knows which ones to record.
    Requests arriving at the same instant are submitted without an extra event.
    """
    n = len(arrival_at)
    i = 0
    times, lo = [], 0  # arrival_at[lo:lo + len(times)] as Python floats, a chunk at a time
    while i < n:
        if i - lo == len(times):  # (a list of them all took 32 MB per million requests)
            lo, times = i, arrival_at[i:i + _CHUNK].tolist()
        if times[i - lo] > env.now:  # (a timeout may end a hair short of it: wait again)
            yield env.timeout(times[i - lo] - env.now)
            continue
        router.submit(i)  # and the next ones arriving by now, without an event
        i += 1
        counter[0] = i


_CHUNK = 4096


class ArrivalFeed:
    """The arrivals still to come to a replica whose requests are known in advance, since
    the arrival times are the request table's: one replica that receives every request
    (open loop), or replica ``index`` of ``replicas`` behind a round-robin router, which
    receives requests ``index``, ``index + replicas``, ... and whose state nothing the
    others do can change (``others``: their processes, whose events it looks past).

    A fast path that computes several iterations at once (``sim.steady_walk``) may run
    past these arrivals -- the arrival process still submits each at its time, between the
    replica's iterations, and the queue it joins is only read when an iteration starts --
    so it needs the next event of *anyone else* and when each request before it is
    submitted (``look``).
    """

    def __init__(self, env: simpy.Environment, arrival_at: np.ndarray, counter: list[int],
                 process: simpy.Process, index: int = 0, replicas: int = 1,
                 others: Sequence = ()) -> None:
        self.env = env
        self.arrival_at = arrival_at
        self.counter = counter
        self.process = process
        self.index, self.replicas = index, replicas
        self.others = list(others)  # the other replicas (their ``process``)

    def look(self, most: int, skip=()) -> tuple[float, np.ndarray, list[float], float]:
        """(horizon, ids, times, next_at): when the next event other than the arrival
        process's own and the other replicas' comes (inf: none); this replica's requests
        not submitted yet that are submitted before it, at most ``most`` of them (``ids``,
        in order), with the times they are (``times``); when the next one of them beyond
        those is (inf: none before the horizon).

        A request is submitted at its arrival time as the arrival process's timeouts reach
        it: ``now + (arrival - now)`` from the time the process last woke, which the float
        sum can leave a hair off the arrival time (the process then waits again), so the
        times are worked out as SimPy will add them. Reads SimPy's event queue
        (``Environment._queue``: (time, priority, id, event) entries, a handful in a run
        with one replica); a SimPy that keeps it otherwise gets the next event of anyone
        (``env.peek()``) and no look past it: walks then stop at every arrival."""
        got = next_event_past(self.env, self.others, self.process, skip)
        if got is None:
            return self.env.peek(), _NONE, [], math.inf
        horizon, wake = got  # (wake: when the arrival process wakes next)
        first = self.counter[0]
        times: list[float] = []
        n = self.replicas
        if wake is None or first >= len(self.arrival_at):
            return horizon, _NONE, times, math.inf
        now = wake
        # the process wakes for every arrival (whichever replica it goes to): its times
        # are summed through them all; this replica's are every n-th from its own
        ids = []
        for rid, at in enumerate(self.arrival_at[first:first + n * (most + 1)].tolist(),
                                 start=first):
            while at > now:  # the process's timeouts, as SimPy adds them
                now = now + (at - now)
            if not now < horizon:
                break
            if rid % n != self.index:
                continue
            if len(times) == most:
                return horizon, np.array(ids, dtype=np.int64), times, now
            ids.append(rid)
            times.append(now)
        return horizon, np.array(ids, dtype=np.int64), times, math.inf


_NONE = np.zeros(0, dtype=np.int64)


def event_at(env: simpy.Environment, at: float, eid: int | None = None) -> simpy.Event:
    """An event that comes at time ``at`` exactly (not ``now + (at - now)``, which a
    timeout would make, a hair off where the difference rounds), scheduled as a timeout
    is (``Environment.schedule``: SimPy's queue of (time, priority, id, event)); ``eid``:
    the id of an event it stands in for (taken out of the queue), so that it keeps that
    one's place among events at the same instant."""
    event = simpy.Event(env)
    event._ok = True  # triggered, as Timeout's __init__ makes it (its value None)
    event._value = None
    heappush(env._queue, (at, NORMAL, next(env._eid) if eid is None else eid, event))
    return event


def pass_iterations(env: simpy.Environment, delays: list[float]):
    """Let iterations of ``delays`` seconds pass one after the other, as one timeout each
    would (a SimPy sub-generator: ``yield from``), in two events: one at the start of the
    last, whose time the delays summed one by one give exactly as the timeouts reach it
    (``event_at``), and the last one's timeout, made then as a timeout per iteration makes
    it, so that an event elsewhere at the very instant it ends (where a walk stops) is
    ordered against it as there. For iterations nothing else reads until the last has
    ended (the compiled walk's and steady stretches', which end before anyone else's next
    event). One order can differ, which needs two exact ties: the jump's event takes its
    place in SimPy's queue when the walk starts, not when the iteration before the last
    starts, so an event made meanwhile for that very instant comes after it rather than
    before; the replica does nothing there but make the last timeout, which an event made
    at that instant for the instant the last iteration ends would then follow."""
    if not delays:
        return
    if len(delays) > 1:
        t = env.now
        for delay in delays[:-1]:
            t = t + delay  # as Environment.schedule adds a timeout's delay to now
        yield event_at(env, t)
    yield env.timeout(delays[-1])


def next_event_of(r, skip=()) -> float:
    """When the next event that can touch replica ``r`` comes, for a walk or a steady
    stretch without an arrival feed: the next of anyone's (``env.peek()``), or where its
    router reads the replicas only when a request arrives (``r.peers``, set by
    ``sim.cluster.wire``) the next but the other replicas' own steps, which change nothing
    of ``r``'s (``next_event_past``, as ``ArrivalFeed.look`` reads the queue); ``skip``:
    the ids of events of ``r``'s own to pass over too."""
    got = next_event_past(r.env, r.peers, skip=skip) if r.peers or skip else None
    return r.env.peek() if got is None else got[0]


def next_event_past(env: simpy.Environment, others: Sequence, own=None, skip=()):
    """(when the next event in ``env``'s queue comes that is neither a process of
    ``others`` (anything with a ``process``) waiting, nor the end of one of their
    micro-batches in flight (a pipeline's ``flight``), nor ``own`` (a process) waiting nor
    one of ``skip`` (the ids of events), inf if none; when ``own`` wakes, None if it is not
    waiting), or None where SimPy keeps its queue otherwise (``Environment._queue``:
    (time, priority, id, event) entries) and only ``env.peek()`` can be had."""
    mine = None if own is None else own.target
    theirs = {id(r.process.target) for r in others}
    for r in others:
        theirs.update(id(item[2]) for item in getattr(r, "flight", ()))
    horizon, wake = math.inf, None
    try:
        for item in env._queue:
            if mine is not None and item[3] is mine:
                wake = item[0]
            elif item[0] < horizon and id(item[3]) not in theirs and id(item[3]) not in skip:
                horizon = item[0]
    except (AttributeError, IndexError, TypeError):
        return None
    return horizon, wake


class ClosedLoop:
    """Closed-loop users (the engine drives the loop; workloads gives the think times): each
    user thinks, sends a request, waits until it finishes, and again, until the table's
    requests are used up.

    ``users`` requests are sent first, each after a think time; then every finished request
    (``finished``, the finishing replicas' ``on_finish``) sends the next after one. The
    think times are pre-drawn (``think_s``, taken in the order users need them: the first
    ``users`` at the start, then one per finish, in the order requests finish), and a
    request gets its id (the next of ``counter``) and its arrival time in ``arrival_at`` as
    it is sent, so request ids stay in arrival order; a send once the table is used up
    sends nothing.

    Each send is a timeout made as the request before it finishes (within the finishing
    replica's step, before the replica schedules its next step) with the send as its
    callback: a send at the very instant a replica's step ends is in its queue for the
    step that starts then, unless it was made then (due at the instant it is made: no think
    time, or one below the clock's resolution there; the finish of the step just ended),
    since SimPy runs events of one instant in the order they were made.
    ``look`` tells a walk (``sim.steady_walk``) the sends to come."""

    def __init__(self, env: simpy.Environment, users: int, think_s, arrival_at,
                 router: Router, counter: list[int]) -> None:
        self.env = env
        self.think = np.asarray(think_s, dtype=np.float64)
        self.drawn = 0  # think times taken
        self.arrival_at = arrival_at
        self.router = router
        self.counter = counter
        # the sends made and not yet run, in the order made: id(event) -> (at, seen_from, event)
        self.sending: dict[int, tuple[float, float, simpy.Event]] = {}
        for _ in range(users):
            self._send_after()

    def finished(self, rids: np.ndarray) -> None:
        """``rids`` finished now, in this order: each sends the next request after a think
        time."""
        for _ in range(len(rids)):
            self._send_after()

    def _send_after(self) -> None:
        think = float(self.think[self.drawn])
        self.drawn += 1
        env = self.env
        ev = env.timeout(think)
        now = env.now
        at = now + think  # (SimPy's own sum)
        # when a step that starts then sees it in the queue: at that time, or just after
        # where it is due now (no think time, or one the clock cannot tell from none: the
        # step that starts now is formed first)
        self.sending[id(ev)] = (at, at if at > now else math.nextafter(at, math.inf), ev)
        ev.callbacks.append(self._send)

    def _send(self, ev: simpy.Event) -> None:
        del self.sending[id(ev)]
        rid = self.counter[0]
        if rid >= len(self.arrival_at):
            return
        self.counter[0] = rid + 1
        self.arrival_at[rid] = self.env.now
        self.router.submit(rid)

    def look(self) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, int] | None:
        """What a walk of the one replica this loop sends to needs: (when the next event
        other than the sends and the replica's own comes, inf if none; the sends to come in
        the order they will run, float64: when each runs and when a step that starts then
        sees it; the think times still to be taken, in order; the requests still to be
        sent), or None where SimPy keeps its queue otherwise (``next_event_past``)."""
        got = next_event_past(self.env, (), skip=self.sending)
        if got is None:
            return None
        horizon = got[0]
        # SimPy's order at one instant is the order made: a stable sort by time
        order = sorted(self.sending.values(), key=lambda item: item[0])
        at = np.array([item[0] for item in order], dtype=np.float64)
        seen = np.array([item[1] for item in order], dtype=np.float64)
        return (horizon, at, seen, self.think[self.drawn:],
                len(self.arrival_at) - self.counter[0])


def closed_loop(env: simpy.Environment, users: int, think_s, arrival_at, router: Router,
                counter: list[int], finishers: Sequence) -> ClosedLoop:
    """A ``ClosedLoop`` of ``users``, each request's user told when one of ``finishers`` (the
    replicas where requests finish: their ``on_finish``) finishes it."""
    loop = ClosedLoop(env, users, think_s, arrival_at, router, counter)
    for r in finishers:
        r.on_finish = loop.finished
    return loop
