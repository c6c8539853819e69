"""Logs of a pod that never ran, and Fabric Manager's own log, read as what they say.

A ``kubectl describe pod`` pasted into a ticket often holds nothing but its Events table: the image
could not be pulled, no node could take the pod, a volume would not mount. Those are leads (the
stream opens no incident on them: the kubelet and the scheduler retry, and queued jobs print them
all the time), so alone in a finished log they are the answer at the lowest confidence, and any
real root beats them. Fabric Manager's log reports NVSwitch faults in its own words; they read like
the kernel's SXid lines."""

from __future__ import annotations

from pathlib import Path

from streams.diagnose.driver import summary
from tests.diagnose.logs import diagnosed

EVENTS_HEAD = [
    "Events:",
    "  Type     Reason     Age                From               Message",
    "  ----     ------     ----               ----               -------",
]
PULL = [
    '  Normal   Pulling    3m (x4 over 5m)    kubelet            Pulling image "nvcr.io/nvidia/pytorch:24.01-py3"',
    '  Warning  Failed     3m (x4 over 5m)    kubelet            Failed to pull image "nvcr.io/nvidia/pytorch:24.01-py3":'
    " rpc error: code = Unknown desc = failed to resolve reference: pull access denied",
    "  Warning  Failed     3m (x4 over 5m)    kubelet            Error: ErrImagePull",
    "  Warning  Failed     2m (x6 over 5m)    kubelet            Error: ImagePullBackOff",
]
UNSCHEDULABLE = (
    "  Warning  FailedScheduling  2m (x3 over 5m)  default-scheduler  0/8 nodes are available: "
    "8 Insufficient nvidia.com/gpu. preemption: 0/8 nodes are available: 8 No preemption victims found."
)
MOUNT = (
    '  Warning  FailedMount  2m (x3 over 5m)  kubelet  MountVolume.SetUp failed for volume "data" : '
    "mount failed: exit status 32"
)
XID79 = "[ 5321.108101] NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus."


def _diagnose(tmp_path: Path, lines: list[str]) -> dict[str, object]:
    return summary(diagnosed(tmp_path, lines, "describe.txt"))


def test_a_pod_whose_image_cannot_be_pulled_is_infrastructure_and_not_worth_a_restart(tmp_path):
    out = _diagnose(tmp_path, [*EVENTS_HEAD, *PULL])
    assert (out["category"], out["restartable"], out["isolate"]) == ("infrastructure", False, [])
    assert out["root_cause"]["rule"] == "scheduler.k8s_image_pull_failed"
    assert out["confidence"] == 0.2  # a lead standing in, not a root


def test_a_pod_no_node_could_take_waits_for_capacity(tmp_path):
    out = _diagnose(tmp_path, [*EVENTS_HEAD, UNSCHEDULABLE])
    assert (out["category"], out["restartable"]) == ("infrastructure", True)
    assert out["root_cause"]["rule"] == "scheduler.k8s_unschedulable"


def test_a_volume_that_will_not_mount_is_the_storage(tmp_path):
    out = _diagnose(tmp_path, [*EVENTS_HEAD, MOUNT])
    assert (out["category"], out["root_cause"]["rule"]) == ("infrastructure", "scheduler.k8s_mount_failed")


def test_any_root_beats_the_pod_leads(tmp_path):
    """A rescheduled worker that waits for a GPU while the first one died of an Xid 79."""
    out = _diagnose(tmp_path, [XID79, *EVENTS_HEAD, UNSCHEDULABLE, *PULL])
    assert (out["category"], out["root_cause"]["rule"]) == ("hardware_gpu", "gpu.xid")


def test_a_container_oom_killed_while_starting_needs_a_higher_limit(tmp_path):
    line = (
        "  Warning  Failed  113s   kubelet  Error: container create failed: "
        'time="2022-09-14T11:35:13Z" level=error msg="runc create failed: unable to start container '
        'process: container init was OOM-killed (memory limit too low?)"'
    )
    out = _diagnose(tmp_path, [*EVENTS_HEAD, line])
    assert (out["category"], out["restartable"]) == ("infrastructure", False)
    assert out["root_cause"]["rule"] == "scheduler.container_init_oom"


def test_fabric_managers_fatal_nvswitch_error_drains_the_node_it_names(tmp_path):
    lines = [
        "[Jul 09 2024 18:14:07] [ERROR] [tid 12727] detected NVSwitch non-fatal error 12028 on fid 0 "
        "on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 61",
        "[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 on "
        "NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33",
    ]
    folder = tmp_path / "hgx-b200-07"
    folder.mkdir()
    prompt = "[root@hgx-b200-07 ~]# tail /var/log/fabricmanager.log"
    out = summary(diagnosed(folder, [prompt, *lines], "fabricmanager.log"))
    assert (out["category"], out["restartable"], out["isolate"]) == ("hardware_gpu", True, ["hgx-b200-07"])
    assert out["root_cause"]["rule"] == "gpu.fm_sxid_fatal"


def test_fabric_manager_aborting_for_a_missing_nvswitch_is_the_nodes_hardware(tmp_path):
    line = (
        "Sep 08 23:21:50 dgx-11 nv-fabricmanager[1929729]: detected number of NVSwitches don't match "
        "with any supported system topology, aborting fabric manager"
    )
    out = _diagnose(tmp_path, [line])
    assert (out["category"], out["isolate"]) == ("hardware_gpu", ["dgx-11"])
