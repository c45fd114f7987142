"""Upper bounds of every size a scenario field or a flag can take, in one place.

Every size has one, so that no input can make a run take hours by accident. Each is far
above anything physical (vLLM drafts at most a few dozen tokens, GPUs hold a few million
tokens of KV, a trace spans a few months); a value past it is refused, naming it. The
scenario schema (``sim.kinds.base``) and the command lines (``sim.commands._lists``) both
read them from here; this module imports nothing, so a command's ``--help`` stays cheap.
"""

MAX_FLOAT = 1e12  # any rate, length of time or scale
MAX_SECONDS = 1e7  # horizons, think times, CPU times (115 days)
# the latest arrival, in simulated seconds (about 143 years): below it float64 times
# resolve a microsecond or better (spacing x * 2**-52), so latencies, differences of
# absolute times, keep their precision; far above it they read 0
MAX_ARRIVAL_S = 2**52 * 1e-6
MAX_RATE = 1e6  # requests per second
MAX_GAMMA = 64  # draft tokens per step, tree depth and width
MAX_TREE_NODES = 4096  # draft nodes of one tree verify
MAX_TOKENS = 10_000_000  # tokens of one prompt, output or pass
MAX_SEQS = 65_536  # sequences per replica
MAX_GPUS = 1024  # tensor or pipeline parallelism
MAX_REPLICAS = 4096
# scheduler loops between SGLang's reads of new requests (its counter is an int; SGLang
# weighs a prefill 1000, so more than that is a server that reads only when idle)
MAX_RECV_INTERVAL = 1_000_000
MAX_REQUESTS = 100_000_000
# a run with a horizon and more requests than this draws only those arriving before the
# horizon (in chunks), not all run.requests: 10**8 requests took 9.4 GB to simulate the 7
# that arrive in 2 s. At or below it all are drawn, as always (the same draws, whatever the
# horizon), at most a few tens of MB
LAZY_REQUESTS = 1_000_000
MAX_COUNT = 1_000_000_000  # KV blocks, users, seeds' entropy is not bounded here
MAX_WORKERS = 256  # local processes of a sweep, plan or load curve
MAX_POINTS = 10_000  # sweep points, grid cells
# characters of a scenario or variant name: names become folders (runs/<name>-<time>,
# runs/sweep-<name>-<time>), and file systems allow 255 bytes in one folder name
MAX_NAME = 200
MAX_SIMULATED_CELLS = 1_000  # grid cells that each run the engine (--simulate)


def draft_nodes(widths) -> int:
    """Draft nodes of the expansion tree <k1..km> (k1 + k1·k2 + ..., the root not counted):
    what MAX_TREE_NODES bounds."""
    nodes, level = 0, 1
    for k in widths:
        level *= int(k)
        nodes += level
    return nodes
