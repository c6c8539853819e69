"""Formats the thread set's round 23 taught: a pod that cannot reach the Kubernetes API, an RDMA
device plugin whose selectors catch a device without RDMA, XLA unable to link its kernels and
TensorFlow's collective groups of different sizes.

The shapes are real threads' (kubeflow/mpi-operator#407, Mellanox/k8s-rdma-shared-dev-plugin#94,
stanford-crfm/levanter#113, tensorflow/tensorflow#61314); the verdict is what each thread settled."""

from __future__ import annotations

from tests.diagnose.logs import verdict


def test_an_init_container_that_cannot_reach_the_api_server_is_the_clusters_setup(tmp_path):
    lines = [
        "Failed to list *v1.Pod: Get https://10.43.0.1:443/api/v1/namespaces/adrian/pods?limit=500&"
        "resourceVersion=0: dial tcp 10.43.0.1:443: connect: connection refused",
    ]
    assert verdict(tmp_path, lines) == ("infra.kube_api_unreachable", "infrastructure", False, [])


def test_an_api_server_refusing_the_pods_account_is_no_network_fault(tmp_path):
    lines = [
        'Failed to list *v1.Pod: pods is forbidden: User "system:serviceaccount:default:default" cannot list '
        'resource "pods" in API group "" in the namespace "default"',
    ]
    assert verdict(tmp_path, lines)[0] != "infra.kube_api_unreachable"


def test_an_rdma_device_plugin_matching_a_device_without_rdma_is_its_configuration(tmp_path):
    lines = [
        'error creating new device: "missing RDMA device spec for device 0000:e1:00.0, RDMA device \\"issm\\" '
        'not found"',
    ]
    assert verdict(tmp_path, lines) == ("infra.rdma_device_plugin_config", "infrastructure", False, [])


def test_xla_unable_to_link_its_gpu_kernels_is_the_cuda_toolkit(tmp_path):
    lines = [
        "2023-05-02 15:08:43.208417: E external/xla/xla/service/gpu/gpu_compiler.cc:1592] The CUDA linking API "
        "did not work. Please use XLA_FLAGS=--xla_gpu_force_compilation_parallelism=1 to bypass it, but expect to "
        "get longer compilation time due to the lack of multi-threading. Original error: INTERNAL: nvlink exited "
        "with non-zero error code 256, output: nvlink fatal   : Input file '/tmp/tempfile-194ceb5c-1'",
    ]
    assert verdict(tmp_path, lines) == ("cuda.xla_linking_failed", "system_software", False, [])


def test_tensorflow_devices_joining_collective_groups_of_other_sizes_is_the_program(tmp_path):
    lines = [
        "Device /job:localhost/replica:0/task:0/device:GPU:1 is joining a group with size 2, but that group has "
        "size 3 (group_key=1)",
    ]
    assert verdict(tmp_path, lines) == ("framework.tf_collective_group_mismatch", "application", False, [])


def test_a_gpu_joining_a_collective_group_of_cpu_devices_is_the_program(tmp_path):
    """tensorflow#60847: MultiWorkerMirroredStrategy with CPU and GPU workers in one group."""
    lines = [
        "2023-06-13 13:30:32.188736: E tensorflow/core/common_runtime/base_collective_executor.cc:249] "
        "BaseCollectiveExecutor::StartAbort INTERNAL: Device /job:worker/replica:0/task:1/device:GPU:0 is joining "
        "a group with incompatible device typeCPU (group_key=3)",
    ]
    assert verdict(tmp_path, lines) == ("framework.tf_collective_group_mismatch", "application", False, [])
