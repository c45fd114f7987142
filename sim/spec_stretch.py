"""Speculating stretches: a decode-only batch's iterations run on its own compact rows.

While a speculating replica's batch cannot change -- nobody waiting, nobody prefilling, no
sequence finished, the policy's shape a function of the batch size, blocks for everyone --
each iteration does what ``sim.decode_step.plan``, ``sim.pricing`` and ``sim.step.advance``
do for it, but on the batch's own [n] arrays (cached tokens, blocks held, emitted,
remaining) instead of gathering and scattering the replica's state rows: the grant of the
verify's blocks, the price, one ``env.timeout`` (one event per iteration, the model's
semantics), the acceptance draw at the same positions with the same generator, the
roll-back. The per-request counters, inter-token gaps and ``last_chunk_at`` are written
back once, when the stretch ends (their sums and histogram bins do not depend on when
they are added); each iteration's row is logged as it ends, so rows keep their order
across replicas.

The stretch is decided one iteration at a time, as the reference path decides: it ends
before an iteration when a request is waiting (an arrival during the last one) or the
pool cannot grant the verify's blocks (the full scheduler then preempts), and after an
iteration in which a sequence emits its last token (written back, then finished as
``advance`` finishes it). A horizon that stops the run mid-stretch finds the replica's
state written back by ``Replica.flush_running`` (``write_back``).

What it relies on: a ``by_batch_size`` policy's shape is a pure function of the batch
size (asked once per stretch, as its batch does not change), and an acceptance model
accepts at most a row's depth (``AcceptanceModel.accept``'s contract), so kept tokens never
outgrow the blocks granted.

A run's path without ``spec_stretch`` (``sim.engine_path``) turns it off; the
fast-vs-reference test runs every shipped scenario both ways and compares every record.
"""

from __future__ import annotations

import numpy as np

from sim.decode_step import decoding_shape
from sim.kv import blocks_for
from sim.slots import BLOCKS, COUNTS, DLAG, EMITTED, KV, OUTPUT, STREAM
from sim.step import rows_of

_sum = np.add.reduce
_any = np.logical_or.reduce
_EMPTY = np.zeros(0, dtype=np.int64)



class Stretch:
    """The live stretch of one replica: its batch's rows, updated in place."""

    def __init__(self, r, slots: np.ndarray, st: np.ndarray, nodes: int):
        self.r = r
        self.slots = slots  # int64 [n], running order
        self.st = st  # [n, N_COLS]: a copy of their state rows, the stretch's own
        self.nodes = nodes  # draft nodes per verify (every sequence drafts)
        self.emitted0 = st[:, EMITTED].copy()
        self.short = np.zeros(len(slots), dtype=np.int64)  # verifies that rejected a guess
        self.excess = 0  # the last iteration's accepted + 1 beyond the output (finishers)
        self.k = 0  # iterations done
        self.ends: list[float] = []

    def write_back(self) -> None:
        """Write the rows with their counters, the gaps and last chunk times into the
        replica. Every iteration but a stretch's last emits accepted + 1 tokens per
        sequence, so the accepted guesses are the tokens emitted, less one per iteration,
        plus what the last one emitted short of accepted + 1 (sequences it finished)."""
        r, st, k = self.r, self.st, self.k
        r._stretch = None
        if k:
            acc = st[:, EMITTED] - self.emitted0 - k + self.excess  # [n] accepted guesses
            # verify steps, draft steps (every verify drafted), drafted, accepted, checked
            st[:, COUNTS:COUNTS + 3] += np.array((k, k, k * self.nodes))
            st[:, COUNTS + 3] += acc
            st[:, COUNTS + 4] += acc + self.short  # accepted + the first rejected
        r.state[self.slots] = st
        if not k:
            return  # a grant the horizon interrupted
        ends = np.array(self.ends)  # [k]
        log = r.log
        log.add_itl(ends[0] - r.last_chunk_at[self.slots])
        if k > 1:  # every sequence, each later iteration's gap
            log.add_itl(np.repeat(np.diff(ends), len(self.slots)))
        r.last_chunk_at[self.slots] = self.ends[-1]
        self.k = 0


def run(r):
    """Run replica ``r``'s next speculating stretch (a SimPy sub-generator: ``yield from``);
    returns whether any iteration ran (False: nothing changed, take the reference path).

    KV blocks: after a roll-back a sequence holds blocks_for(kept) (kept <= its tokens +
    verify + lookahead, what it was granted), so from the second iteration on the grant is
    blocks_for(tokens + verify + lookahead) less that, never negative, and every roll-back
    keeps blocks_for(kept): the pool's sums are those of ``decode_step.plan`` and
    ``BlockManager.rolled_back``."""
    shaped = decoding_shape(r)  # nobody waits or prefills, every verify fits the budget
    if shaped is None:
        return False
    slots, st, row, depth, nodes = shaped
    if not depth or _any(st[:, DLAG]):
        return False  # not speculating, a draft to catch up
    n = len(slots)
    lim = r.limits
    verify = 1 + nodes
    env, kvm, log, acceptance, rng = r.env, r.kv, r.log.iterations, r.acceptance, r.rng
    pricer, policy, index = r.pricer, r.policy, r.index
    bs = lim.block_size
    ahead = verify + r.lookahead  # tokens each verify writes plus the lookahead slots
    # the first grant: blocks held may exceed what the verify needs (a prefill's lookahead)
    kv, held = st[:, KV], st[:, BLOCKS]  # views: updated in place
    need = blocks_for(kv + ahead, bs)
    extra = need - held
    np.maximum(extra, 0, out=extra)
    total = int(_sum(extra))
    if total > kvm.free_blocks:
        return False  # someone must be preempted: the full scheduler
    s = Stretch(r, slots, st, nodes)
    widths = rows_of(row, n)
    verify_tokens, drafted = n * verify, n * nodes
    emitted, streams = st[:, EMITTED], st[:, STREAM]
    remaining = st[:, OUTPUT] - emitted
    short = s.short
    s_ctx = int(_sum(kv))
    held += extra
    granted = int(_sum(held))
    while True:
        kvm.free_blocks -= total
        r._stretch = s
        draft_s, verify_s, bound = pricer.price(row, kv, _EMPTY, _EMPTY, s_ctx=float(s_ctx))
        start = env.now
        yield env.timeout(draft_s + verify_s)
        now = env.now
        # sim.step.advance on the batch's own rows
        acc = acceptance.draw(streams, emitted, widths, rng)  # [n]
        acc1 = acc + 1
        accepted = int(_sum(acc))
        short += acc < depth
        s.k += 1
        s.ends.append(now)
        done = _any(remaining <= acc1)  # someone emits its last token
        if done:
            step = np.minimum(acc1, remaining)
            emitted += step
            remaining -= step
            s.excess = acc1 - step
            out = int(_sum(step))
        else:
            emitted += acc1
            remaining -= acc1
            out = accepted + n
        kv += acc1  # the root plus the accepted path
        keep = blocks_for(kv, bs)  # blocks for what was kept: <= the blocks granted
        kept = int(_sum(keep))
        kvm.free_blocks += granted - kept
        held[:] = keep
        s_ctx += accepted + n
        policy.observe(acc, row)
        if done:  # written back, then finished as advance finishes them, then the row
            s.write_back()
            r.finish(slots[remaining == 0], now)
        log.append(index, start, now - start, n, n, 0, verify_tokens, drafted, accepted,
                   out, draft_s, verify_s, bound, kvm.used_blocks)
        if done or r.waiting:
            break
        # the next grant (the scheduler, sim.decode_step.plan on these rows)
        need = blocks_for(kv + ahead, bs)
        granted = int(_sum(need))
        total = granted - kept
        if total > kvm.free_blocks:
            break  # someone must be preempted: the full scheduler
        held[:] = need
    if r._stretch is s:
        s.write_back()
    r.check_progress(n)
    return True
