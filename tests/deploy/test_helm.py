"""The Helm chart: lint, what `helm template` renders, what values.schema.json refuses, and that the
adapter's RBAC is exactly the calls connectors/actuators/kubernetes_adapter.py makes."""

from __future__ import annotations

import json
import re
from typing import Any

from streams.settings import REPO_ROOT, Settings
from tests.deploy.conftest import CHART, by_kind, helm_run

WORKLOADS = ("StatefulSet", "Deployment", "DaemonSet")


def _containers(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for d in docs:
        if d["kind"] in (*WORKLOADS, "Job"):
            spec = d["spec"]["template"]["spec"]
            for c in spec["containers"]:
                out[d["metadata"]["name"]] = {**c, "_pod": spec, "_kind": d["kind"]}
    return out


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_chart_passes_helm_lint_strict(helm):
    done = helm_run(helm, "lint", "--strict", str(CHART))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


def test_default_render_has_one_workload_of_the_right_kind_per_role(render):
    docs = render()
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in WORKLOADS}
    assert kinds == {
        ("StatefulSet", "sb-sickbay-worker"),
        ("Deployment", "sb-sickbay-sink-clickhouse"),
        ("Deployment", "sb-sickbay-api"),
        ("Deployment", "sb-sickbay-adapter-kubernetes"),
        ("Deployment", "sb-sickbay-collect-kubernetes"),
        ("DaemonSet", "sb-sickbay-collect-files"),
    }
    assert "sb-sickbay-collect-nvml" not in {d["metadata"]["name"] for d in docs}  # optional, off


def test_workers_keep_rocksdb_on_claims_and_join_kafka_with_their_pod_name(render):
    sts = by_kind(render(), "StatefulSet")["sb-sickbay-worker"]
    assert sts["spec"]["serviceName"] == "sb-sickbay-worker"
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "state"
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    pod = sts["spec"]["template"]["spec"]
    names = {v["name"] for v in pod["volumes"]}
    assert "state" not in names  # the claim, not an emptyDir
    (c,) = pod["containers"]
    assert {"name": "state", "mountPath": "/var/lib/sickbay"} in c["volumeMounts"]
    env = _env(c)
    assert env["SICKBAY_STATE_DIR"] == "/var/lib/sickbay"
    assert env["CONSUMER_GROUP_INSTANCE_ID"] == "$(POD_NAME)"
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    order = [e["name"] for e in c["env"]]
    assert order.index("POD_NAME") < order.index(
        "CONSUMER_GROUP_INSTANCE_ID"
    )  # $(VAR) needs it defined first
    assert c["args"] == ["worker"]


def test_node_collector_reads_host_var_log_read_only_with_the_node_name_as_host(render):
    ds = by_kind(render(), "DaemonSet")["sb-sickbay-collect-files"]
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert {"name": "varlog", "hostPath": {"path": "/var/log", "type": "Directory"}} in pod["volumes"]
    assert {"name": "varlog", "mountPath": "/var/log", "readOnly": True} in c["volumeMounts"]
    assert c["args"][:2] == ["collect", "files"]
    assert c["args"][c["args"].index("--host") + 1] == "$(NODE_NAME)"
    assert 4 in pod["securityContext"]["supplementalGroups"]  # adm reads kern.log
    assert pod["tolerations"] == [{"operator": "Exists"}]


def test_nvml_collector_is_one_switch_away_and_runs_only_on_gpu_nodes(render):
    ds = by_kind(render("--set", "roles.collect-nvml.enabled=true"), "DaemonSet")["sb-sickbay-collect-nvml"]
    pod = ds["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["containers"][0]["args"] == ["collect", "nvml", "--node", "$(NODE_NAME)"]


def test_a_new_role_is_one_values_entry(render):
    role = {"enabled": True, "kind": "Deployment", "args": ["collect", "prometheus"], "replicas": 1}
    docs = render("--set-json", f"roles.collect-prometheus={json.dumps(role)}")
    dep = by_kind(docs, "Deployment")["sb-sickbay-collect-prometheus"]
    assert dep["spec"]["template"]["spec"]["containers"][0]["args"] == ["collect", "prometheus"]
    assert "sb-sickbay-collect-prometheus" in by_kind(docs, "ServiceAccount")
    assert "sb-sickbay-collect-prometheus" not in by_kind(docs, "PodDisruptionBudget")  # none asked for
    assert "sb-sickbay-collect-prometheus" not in by_kind(docs, "ClusterRole")  # no rules, no role


def test_observe_mode_is_the_default_everywhere(render):
    for name, c in _containers(render()).items():
        assert _env(c)["SICKBAY_MODE"] == "observe", name
    for c in _containers(render("--set", "mode=act")).values():
        assert _env(c)["SICKBAY_MODE"] == "act"


def test_every_pod_runs_non_root_read_only_without_service_links_and_with_requests(render):
    for name, c in _containers(render()).items():
        pod = c["_pod"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] != 0, name
        assert pod["enableServiceLinks"] is False, (
            name
        )  # a Service named sickbay-api would set SICKBAY_API_PORT
        assert c["securityContext"]["readOnlyRootFilesystem"] is True, name
        assert c["securityContext"]["allowPrivilegeEscalation"] is False, name
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"], name
        assert set(c["resources"]["requests"]) == {"cpu", "memory"}, name
        assert "memory" in c["resources"]["limits"], name


def test_long_running_roles_have_probes_and_replicated_roles_have_disruption_budgets(render):
    docs = render()
    containers = _containers(docs)
    worker, api = containers["sb-sickbay-worker"], containers["sb-sickbay-api"]
    assert worker["livenessProbe"]["tcpSocket"]["port"] == "web"
    assert worker["startupProbe"]["failureThreshold"] * worker["startupProbe"]["periodSeconds"] >= 300
    assert {"name": "SICKBAY_FAUST_WEB_ENABLED", "value": "true"} in worker["env"]
    assert api["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert api["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    pdbs = by_kind(docs, "PodDisruptionBudget")
    replicated = {d["metadata"]["name"] for d in docs if d["kind"] in ("StatefulSet", "Deployment")}
    assert set(pdbs) == replicated
    for pdb in pdbs.values():
        assert pdb["spec"]["maxUnavailable"] == 1
        assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]


def test_only_roles_that_call_the_api_server_get_a_token_and_a_cluster_role(render):
    docs = render()
    tokens = {n for n, c in _containers(docs).items() if c["_pod"].get("automountServiceAccountToken")}
    assert tokens == {"sb-sickbay-adapter-kubernetes", "sb-sickbay-collect-kubernetes"}
    bindings = by_kind(docs, "ClusterRoleBinding")
    subjects = {s["name"] for b in bindings.values() for s in b["subjects"]}
    assert subjects == tokens
    for b in bindings.values():
        assert b["subjects"][0]["namespace"] == "sickbay"


def _adapter_calls() -> set[tuple[str, str]]:
    """(resource, verb) for every lightkube call in the Kubernetes adapter, read from its source."""
    src = (REPO_ROOT / "connectors" / "actuators" / "kubernetes_adapter.py").read_text()
    verbs = {"get": "get", "list": "list", "patch": "patch", "delete": "delete", "create": "create"}
    verbs |= {"replace": "update", "watch": "watch", "apply": "patch"}
    resources = {"Node": "nodes", "Pod": "pods", "event": "events", "Event": "events"}
    workloads = ("pytorchjobs", "trainjobs", "workloads")  # `res` is one of WORKLOAD_RESOURCES
    calls: set[tuple[str, str]] = set()
    for verb, arg in re.findall(r"self\.client\.(\w+)\(\s*(\w+)", src):
        assert verb in verbs, f"the adapter calls client.{verb}: map it to an RBAC verb here and in the chart"
        if arg == "res":
            calls |= {(w, verbs[verb]) for w in workloads}
        else:
            assert arg in resources, f"client.{verb}({arg}): which resource is that?"
            calls.add((resources[arg], verbs[verb]))
    assert len(calls) >= 8, calls  # the regex still finds the adapter's calls
    return calls


def test_adapter_rbac_grants_exactly_the_calls_the_adapter_makes(render):
    roles = by_kind(render(), "ClusterRole")
    rules = roles["sickbay-sb-sickbay-adapter-kubernetes"]["rules"]
    granted = {(res, verb) for r in rules for res in r["resources"] for verb in r["verbs"]}
    assert granted == _adapter_calls()
    groups = {res: r["apiGroups"] for r in rules for res in r["resources"]}
    assert groups["nodes"] == groups["pods"] == groups["events"] == [""]
    assert groups["pytorchjobs"] == ["kubeflow.org"]
    assert groups["trainjobs"] == ["trainer.kubeflow.org"]
    assert groups["workloads"] == ["kueue.x-k8s.io"]


def test_kubernetes_collector_may_only_read(render):
    rules = by_kind(render(), "ClusterRole")["sickbay-sb-sickbay-collect-kubernetes"]["rules"]
    assert {v for r in rules for v in r["verbs"]} == {"get", "list", "watch"}


def test_external_kafka_and_clickhouse_come_from_values_and_secrets_by_reference(render):
    docs = render(
        "--set",
        "kafka.bootstrap=kafka-0.k:9092\\,kafka-1.k:9092",
        "--set",
        "clickhouse.urlSecret.name=ch-credentials",
        "--set-json",
        'secretEnv={"SICKBAY_API_TOKEN": {"name": "sickbay-api", "key": "token"}}',
    )
    api = _containers(docs)["sb-sickbay-api"]
    env = _env(api)
    assert env["SICKBAY_KAFKA_BOOTSTRAP"] == "kafka-0.k:9092,kafka-1.k:9092"
    assert env["CLICKHOUSE_URL"] == {"secretKeyRef": {"name": "ch-credentials", "key": "url"}}
    assert env["SICKBAY_API_TOKEN"] == {"secretKeyRef": {"name": "sickbay-api", "key": "token"}}
    assert not by_kind(docs, "Secret")  # the chart never holds a secret itself


def test_every_sickbay_variable_the_chart_sets_is_a_setting(render):
    fields = {f"SICKBAY_{name.upper()}" for name in Settings.model_fields}
    extra_ok = {"SICKBAY_API_TOKEN"}  # connectors/api/settings.py (SICKBAY_API_*)
    docs = render("--set-json", 'secretEnv={"SICKBAY_API_TOKEN": {"name": "a", "key": "b"}}')
    for name, c in _containers(docs).items():
        unknown = {k for k in _env(c) if k.startswith("SICKBAY_")} - fields - extra_ok
        assert unknown == set(), (name, unknown)


def test_topics_are_created_by_a_pre_install_hook_before_any_worker(render):
    job = by_kind(render(), "Job")["sb-sickbay-topics"]
    ann = job["metadata"]["annotations"]
    assert set(ann["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["args"] == ["topics", "create"]
    assert _env(c)["SICKBAY_REPLICATION_FACTOR"] == "3"


def test_service_monitor_is_a_toggle(render):
    assert not by_kind(render(), "ServiceMonitor")
    sms = by_kind(render("--set", "serviceMonitor.enabled=true"), "ServiceMonitor")
    assert set(sms) == {"sb-sickbay-api"}
    (endpoint,) = sms["sb-sickbay-api"]["spec"]["endpoints"]
    assert endpoint == {"port": "http", "path": "/metrics", "interval": "30s"}


def test_values_schema_refuses_what_would_deploy_wrong(helm):
    bad = [
        ("--set", "mode=yolo"),
        ("--set", "image.tag=latest"),
        ("--set", "partitions=0"),
        ("--set", "roles.worker.kind=ReplicaSet"),
        ("--set", "roles.worker.replicaz=3"),
        ("--set-json", 'settings={"KAFKA": "x"}'),
        (
            "--set-json",
            'roles.adapter-kubernetes.rbac.rules=[{"apiGroups":[""],"resources":["nodes"],"verbs":["*"]}]',
        ),
    ]
    for args in bad:
        done = helm_run(helm, "template", "sb", str(CHART), *args)
        assert done.returncode != 0, args
        assert "values don't meet the specifications of the schema" in done.stderr, (args, done.stderr)
