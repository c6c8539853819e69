"""Attribution: from the signals of one window, pick the root, the culprit and the verdict.

One engine, two drivers: the Faust correlator calls it on an incident window,
``sickbay diagnose`` on the signals of a log folder.

Root selection (failure-signatures.md §5), in order:

1. a decisive root candidate (e.g. Xid 79, Xid 48) beats every other candidate;
2. a specific signature beats a generic catch-all (``weight`` < 40, e.g. a bare
   ``FooError:``) even when the catch-all came first;
3. the earliest by event time (lines without a time of their own keep their
   order in the input);
4. ties: the category order below (hardware before software before
   application), then the signal id, so the choice is deterministic.

Cascades (NCCL watchdog timeouts) and hints are never a root while any root
candidate exists; with none, the earliest cascade stands in with category
``unknown`` and low confidence. With neither, a *lead* hint (context ``lead``:
host RAM nearly full, corrected DIMM errors, machine-check events) stands in with
its own category, the lowest confidence and nothing isolated. Only a finished log
reaches that case: a hint opens no live window (the stream's node health weighs
these signals instead).

History and company change some codes' meaning (the rule's ``context``):
``sympathetic`` codes (Xid 45, 141) step aside when another root exists;
``recurrence`` codes (Xid 13, 31) that repeat on one GPU become a hardware
fault of that GPU; a ``recovery_action`` (Xid 154) sets the isolation scope of
the fault it accompanies, and with no fault beside it stands as the root while it
still asks for a reset or a reboot.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from schemas.incidents import Category, Culprit, Evidence, RootCause, Symptom
from schemas.signals import Role, Signal
from streams.correlate.progress import HANG_RULE
from streams.correlate.state import IncidentWindow, JobTopology, RankPlace, infer_place

# rank -> where it runs (NCCL's init lines), when the driver knows
PlaceOf = Callable[[int], RankPlace | None]

CATEGORY_ORDER = [
    Category.HARDWARE_GPU,
    Category.HARDWARE_NETWORK,
    Category.HARDWARE_HOST,
    Category.SYSTEM_SOFTWARE,
    Category.INFRASTRUCTURE,
    Category.APPLICATION,
    Category.UNKNOWN,
]
MAX_EVIDENCE = 12


@dataclass(frozen=True)
class Verdict:
    root: Signal
    category: Category
    culprit: Culprit | None
    isolate: list[str]
    restartable: bool
    confidence: float
    supporting: list[Symptom]
    evidence: list[Evidence]
    coverage: list[str]
    decisive: bool
    extra: dict[str, str] = field(default_factory=dict)
    uncorroborated: bool = False  # only a lone application-class Xid: no incident until the job fails
    provisional: bool = False  # the root is an early warning (``attrs["provisional"]``): shown, not acted on

    def fingerprint(self) -> str:
        """What the decide step acts on; a change here is worth an immediate revision."""
        culprit = self.culprit.model_dump_json() if self.culprit else "-"
        return f"{self.root.signal_id}|{self.category}|{culprit}|{','.join(self.isolate)}|{self.restartable}"


GENERIC_WEIGHT = 40
RECURRENCE_THRESHOLD = 3  # the same code on the same GPU this many times: not the application


def _root_key(s: Signal) -> tuple[bool, bool, float, int, int, str, str, int, str, str]:
    """Decisive first, then specific, then earliest, then the category order. Lines of one traceback
    share a time stamp; among those the more specific rule wins, and what remains is decided by the
    line itself, never by ``signal_id`` first: in ``sickbay diagnose`` that id hashes the file's path,
    and the same logs must give the same verdict wherever they were copied."""
    category = s.category or Category.UNKNOWN
    return (
        not s.decisive,
        s.weight < GENERIC_WEIGHT,
        s.event_time.timestamp(),
        CATEGORY_ORDER.index(category),
        -s.weight,
        s.rule,
        s.node or "",
        -1 if s.rank is None else s.rank,
        s.text,
        s.signal_id,
    )


_RECOVERY_SCOPE = {"reboot": "node", "reset": "gpu", "drain": "gpu", "none": "none"}


def _recovery_scope(s: Signal) -> str | None:
    text = str(s.attrs.get("recovery_action") or s.text).lower()
    tail = text.rsplit(" to ", 1)[-1]
    for needle, scope in _RECOVERY_SCOPE.items():
        if needle in tail:
            return scope
    return None


def _lone_recovery_action(actions: list[Signal]) -> list[Signal]:
    """An Xid 154 with no fault beside it (the Xid it follows rotated out of the log, or the driver
    raised the action on its own): where its latest value still asks for a GPU reset or a reboot,
    the driver is saying that GPU is unusable until then, so it stands as the root, scoped as it
    says. Its latest value ``None`` (the reset happened) leaves nothing to attribute."""
    if not actions:
        return []
    latest = actions[-1]
    scope = _recovery_scope(latest)
    if scope not in ("gpu", "node"):
        return []
    summary = f"{latest.summary} (no other fault logged)"
    return [latest.model_copy(update={"isolation": scope, "summary": summary})]


def contextualise(roots: list[Signal]) -> tuple[list[Signal], list[Signal]]:
    """Apply history and co-occurrence to the root candidates: (still candidates, demoted to support)."""
    demoted = [r for r in roots if r.context == "recovery_action"]
    candidates = [r for r in roots if r.context != "recovery_action"] or _lone_recovery_action(demoted)
    demoted = [r for r in demoted if r not in candidates]
    solid = [r for r in candidates if r.context != "sympathetic"]
    if solid:
        demoted += [r for r in candidates if r.context == "sympathetic"]
        candidates = solid
    counts: dict[tuple[str, str | None, str | None, object], int] = {}
    for r in candidates:
        if r.context == "recurrence":
            key = (r.rule, r.node, r.gpu, r.attrs.get("code"))
            counts[key] = counts.get(key, 0) + 1

    def recurring(r: Signal) -> bool:
        return (
            r.context == "recurrence"
            and counts[(r.rule, r.node, r.gpu, r.attrs.get("code"))] >= RECURRENCE_THRESHOLD
        )

    out = [
        r.model_copy(
            update={
                "category": Category.HARDWARE_GPU,
                "isolation": "gpu",
                "summary": f"{r.summary} (repeated on this GPU: hardware suspect)",
            }
        )
        if recurring(r)
        else r
        for r in candidates
    ]
    scope = next((_recovery_scope(r) for r in roots if r.context == "recovery_action"), None)
    if scope is not None:
        out = [
            r.model_copy(update={"isolation": scope}) if r.category == Category.HARDWARE_GPU else r
            for r in out
        ]
    return out, demoted


def _uncorroborated(roots: list[Signal], window: IncidentWindow) -> bool:
    """The (contextualised) roots are only application-class Xids (13, 31: a process faulted on that
    GPU) and nothing else happened.

    The kernel line says a process on the GPU faulted, not which: the job's own (then its ranks
    fail with a CUDA error within seconds, which corroborates it) or another's (a profiler, a
    health check, a co-located job: the driver names it, ``pid=..., name=dcgmproftester12``, and
    training goes on). Alone it is no incident; the node-health detector still counts it, and
    repeated on one GPU it becomes a hardware fault (``contextualise``).

    The streaming correlator applies this (``Verdict.uncorroborated``): it sees every job, failed or
    not. ``sickbay diagnose`` does not: it is pointed at a failed job's logs, where a lone Xid is the
    evidence there is."""
    if not roots:
        return False
    if any(
        r.context != "recurrence" or r.source.kind != "kernel" or r.category != Category.APPLICATION
        for r in roots
    ):
        return False
    return not any(t.samples and t.samples[0].role == Role.CASCADE for t in window.tallies.values())


UNKNOWN_NODE = "unknown-node"


def _isolate(root: Signal) -> list[str]:
    """What to take out of service: ``node``, ``node:gpu``; when the logs never name the host,
    ``gpu:<pci>`` or ``unknown-node`` (an operator can act on it; the scheduler adapters cannot).
    A ``link`` fault isolates only what its own kernel reported: the node, or the GPU when a pasted
    kernel log never names its host."""
    if root.isolation == "none":
        return []
    if root.isolation == "link" and root.source.kind != "kernel":
        # A link has two ends. A peer's complaint (NCCL's "error 12 from peer ...") does not say
        # which end is bad; only the node's own kernel reporting its NIC or link does.
        return []
    if root.node is None:
        return [f"gpu:{root.gpu}"] if root.gpu else [UNKNOWN_NODE]
    if root.isolation == "gpu" and root.gpu:
        return [f"{root.node}:{root.gpu}"]
    return [root.node]


def evidence_of(s: Signal) -> Evidence:
    return Evidence(
        signal_id=s.signal_id,
        rule=s.rule,
        node=s.node,
        rank=s.rank,
        event_time=s.event_time,
        text=s.text[:1024],
        source_kind=s.source.kind,
    )


_COMPANION_NOTES = {
    63: "row remapping pending: reset the GPU to apply it",
    64: "row remapping failed: replace the GPU",
}


def _with_companion(root: Signal, window: IncidentWindow) -> Signal:
    """Xid 48 reads differently beside a row-remap event (63) or a remap failure (64) on the same GPU."""
    codes = {
        s.attrs.get("code")
        for t in window.tallies.values()
        for s in t.samples
        if s.rule == root.rule and s.gpu == root.gpu and s.node == root.node
    } | {s.attrs.get("code") for s in window.roots if s.gpu == root.gpu and s.node == root.node}
    notes = [note for code, note in _COMPANION_NOTES.items() if code in codes]
    if not notes:
        return root
    return root.model_copy(update={"summary": f"{root.summary} ({'; '.join(notes)})"})


def is_lead(s: Signal) -> bool:
    """A hint that may stand in as the root of a log with no root and no cascade."""
    return s.role == Role.HINT and s.context == "lead"


PLUGIN_MISSING_RULE = "nccl.net_plugin_missing"
PLUGIN_LOADED_RULE = "nccl.net_plugin_loaded"


def plugin_skew(window: IncidentWindow) -> Signal | None:
    """Some of the job's nodes load an NCCL network plugin and others fall back to NCCL's internal
    one: the nodes' software stacks differ, and ranks that pick different transports cannot talk
    (NVIDIA/nccl#1634: runs hung whenever they mixed nodes with and without libnccl-net.so). Either
    line alone is fine; together they explain a failure nothing else does. The nodes without the
    plugin stand as the root: system software, not restartable until the stack is made the same,
    nothing drained (installing the plugin is the fix, not losing the node)."""
    missing, loaded = window.tallies.get(PLUGIN_MISSING_RULE), window.tallies.get(PLUGIN_LOADED_RULE)
    if missing is None or loaded is None or not missing.samples or not loaded.nodes:
        return None
    without = sorted(n for n in missing.nodes if n not in loaded.nodes)
    if not without:
        return None
    sample = next((s for s in missing.samples if s.node in without), missing.samples[0])
    return sample.model_copy(
        update={
            "role": Role.ROOT_CANDIDATE,
            "category": Category.SYSTEM_SOFTWARE,
            "restartable": False,
            "isolation": "none",
            "weight": 30,
            "summary": (
                f"NCCL network plugin missing on {', '.join(without[:4])} while "
                f"{', '.join(sorted(loaded.nodes)[:4])} {'loads' if len(loaded.nodes) == 1 else 'load'} "
                "one: the nodes' software stacks differ"
            ),
        }
    )


def _pick_root(window: IncidentWindow) -> tuple[Signal, list[Signal], list[Signal]] | None:
    """The root, the remaining candidates, and those context demoted to supporting evidence."""
    roots, demoted = contextualise(window.roots)
    if roots:
        root = min(roots, key=_root_key)
    elif (skew := plugin_skew(window)) is not None:
        root = skew  # it explains the cascade: ranks on either side of the skew waited on each other
    else:
        heads = [t.samples[0] for t in window.tallies.values() if t.samples]
        stand_ins = [s for s in heads if s.role == Role.CASCADE] or [s for s in heads if is_lead(s)]
        if not stand_ins:
            return None
        root = min(stand_ins, key=_root_key)
    if root.context == "companion":
        root = _with_companion(root, window)
    return root, roots, demoted


def _job_node(name: str, topology: JobTopology | None) -> str | None:
    """``name`` as the scheduler spells it: a rank's hostname may be short where the scheduler's is
    a FQDN (or the reverse). A host that is none of the job's known nodes is not trusted."""
    if topology is None or not topology.nodes:
        return name
    if name in topology.nodes:
        return name
    short = name.split(".", 1)[0]
    matches = [n for n in topology.nodes if n.split(".", 1)[0] == short]
    return matches[0] if len(matches) == 1 else None


HARDWARE = (Category.HARDWARE_GPU, Category.HARDWARE_HOST, Category.HARDWARE_NETWORK)


def on_the_only_node(root: Signal, topology: JobTopology | None) -> Signal:
    """A fault that names no node, of a kind that is some node's (its rule isolates one, or it is a
    hardware fault), in a job that ran on one node only: that node's. A PBS job's mail says "job
    preempted (node failure)" and, a few lines up, the one host it ran on; a pasted dmesg line
    names a GPU but no host. The rule still decides what is isolated: a mail's node failure names
    the culprit and drains nothing. A job on several nodes leaves the culprit open."""
    if root.node is not None or topology is None or len(topology.nodes) != 1:
        return root
    if root.isolation == "none" and root.category not in HARDWARE:
        return root
    return root.model_copy(update={"node": topology.nodes[0]})


def placed(root: Signal, topology: JobTopology | None, place: PlaceOf | None) -> Signal:
    """A training-log root that names its rank is about the node and GPU that rank runs on, which is
    not the host that shipped the line when one host collects the job's output (srun on the batch
    host, a launcher pod). Kernel and scheduler lines already name their own node.

    Where: the rank's own NCCL init line, else a higher rank's of the same block (``infer_place``),
    else Slurm's block layout over the allocation order when the world size is known."""
    if place is None or root.source.kind != "training":
        return root
    rank, srun = root.rank, False
    if rank is None and isinstance(task := root.attrs.get("srun_task"), int):
        rank, srun = task, True
    if rank is None:
        return root
    where = infer_place(rank, place)
    gpu: str | None = None
    if where is not None:
        if srun and (where.task is None or where.task != where.rank):
            return root  # srun's task ids are not ranks in this job (one torchrun per node)
        node, gpu = _job_node(where.node, topology), where.gpu
    elif srun:
        return root  # nothing shows the task ids are ranks
    else:
        world = world_size(place)
        node = _node_of_rank(rank, world, topology, None) if world else None
    if node is None or (node == root.node and (root.gpu or gpu is None)):
        return root
    update: dict[str, object] = {"node": node}
    if root.gpu is None and gpu is not None:
        update["gpu"] = gpu
    if root.node and root.node != node:
        update["attrs"] = {**root.attrs, "logged_on": root.node}
    return root.model_copy(update=update)


def _unplaced(root: Signal) -> bool:
    """A training-log root that no placement has moved yet: its host may be only the collector."""
    return root.source.kind == "training" and "logged_on" not in root.attrs


def _moved_to(root: Signal, node: str, topology: JobTopology | None) -> Signal:
    """``root`` on ``node`` (its GPU unknown there), remembering where it was logged."""
    if node == _job_node(root.node or "", topology):
        return root
    attrs = {**root.attrs, "logged_on": root.node} if root.node else root.attrs
    return root.model_copy(update={"node": node, "gpu": None, "attrs": attrs})


PEER_CLOSED_RULE = "infra.connection_closed_by_peer"


def _named_peer(window: IncidentWindow, topology: JobTopology | None) -> str | None:
    """The one job node the surviving ranks name as the peer that closed on them, if they agree.

    NCCL's ``Last error:`` under a remote error names the dead process's host (``socketProgress:
    Connection closed by remote peer gpu-17<40688>``). A host that is not one of the job's nodes,
    or two different hosts, name nobody."""
    tally = window.tallies.get(PEER_CLOSED_RULE)
    if tally is None:
        return None
    named: set[str] = set()
    for sample in tally.samples:
        peer = sample.attrs.get("peer")
        if isinstance(peer, str) and peer:
            node = _job_node(peer, topology)
            if node is None:
                return None
            named.add(node)
    return named.pop() if len(named) == 1 else None


NAMED_RANK_RULE = "nccl.named_failing_rank"


def _named_rank(
    window: IncidentWindow, topology: JobTopology | None, place: PlaceOf | None
) -> Culprit | None:
    """The one rank PyTorch names as where the failure started, if every naming line agrees.

    The survivors' watchdogs say ``remote error detected from rank: 5`` (the rank whose NCCL error
    they were told of through the store); a desync report names the ranks that lagged. Two ranks
    named, or a list of several, name nobody: the culprit is one place to look, not a guess. Only the
    default process group's numbers are the job's ranks. Its node comes from where the rank runs, when
    the log says."""
    tally = window.tallies.get(NAMED_RANK_RULE)
    if tally is None:
        return None
    named: set[int] = set()
    for sample in tally.samples:
        if sample.attrs.get("pg_id") not in (None, 0):
            continue  # another process group's rank numbers are not the job's
        for key in ("remote_rank", "lagging", "unfinished"):
            value = sample.attrs.get(key)
            if isinstance(value, int):
                named.add(value)
            elif isinstance(value, str) and value:
                named.update(int(r) for r in value.split(", "))
    if len(named) != 1:
        return None
    rank = named.pop()
    world = world_size(place) if place is not None else None
    node = _node_of_rank(rank, world, topology, place) if world is not None else None
    return Culprit(node=node, rank=rank)


PMIX_FENCE_RULE = "infra.pmix_collective_timeout"
PMIX_WAITING_RULE = "infra.pmix_waiting_on"


def _pmix_waited_on(window: IncidentWindow) -> Culprit | None:
    """The one node Slurm's PMIx fence was still waiting for, if every ``wait contrib`` line names
    the same single host. The stepd that logged the timeout is one that arrived, so it is never the
    suspect; a hostlist of several nodes, or lines that disagree, name nobody."""
    tally = window.tallies.get(PMIX_WAITING_RULE)
    if tally is None:
        return None
    named: set[str] = set()
    for sample in tally.samples:
        value = sample.attrs.get("waiting")
        if not isinstance(value, str) or value in ("", "-"):
            continue
        if "[" in value or "," in value:
            return None  # a hostlist of several nodes
        named.add(value)
    return Culprit(node=named.pop()) if len(named) == 1 else None


def with_dead_peer(root: Signal, window: IncidentWindow, topology: JobTopology | None) -> Signal:
    """A training-log root nothing placed yet goes where the dead peer was.

    When srun gathers every rank's output on the batch host, a line's host is the collector, not
    the failing node, and ``RuntimeError: CUDA error: uncorrectable ECC error encountered`` may name
    no rank at all (or one whose init line was never logged). If every surviving rank names one
    other job node as the peer that went away, the line came from there. A root already placed by
    its rank's own init line, or one on the named node, stays."""
    if not _unplaced(root) or topology is None or len(topology.nodes) < 2:
        return root
    peer = _named_peer(window, topology)
    return root if peer is None else _moved_to(root, peer, topology)


def _nccl_release(value: object) -> str | None:
    """``2.18.1+cuda12.4`` → ``2.18.1``: the build suffix is not a different library."""
    return value.split("+", 1)[0] if isinstance(value, str) and value else None


def _version_skew(root: Signal, window: IncidentWindow) -> str | None:
    """The NCCL release the rest of the job runs, when the failing rank's differs from it.

    PyTorch appends ``NCCL version X`` to every NCCL error. If the root's rank loaded one release
    and every other rank that reported an error another, the failing node runs different software
    (a stale image, a library on its local path): the node's fault, and the job runs again without it.
    """
    own = _nccl_release(root.attrs.get("nccl_version"))
    if own is None or root.node is None:
        return None
    others: set[str] = set()
    for tally in window.tallies.values():
        for sample in tally.samples:
            release = _nccl_release(sample.attrs.get("nccl_version"))
            if release is not None and sample.node != root.node:
                others.add(release)
    if len(others) != 1 or own in others:
        return None
    return others.pop()


def _with_version_skew(root: Signal, window: IncidentWindow) -> tuple[Signal, bool]:
    """A root on a node whose NCCL release differs from the job's is that node's fault: excluded,
    and the job restarts without it."""
    expected = _version_skew(root, window)
    if expected is None:
        return root, False
    own = root.attrs.get("nccl_version")
    summary = f"{root.summary}: this node loads NCCL {own}, the job's other ranks {expected}"
    return root.model_copy(update={"isolation": "node", "restartable": True, "summary": summary}), True


def _culprit(
    root: Signal,
    window: IncidentWindow,
    topology: JobTopology | None,
    place: PlaceOf | None,
    is_cascade_root: bool,
    victims: bool,
    finished: bool = False,
) -> Culprit | None:
    if is_cascade_root:
        # a suspect, never a verdict (nothing is isolated on a cascade): the rank every other rank
        # waited for, else the one rank PyTorch itself names, else (a finished log only) the one peer
        # every survivor says went away
        if (silent := _silent_rank(window, topology, place)) is not None:
            return silent
        if (named := _named_rank(window, topology, place)) is not None or not finished:
            return named
        peer = _named_peer(window, topology)
        return Culprit(node=peer) if peer is not None else None
    if victims:
        return None  # the rank that reported the barrier's timeout is one that arrived
    if root.rule == PMIX_FENCE_RULE:
        return _pmix_waited_on(window)  # likewise the stepd that logged the fence's timeout
    return Culprit(node=root.node, gpu=root.gpu, rank=root.rank)


def _tasks_are_ranks(window: IncidentWindow) -> bool:
    """Lines that carry both an srun label and a rank (``2: [Rank 2] Watchdog ...``) all agree."""
    pairs = [
        (s.attrs.get("srun_task"), s.rank)
        for s in [*window.roots, *(x for t in window.tallies.values() for x in t.samples)]
        if s.rank is not None and isinstance(s.attrs.get("srun_task"), int)
    ]
    return bool(pairs) and all(task == rank for task, rank in pairs)


def _world_seen(window: IncidentWindow) -> int | None:
    """The world size when the ranks heard from are dense: 0..max with at most a quarter missing."""
    ranks = {r for t in window.tallies.values() for r in t.ranks}
    ranks.update(s.rank for s in window.roots if s.rank is not None)
    if not ranks:
        return None
    world = max(ranks) + 1
    return world if len(ranks) >= MIN_REPORTING_SHARE * world else None


def with_block_layout(root: Signal, window: IncidentWindow, topology: JobTopology | None) -> Signal:
    """A rank nothing else placed, by Slurm's default block distribution over the allocation order.

    Used only when the ranks heard from make the world size plain and it divides evenly over the
    job's nodes; an srun task id counts as a rank only where lines with both showed them equal."""
    if not _unplaced(root) or topology is None or not topology.ordered or len(topology.nodes) < 2:
        return root
    rank = root.rank
    if rank is None:
        task = root.attrs.get("srun_task")
        if not isinstance(task, int) or not _tasks_are_ranks(window):
            return root
        rank = task
    world, nodes = _world_seen(window), len(topology.nodes)
    if world is None or rank >= world or world % nodes:
        return root
    return _moved_to(root, topology.nodes[rank // (world // nodes)], topology)


WATCHDOG_RULE = "nccl.watchdog_timeout"
MIN_REPORTING_SHARE = 0.75  # of the world's ranks must have reported their timeout
MAX_SILENT_SHARE = 1 / 16  # at most this share may be silent (one node of a 16-node job)


def world_size(place: PlaceOf) -> int | None:
    """The job's world size from any of its first ranks' NCCL init lines."""
    for rank in range(16):
        where = place(rank)
        if where is not None:
            return where.nranks
    return None


def _node_of_rank(rank: int, world: int, topology: JobTopology | None, place: PlaceOf | None) -> str | None:
    """Where a rank runs: its (or a neighbour's) NCCL init line, else Slurm's block layout."""
    where = infer_place(rank, place) if place is not None else None
    if where is not None:
        return _job_node(where.node, topology)
    if topology is not None and topology.ordered and topology.nodes and world % len(topology.nodes) == 0:
        return topology.nodes[rank // (world // len(topology.nodes))]
    return None


def _full_blocks(ranks: int, block: int) -> int:
    """``ranks`` rounded up to whole blocks: every node runs as many ranks."""
    return -(-ranks // block) * block


def _reported_blocks(
    rank_nodes: dict[int, str], topology: JobTopology | None
) -> tuple[int, dict[int, str]] | None:
    """Block size and block index -> node, from the ranks each node's own logs reported.

    Where every node ships its own ranks' logs (a pod's log from its node, per-node files), node A
    reporting ranks 0-7 and node B ranks 8-15 but 11 says rank 11 runs on B. Only when at least two
    nodes reported, each within one aligned block, and no two in the same block; a single
    collecting host (srun's output on the batch host) names nothing."""
    by_node: dict[str, list[int]] = {}
    for rank, node in rank_nodes.items():
        by_node.setdefault(node, []).append(rank)
    if len(by_node) < 2:
        return None
    size = max(max(v) - min(v) + 1 for v in by_node.values())
    blocks: dict[int, str] = {}
    for node, ranks in by_node.items():
        lo, hi = min(ranks) // size, max(ranks) // size
        job_node = _job_node(node, topology)
        if lo != hi or lo in blocks or job_node is None:
            return None
        blocks[lo] = job_node
    return size, blocks


def _silent_rank(
    window: IncidentWindow, topology: JobTopology | None, place: PlaceOf | None
) -> Culprit | None:
    """The rank every other rank waited for: a suspect, never a verdict.

    When a rank hangs (a stuck kernel, a deadlock before the collective) every other rank's watchdog
    times out on the collective it never joined, and the hung rank reports nothing (or an older
    SeqNum): the same reading PyTorch's flight-recorder analysis makes of "missing ranks". Only when
    nearly the whole world reported (``MIN_REPORTING_SHARE``, so a shipper's gaps are not taken
    for silence) and the silent ranks sit on one node is that node named. The category stays
    ``unknown`` and nothing is isolated on a suspicion; the culprit tells the operator where to look.
    """
    tally = window.tallies.get(WATCHDOG_RULE)
    if tally is None or not tally.samples or not tally.ranks:
        return None
    world = world_size(place) if place is not None else None
    blocks = topology is not None and topology.ordered and len(topology.nodes) > 1
    if world is None and blocks:
        # ranks are dense and every node runs as many: a silent last rank rounds up to a full node
        world = _full_blocks(max(tally.ranks) + 1, len(topology.nodes) if topology is not None else 1)
    reported_blocks = None
    if world is None and not blocks and (reported_blocks := _reported_blocks(tally.rank_nodes, topology)):
        world = _full_blocks(max(tally.ranks) + 1, reported_blocks[0])
    if world is None or world < 2 or len(tally.ranks) < MIN_REPORTING_SHARE * world:
        return None  # (checked before any set is built: this runs on every signal of the window)
    reported = {r for r in tally.ranks if 0 <= r < world}
    silent = sorted(set(range(world)) - reported)
    if not silent or len(reported) < MIN_REPORTING_SHARE * world:
        return None
    if len(silent) > max(1, int(world * MAX_SILENT_SHARE)):
        return None
    nodes = set()
    for rank in silent:
        node = _node_of_rank(rank, world, topology, place)
        if node is None and reported_blocks is not None:
            node = reported_blocks[1].get(rank // reported_blocks[0])
        if node is None:
            return None
        nodes.add(node)
    if len(nodes) != 1:
        return None
    return Culprit(node=nodes.pop(), rank=silent[0])


BUSY_RULE = "progress.rank_local_work_bar"
SETUP_BARRIER_RULE = "nccl.watchdog_setup_barrier_timeout"
DEFAULT_COLLECTIVE_TIMEOUT = timedelta(minutes=30)  # PyTorch's default for NCCL process groups


def _busy_rank(window: IncidentWindow) -> Signal | None:
    """A rank that was working on its own while the others timed out waiting for it.

    The others' watchdogs fire ``Timeout(ms)`` after they entered the collective; a rank that
    printed a dataset-preparation or evaluation bar after that moment, and never timed out itself,
    was busy rather than hung (a hung rank prints nothing). Rank-local work outlasted the timeout:
    the application's (restart and it happens again). A bar without a rank label counts for rank 0,
    the main process that does such work, when rank 0 did not time out.
    """
    bars = window.tallies.get(BUSY_RULE)
    if bars is None:
        return None
    timeouts = [s for s in window.roots if s.rule == SETUP_BARRIER_RULE]  # a barrier's: a root candidate
    watch = window.tallies.get(WATCHDOG_RULE)
    if watch is not None:
        timeouts.extend(watch.samples)
    reported = {s.rank for s in timeouts if s.rank is not None}
    if watch is not None:
        reported.update(watch.ranks)
    if not timeouts or not reported:
        return None
    first = min(s.event_time for s in timeouts)
    timeout_ms = timeouts[0].attrs.get("timeout_ms")
    timeout = (
        timedelta(milliseconds=timeout_ms)
        if isinstance(timeout_ms, int) and timeout_ms > 0
        else DEFAULT_COLLECTIVE_TIMEOUT
    )
    waiting_since = first - timeout
    for bar in sorted(bars.samples, key=lambda s: s.event_time, reverse=True):
        if bar.event_time < waiting_since:
            break  # older bars are older still
        if (0 if bar.rank is None else bar.rank) not in reported:
            return bar
    return None


# Collectives whose input size is the same on every rank of a correct program; all-to-all, gather,
# scatter and point-to-point sizes differ by design, and a coalesced group reports none.
SAME_SIZE_OPS = frozenset(
    {"ALLREDUCE", "BROADCAST", "REDUCE", "ALLGATHER", "_ALLGATHER_BASE", "REDUCE_SCATTER"}
    | {"_REDUCE_SCATTER_BASE"}
)


def _same_collective(samples: list[Signal]) -> dict[tuple[str, int, str], dict[int, list[Signal]]]:
    """Watchdog samples by (process group, sequence number, type), then by input size."""
    groups: dict[tuple[str, int, str], dict[int, list[Signal]]] = {}
    for s in samples:
        op, seq, numel = s.attrs.get("op"), s.attrs.get("seq"), s.attrs.get("numel_in")
        if isinstance(op, str) and op in SAME_SIZE_OPS and isinstance(seq, int) and isinstance(numel, int):
            key = (str(s.attrs.get("pg")), seq, op)
            groups.setdefault(key, {}).setdefault(numel, []).append(s)
    return groups


def _mismatched_sizes(window: IncidentWindow) -> tuple[Signal, Culprit | None] | None:
    """Ranks that timed out in the same collective with different input sizes called different
    collectives: the program's (a branch some ranks take, a buffer only some ranks have), the
    reading PyTorch's flight-recorder analysis makes of "collective size mismatch".

    The watchdog's line names the collective's sequence number, type and ``NumelIn``; two ranks at
    the same number of the same process group and type with different sizes cannot both be in one
    correct collective. The rank whose size no other rank shares, when the others agree, is the
    suspect; of two ranks that disagree neither is. Returns the stand-in root (application, not
    restartable) and that suspect, or None."""
    tally = window.tallies.get(WATCHDOG_RULE)
    if tally is None or len(tally.samples) < 2:
        return None
    for (_, seq, op), sizes in sorted(_same_collective(tally.samples).items()):
        if len(sizes) < 2:
            continue
        alone = [group[0] for group in sizes.values() if len(group) == 1]
        odd = alone[0] if len(alone) == 1 and len(sizes) == 2 and sum(map(len, sizes.values())) > 2 else None
        base = odd or next(iter(sizes.values()))[0]
        listed = ", ".join(
            f"{n} on {'/'.join(f'rank {x.rank}' for x in g)}" for n, g in sorted(sizes.items())
        )
        summary = (
            f"ranks timed out in {op} SeqNum {seq} with different sizes ({listed}): mismatched collectives"
        )
        stand_in = base.model_copy(
            update={
                "role": Role.ROOT_CANDIDATE,
                "category": Category.APPLICATION,
                "restartable": False,
                "summary": summary,
            }
        )
        return stand_in, (Culprit(node=odd.node, rank=odd.rank) if odd is not None else None)
    return None


def _waited_on(
    window: IncidentWindow, waited: bool, is_cascade_root: bool
) -> tuple[Signal, Culprit | None] | None:
    """When the reporting ranks only waited, what they waited on, if the log says: a rank busy with
    its own work (``_busy_rank``) or ranks in different collectives (``_mismatched_sizes``). Either
    is the application's; the stand-in root and its culprit, or None."""
    busy = _busy_rank(window) if waited else None
    if busy is not None:
        return busy, _busy_culprit(busy)
    return _mismatched_sizes(window) if is_cascade_root else None


def _busy_culprit(busy: Signal) -> Culprit:
    """The rank the others waited for: where to look, not a node to drain (its work, not its
    hardware, outlasted the timeout). An unlabelled bar is rank 0's, as ``_busy_rank`` reads it."""
    return Culprit(node=busy.node, rank=0 if busy.rank is None else busy.rank)


def _confidence(
    root: Signal, lead: bool, is_cascade_root: bool, cascade_elsewhere: bool, skewed: bool
) -> float:
    """A lead hint below a cascade standing in, below any root; a decisive root highest, higher
    still with the cascade it caused on other nodes; a version skew across nodes is near certain."""
    if lead:
        confidence = 0.2
    elif is_cascade_root:
        confidence = 0.3
    elif root.decisive:
        confidence = 0.95 if cascade_elsewhere else 0.85
    else:
        confidence = 0.7 if cascade_elsewhere else 0.6
    return max(confidence, 0.85) if skewed else confidence


def attribute(
    window: IncidentWindow,
    topology: JobTopology | None,
    place: PlaceOf | None = None,
    finished: bool = False,
) -> Verdict | None:
    """The verdict on a window. ``finished``: the window is a whole log read after the fact
    (``sickbay diagnose``), where a log of victims only may also name the peer they all say went
    away as its suspect. The stream leaves that out: its verdict on a cascade is revised as the
    burst comes in, and naming a peer there made one scoreboard scenario (a busy rank 0 that the
    survivors' connections closed on) end as the peer's suspect instead of rank 0's own work."""
    picked = _pick_root(window)
    if picked is None:
        return None
    root, roots, demoted = picked
    root = on_the_only_node(with_dead_peer(placed(root, topology, place), window, topology), topology)
    root, skewed = _with_version_skew(with_block_layout(root, window, topology), window)
    cascades = [t for t in window.tallies.values() if t.samples and t.samples[0].role == Role.CASCADE]
    is_cascade_root = root.role == Role.CASCADE
    category = Category.UNKNOWN if is_cascade_root else (root.category or Category.UNKNOWN)

    supporting: list[Symptom] = []
    for rule, tally in sorted(window.tallies.items()):
        sample = tally.samples[0]
        if sample.role not in (Role.CASCADE, Role.CONFIRMATION) or tally.first_seen is None:
            continue
        supporting.append(
            Symptom(
                rule=rule,
                summary=sample.summary,
                count=tally.count,
                nodes=sorted(tally.nodes),
                ranks=sorted(tally.ranks),
                first_seen=tally.first_seen,
                sample=sample.text[:1024],
            )
        )
    for other in sorted(roots, key=_root_key) + demoted:
        if other.signal_id == root.signal_id:
            continue
        supporting.append(
            Symptom(
                rule=other.rule,
                summary=other.summary,
                count=1,
                nodes=[other.node] if other.node else [],
                ranks=[other.rank] if other.rank is not None else [],
                first_seen=other.event_time,
                sample=other.text[:1024],
            )
        )

    # The root first, then each tally's first samples and the other candidates, and the lead hints'
    # samples last (the weakest evidence: a traceback's frames next to the exception line they led
    # to); a root that stands in from a tally (a cascade, a lead) is that tally's first sample,
    # listed once.
    evidence: list[Evidence] = []
    listed: set[str] = set()
    heads = [s for t in window.tallies.values() for s in t.samples[:2]]
    leads = [s for s in heads if is_lead(s)]
    for s in (root, *(s for s in heads if not is_lead(s)), *window.roots, *leads):
        if s.signal_id not in listed and len(evidence) < MAX_EVIDENCE:
            listed.add(s.signal_id)
            evidence.append(evidence_of(s))

    kinds = {root.source.kind}
    kinds.update(s.source.kind for t in window.tallies.values() for s in t.samples)
    kinds.update(s.source.kind for s in window.roots)
    if topology is not None and topology.nodes:
        kinds.add("scheduler")

    cascade_elsewhere = any(set(t.nodes) - {root.node} for t in cascades)
    lead = is_lead(root)
    confidence = _confidence(root, lead, is_cascade_root, cascade_elsewhere, skewed)
    victims = is_cascade_root or root.rule == SETUP_BARRIER_RULE  # the reporting ranks only waited
    waited = victims or root.rule == HANG_RULE  # ... or the whole job went silent
    stand_in = _waited_on(window, waited, is_cascade_root)
    if stand_in is not None:  # nobody hung: the application's own work or collectives
        root, culprit = stand_in
        category, confidence = Category.APPLICATION, 0.6
        evidence = [evidence_of(root), *(e for e in evidence if e.signal_id != root.signal_id)][:MAX_EVIDENCE]
    else:
        culprit = _culprit(root, window, topology, place, is_cascade_root, victims, finished)
    restartable = True if root.restartable is None else root.restartable
    return Verdict(
        root=root,
        category=category,
        culprit=culprit,
        isolate=[] if is_cascade_root or lead or stand_in is not None else _isolate(root),
        restartable=restartable,
        confidence=confidence,
        supporting=supporting,
        evidence=evidence,
        coverage=sorted(kinds),
        decisive=root.decisive,
        uncorroborated=_uncorroborated(roots, window),
        provisional=root.attrs.get("provisional") is True,
    )


def root_cause(root: Signal) -> RootCause:
    code = root.attrs.get("code")
    return RootCause(
        rule=root.rule,
        summary=root.summary,
        signal_id=root.signal_id,
        event_time=root.event_time,
        node=root.node,
        gpu=root.gpu,
        rank=root.rank,
        code=code if isinstance(code, int) else None,
        text=root.text[:1024],
    )
