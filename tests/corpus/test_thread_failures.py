"""``sickbay diagnose`` on 764 more real failure logs from public threads (thread-failures.jsonl).

Collected on 2026-11-30 in four rounds, on 2026-12-01 in a fifth to a tenth round, on 2026-12-03 in an eleventh to a fourteenth on 2026-12-04 in a fifteenth to a twentieth and on 2026-12-05 in a twenty-first to a thirty-fourth, from public threads the
82-case corpus does not use, labelled by the same conventions (tests/corpus/README.md). Each round
was read blind first, with the rules of the rounds before it, and only then were rules written for
its misses (category / restartable / isolate right):
- round 1 (42 cases): 16, 27, 33 blind; 27, 28, 40 after its rules;
- round 2 (46 cases): 25, 32, 41 blind; 31, 37, 41 after;
- round 3 (45 cases): 19, 26, 37 blind; 23, 29, 38 after;
- round 4 (45 cases): 19, 22, 34 blind; 22, 22, 36 after;
- round 5 (33 cases): 15, 15, 27 blind; 21, 21, 28 after (with wrapped lines read whole);
- round 6 (16 cases): 5, 5, 14 blind; 7, 7, 14 after;
- round 7 (30 cases): 18, 20, 27 blind; 20, 22, 27 after;
- round 8 (24 cases): 12, 13, 22 blind; 16, 18, 23 after;
- round 9 (15 cases): 10, 13, 13 blind; 15, 15, 14 after;
- round 10 (3 cases): 0, 1, 3 blind; no rules written for it;
- round 11 (8 cases): 5, 5, 8 blind; 7, 7, 8 after;
- round 12 (18 cases): 8, 9, 18 blind; 11, 12, 18 after;
- round 13 (5 cases): 2, 3, 5 blind; 4, 5, 5 after;
- round 14 (1 case): 1, 0, 1 blind; no rule written for it;
- round 15 (24 cases): 8, 10, 18 blind; 19, 18, 24 after;
- round 16 (25 cases): 14, 17, 25 blind; 19, 19, 25 after;
- round 17 (23 cases): 10, 9, 20 blind; 14, 14, 21 after;
- round 18 (25 cases): 7, 8, 19 blind; 14, 14, 20 after;
- round 19 (30 cases): 13, 17, 26 blind; 18, 22, 27 after;
- round 20 (19 cases): 12, 11, 17 blind; 15, 14, 17 after;
- round 21 (25 cases): 14, 18, 23 blind; 19, 20, 24 after;
- round 22 (27 cases): 10, 13, 25 blind; 15, 17, 26 after;
- round 23 (8 cases): 1, 3, 8 blind; 5, 7, 8 after;
- round 24 (23 cases): 10, 17, 18 blind; 20, 21, 21 after;
- round 25 (38 cases): 10, 11, 34 blind; 26, 24, 36 after;
- round 26 (28 cases): 9, 15, 24 blind; 19, 23, 27 after;
- round 27 (41 cases): 19, 24, 36 blind; 27, 29, 37 after;
- round 28 (17 cases): 5, 11, 15 blind; 9, 11, 15 after;
- round 29 (9 cases): 5, 5, 9 blind; 6, 6, 9 after;
- round 30 (7 cases): 3, 5, 7 blind; 4, 5, 7 after;
- round 31 (20 cases): 7, 14, 15 blind; 10, 16, 15 after;
- round 32 (12 cases): 5, 5, 12 blind; 9, 9, 12 after;
- round 33 (9 cases): 4, 6, 9 blind; 5, 7, 9 after;
- round 34 (23 cases): 8, 10, 23 blind; 12, 13, 23 after.
After round 4: category 103, restartable 116, isolate 155; with six rules for formats no rule knew
and lead hints (2026-12-01, tests/corpus/README.md, docs/rules.md): category 111, restartable 120,
isolate 156. With round 5's rules and wrapped lines read whole, the first 178 read 115 / 125 / 157,
and all 211 read 136 / 146 / 185; with round 6 and its rules all 227 read 143 / 153 / 199; with round 7 and its rules all 257 read
163 / 175 / 226; with round 8 and its rules all 281 read 179 / 195 / 249; with round 9 and its rules all 296 read
195 / 210 / 264, and with round 10 all 299 read 195 / 211 / 267. With srun's launch failures and the traceback lead
(2026-12-02) they read 201 / 215 / 267; with NVML's "Unknown Error" read as NVIDIA's container stack
(system software), glog/absl failed checks, torchelastic's `got sigval:1` form, the container
runtime's driver timeout and NCCL's bootstrap failing with a system error, 208 / 221 / 268; with
an InfiniBand port listed as not linked (`rdma link`, `ibstat`, 2026-12-03) 209 / 221 / 268, and
with NCCL finding no path back in the topology and older torch's internal-error line 210 / 223 / 268;
with the Xid as DCGM, NVSentinel and a quoted kernel line report it and NCCL's GPUDirect RDMA
being off (2026-12-03) 212 / 224 / 268,
and with TensorFlow's path not found 213 / 225 / 268. With round 11 and its rule (DDP's list of
parameters that got no gradient) all 307 read 220 / 232 / 276; with round 12 and its rules (the shell's `Killed` and exit 137,
Slurm's client refusing a GRES, kernels built for another compute capability) all 325 read
231 / 244 / 294 (245 with `kubectl get pods -A` rows); with round 13 and its rules (older torch's
NCCL invalid usage, vLLM's allocator out of memory) all 330 read 235 / 250 / 299,
and with round 14 all 331 read 236 / 250 / 300. With runc's container-init OOM kill (2026-12-04)
237 / 251 / 300. With round 15 and its rules (Fabric Manager's own configuration and ib_umad
failures, nvidia-smi finding no GPU, NVML's mismatch as the container toolkit wraps it, UCX's
shared memory, NCCL's graph file, MPI_Init, a verbs provider missing from the image) all 355 read
256 / 269 / 324; with round 16 and its rules (imports between ML libraries of releases that do not
go together, DeepSpeed's ZeRO-3 no_sync, TensorFlow ops missing from a build, ROCm's runtime on an
older host driver) all 380 read 276 / 288 / 349; with round 17 and its rules (NCCL's rings that do
not close, its socket transport over container bridges and a graph file set by the environment as
leads, NVLS no longer blamed for CUDA that could not initialise at all) all 403 read
291 / 303 / 370; with round 18 and its rules (containers pyxis and enroot could not start, ssh keys
refused, PMIx and ORTE that could not initialise, Gloo on a loopback address or an unresolvable
host, the NVLink fabric state out of sync, NaN in a step table's columns) all 428 read
305 / 317 / 390; with round 19 and its rules (NVML's mismatch as nvidia-docker 1.0 and an older
library report it, the container CLI unable to parse the host's IMEX info, Megatron's LR scheduler
against its checkpoint, Kubernetes refusing a job's object, NCCL 2.19+'s form of a network plugin
that cannot load) all 458 read 323 / 339 / 417; with round 20 and its rules (argparse refusing a
launcher's command line, EFA's libfabric out of locked memory, AWS quota and capacity codes, AWS
Batch's instance terminated under a job) all 477 read 338 / 353 / 434; with round 21 and its rules
(CUDA's contained error, Gloo ranks of two address families, HDF5's I/O error, an object store out
of reach, Slurm refusing an account or partition as the job's own) all 502 read 357 / 373 / 458; with
round 22 and its rules (host memory exhausted, a proprietary kernel module on a GPU that needs the
open one, nvidia-peermem against another InfiniBand stack, Ray's /dev/shm and worker-group timeout,
Abseil's fatal-signal report) all 529 read 372 / 390 / 484; with round 23 and its rules (a pod that
cannot reach the API server, an RDMA device plugin's selectors, XLA's kernel linking, TensorFlow's
collective groups) all 537 read 377 / 397 / 492; with Gloo's and JAX's timeouts read as cascades,
watchdog lines without their rank prefix and TensorFlow's groups of another device type, 378 / 398 / 492;
with ranks timing out in one collective with different sizes read as mismatched collectives,
379 / 399 / 492. verl#548 was relabelled application (its fix was the job's own launch script, as
its evidence says), and Slurm's "Requested node configuration is not available" is now the job's
request; with round 24 and its rules (InfiniBand retries exhausted as Open MPI's openib, UCX's verbs
transports and HPE MPT word it, Slingshot's cxi queues, a node PALS cannot reach, the BMC's
uncorrectable DIMM events, a squashfs file given to pyxis as a registry image, Moab's memory
kill, a crash-looping GPU device plugin) all 560 read 400 / 421 / 513; with round 25 and its rules
(Cray MPICH's NIC policy, GTL and thread assertion, Cray PMI, Slingshot's cxil_map, PALS's rebooted
node and VNI allocator, NCCL told to use a network it has no plugin for, aws-ofi-nccl without GDR or
on libfabric's tcp provider, the EFA device plugin without devices, a node that does not know the
job's user, an image without glibc's ldconfig, enroot unable to set capabilities, a prolog that
hung; pyxis's own summary line a catch-all behind the reason its engine log gives) all 598 read
426 / 445 / 549; with round 26 and its rules (TensorFlow's checkpoint writer out of room, storage
without a call the job made, network storage's EREMOTEIO, a health check that could not run, DCGM's
IMEX not ready and its host engine out of reach, nvidia-smi's pending row remaps, Fabric Manager's
mismatch and mlx5's health line as web pages quote them; NCCL's internal error a catch-all behind
its "Last error:") all 626 read 446 / 468 / 576; with a watchdog stuck after ranks warned at exit
read as a hang in teardown (ms-swift#7992), 447 / 469 / 576; with round 27 and its rules (a Slurm
client that could not reach its controller or a free node, EFA's failed handshake, NCCL peers on
different socket types, UCX's queue that memlock kept from being made, Horovod's stall warning and
NCCL's duplicate GPU as logs quote them, a PyTorch without NCCL; enroot's failed capabilities
draining the node, as InferenceX#1467 and #1477 asked) all 667 read 474 / 498 / 614; with round 28
and its rules (ROCm aborting a faulted kernel's queue, HIP's error 218, pyxis unable to create the
container's file system, and a busy GPU in exclusive mode read as the job's own placement) all 684
read 484 / 509 / 629; with round 29 and its rule (SageMaker without capacity) all 693 read
490 / 515 / 638; with round 30 and its rule (an NCCL process group where no GPU is visible) all 700
read 494 / 520 / 645; with round 31 and its rules (an invalid device ordinal read as the launch's
mapping, the kubelet refusing a GPU pod at admission as a catch-all behind the device plugin's lost
GPU, a py-bt or faulthandler dump read as a hang) all 720 read 506 / 538 / 661; with round 32 and
its rules (Cray MPICH's CUDA IPC failing under per-task GPU binding, an MPI component the image
lacks) all 732 read 515 / 547 / 673; with round 33 and its rule (JAX 0.4.26's backend asking a GPU
before cuInit) all 741 read 521 / 555 / 682; with round 34 and its rules (GPUDirect's peer-memory
module missing, UCX's queue with its size named read as memlock, Cray MPICH's CXI queue running out)
all 764 read 533 / 568 / 705. Reading HIP's own messages as CUDA's (2026-12-05, from ROCm's texts, no
new round) moved two: WarpX#6542's "no ROCm-capable device is detected" is the job's device
visibility, as the thread settled, and sglang#24011's HIP error now reads as CUDA's would (still not
the ROCm bug the thread found): 534 / 569 / 705. Ray's task-on-a-dead-node line read as the node Ray
marked dead (marin#2377: its node named, restartable): 534 / 570 / 705.
The floors sit just under that; raise them when attribution improves.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.corpus.scoring import THREADS, Outcome, rate, score, table


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> list[Outcome]:
    return score(Path(tmp_path_factory.mktemp("threads")), THREADS)


def test_the_thread_set_is_764_cases_apart_from_the_given_corpus(outcomes):
    from schemas import codec
    from tests.corpus.scoring import CORPUS

    given = {codec.loads(line)["source_url"] for line in CORPUS.read_text().splitlines()}
    threads = [codec.loads(line) for line in THREADS.read_text().splitlines()]
    assert len(outcomes) == len(threads) == 764
    assert not given & {t["source_url"] for t in threads}


def test_category_accuracy_stays_above_its_floor(outcomes):
    """534 of 764. Round 34 took it from 0.70 to 0.69: its setups on the newest platforms (IMEX channels
    a container lacks, fabric handles on a node that is not an NVL72, NVSHMEM's IBGDA transport) read
    without a verdict, and their lines alone do not say whose the fault is."""
    assert rate(outcomes, lambda o: o.got_category == o.want_category) >= 0.69, table(outcomes)


def test_gpu_faults_are_recognised(outcomes):
    """32 of 49. Round 19 added two no line can tell: a row-remap Xid 63 (an event NVIDIA calls
    informational) that the team acted on, and a CI runner's GPU seen only as nvidia-smi timing out;
    round 21 a GB200 GPU whose CUDA_ERROR_ILLEGAL_INSTRUCTION (a program's fault, read alone) only
    the thread's table of runs by node tied to the hardware (marin#7956); round 24 a card whose only
    line is CUDA's "unspecified launch failure" until swapping it fixed the job (MinerU#426); round
    26 an AMD GPU whose badly seated riser showed only as a task hung in amdgpu (ROCm
    tensorflow-upstream#180); round 27 an NVLink bridge not seated, whose only lines are
    all_reduce_perf's table (nccl#340); round 28 a GPU whose failing HBM a reporter describes in
    prose, quoting its Xids rather than the kernel's lines (vllm-backport#62). The two took the floor
    from 0.68 to 0.65. Round 31 added an H100 whose Xid 94 only the reporter's prose mentions
    (k8s-device-plugin#1014) and a GPU whose only lines are libcuda segfaults (trixie#55)."""
    gpu = [o for o in outcomes if o.want_category == "hardware_gpu"]
    assert rate(gpu, lambda o: o.got_category == "hardware_gpu") >= 0.65, table(outcomes)


def test_restartability_stays_above_its_floor(outcomes):
    """570 of 764. Round 22 lowered it: its cluster-tooling bugs (a controller's memory leak, a
    launcher's rendezvous race, Ray core crashing) read as the program's or as unexplained."""
    assert rate(outcomes, lambda o: o.got_restartable == o.want_restartable) >= 0.73, table(outcomes)


def test_isolation_advice_stays_above_its_floor(outcomes):
    assert rate(outcomes, lambda o: o.got_isolate == o.want_isolate) >= 0.90, table(outcomes)


def test_only_six_known_cases_isolate_a_healthy_node(outcomes):
    """Six cases drain a node the thread labels no fault of. Any other false isolation fails here.
    - Azure's NHC failed a check on healthy nodes twice: its NVLink and P2P checks on NCv5 nodes
      whose missing links are by design (azurehpc-health-checks#162), and its NCCL all-reduce
      bandwidth check on H100/H200 nodes because the check set its own NCCL_TOPO_FILE
      (azurehpc-health-checks#142). sickbay follows the site's health check, as Slurm does; the
      check was the fault.
    - NCCL's NVLS setup failed with CUDA's 'invalid argument' on nodes with a 12.2 driver, an NCCL
      2.26.2 bug fixed in 2.26.5 (pytorch#150852). The same line is what a host whose Fabric Manager
      is down or was restarted prints (nccl#1488 in the given set, pytorch#177472, nccl-tests#276,
      nccl#976 here, all isolating the host), and the log cannot tell the two apart.
    - slurmctld set a node INVAL because it registered 3 GPUs of the 4 slurm.conf gave it
      (puppet-magic_castle#361): an admin had cut the node's MIG partitions from 4 to 3. The line is
      the one a GPU fallen off the bus gives, and Slurm has drained the node itself.
    - An EKS image loaded the proprietary kernel module on g7 nodes whose GPUs need the open one
      (amazon-eks-ami#2769), so every GPU failed RmInitAdapter; the fix was the image's. The node
      cannot use a GPU until it boots another image, which is what a Fabric Manager or NVML mismatch
      does too, and those are drained by both sets' labels.
    - Cray's GPU transport layer found "no CUDA-capable device" because, after a system update,
      srun had to be given --gpus (gafusion/gacode#363). The same words are what a node whose driver
      is gone prints (shine-cluster#50, drained), and one rank's log cannot tell the two apart."""
    wrong = [o.id for o in outcomes if o.got_isolate and not o.want_isolate]
    assert wrong == [
        "azurehpc-health-checks-162-ncv5-nvlink-by-design",
        "pt-150852",
        "azurehpc-nhc-142-topofile-false-fail",
        "magic-castle-361-mig-count-change-gres-inval",
        "eks-ami-2769-g7-proprietary-kmod",
        "gacode-363-perlmutter-srun-missing-gpus",
    ], table(outcomes)


def test_the_culprit_the_thread_names_is_named_no_less_often(outcomes):
    """103 cases name a culprit, most in words no log line has ("the node the maintainer drained");
    26 are named (10 before 2026-12-02; round 11 added returnn#1486's GPU, which NVML names;
    2026-12-04 the busy rank 0 that nanotron#204's other ranks timed out waiting for, round 15's
    GPU of open-gpu-kernel-modules#446, which its Xid 119 lines name, and round 17's workstation of
    pytorch#73790, which its NCCL lines name; later that day madgraph4gpu#996's host, which its pasted
    ``uname`` names, and two hosts the matcher missed for want of a digit in their names, errol
    and bock; round 19's failed Slurm node (idefics tr141), its Xid 64 GPU (idefics 80B) and
    nccl#1338's node2, which their lines name; round 24's Aurora node that PALS could not reach and
    round 25's that PALS found rebooted). Round 27's three are a bridge and two hosts no line names, round 28's a GPU and three
    hosts; round 31's cn110 (trixie#55) its kernel lines name, and a host that rebooted (vllm#2692)
    none does; round 32's node08, which nccl#328's NCCL lines name; 2026-12-05 marin#2377's Ray node,
    which Ray's "Task failed because the node it was running on is dead" line names."""
    named = [o for o in outcomes if o.want_culprit]
    assert len(named) == 103
    assert sum(o.culprit_named for o in named) >= 26, [(o.id, o.want_culprit, o.got_culprit) for o in named]
