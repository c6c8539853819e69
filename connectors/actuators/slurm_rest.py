"""slurmrestd executor: the adapter's operations as slurmrestd requests.

What a slurmrestd can do depends on its OpenAPI plugin version, checked against
the generated spec (``GET /openapi/v3``) of the local 22.05.8 install:

=================  =====================================  =====================================
operation          v0.0.38 (Slurm 22.05)                  v0.0.39 (Slurm 23.02)
=================  =====================================  =====================================
observe node/job   ``GET node/{name}``, ``GET job/{id}``  same
list nodes         ``GET nodes``                          same
drain / resume     no endpoint (node is GET only)         ``POST node/{name}`` state + reason
ExcNodeList        no field in ``job_properties``         ``POST job/{id}`` ``excluded_nodes``
requeue            no endpoint                            no endpoint
cancel             ``DELETE job/{id}``                    ``DELETE job/{id}``
array/het job ids  not addressable (numeric id only)      -
=================  =====================================  =====================================

An operation without an endpoint raises :class:`Unsupported`; the adapter turns
that into a REJECTED result that says so (run that action kind in local or SSH
mode). Auth: over TCP, JWT in the ``X-SLURM-USER-NAME`` / ``X-SLURM-USER-TOKEN``
headers (a token from ``scontrol token``); over a UNIX socket (``unix:/path``)
slurmrestd's ``rest_auth/local`` needs no token. The token is a SecretStr and
never appears in a CommandRun, a log line or an exception text.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
from pydantic import SecretStr

from connectors.actuators.slurm_backend import Unsupported
from schemas import codec
from schemas.actions import CommandRun

API_VERSIONS = ("v0.0.38", "v0.0.39")
CONNECT_FAILED = 111  # returncode of a request that never reached slurmrestd (ECONNREFUSED)
TIMED_OUT = 124
_NOT_FOUND_ERRNOS = {2017, 2018}  # ESLURM_INVALID_JOB_ID, ESLURM_INVALID_NODE_NAME


def _error_text(error: Any) -> str:
    """One slurmrestd error entry: ``message (description) [errno]``; the errno is what callers match."""
    if not isinstance(error, dict):
        return str(error)
    text = str(error.get("error") or "error")
    if error.get("description"):
        text += f" ({error['description']})"
    number = error.get("error_number", error.get("errno"))
    return text + (f" [{number}]" if number is not None else "")


def _state_text(state: Any, flags: Any) -> str:
    """slurmrestd's node/job state as ``scontrol`` prints it (``IDLE+DRAIN``)."""
    base = state if isinstance(state, str) else "+".join(str(s) for s in state or [])
    return "+".join([base.upper(), *(str(f).upper() for f in flags or [])])


def node_fields(node: dict[str, Any]) -> dict[str, str]:
    return {
        "NodeName": str(node.get("name", "")),
        "State": _state_text(node.get("state", ""), node.get("state_flags")),
        "Reason": str(node.get("reason") or ""),
    }


def job_fields(job: dict[str, Any]) -> dict[str, str]:
    state = job.get("job_state", "")
    return {
        "JobId": str(job.get("job_id", "")),
        "JobName": str(job.get("name", "")),
        "JobState": state if isinstance(state, str) else "+".join(state or []),
        "Reason": str(job.get("state_reason") or ""),
        "ExcNodeList": str(job.get("excluded_nodes") or "(null)"),
        "Restarts": str(job.get("restart_cnt") or 0),
        "Requeue": "1" if job.get("requeue", True) else "0",
        "NodeList": str(job.get("nodes") or ""),
    }


class SlurmRest:
    mode = "rest"

    def __init__(
        self,
        url: str,
        *,
        api: str = "v0.0.38",
        user: str | None = None,
        token: SecretStr | None = None,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if api not in API_VERSIONS:
            raise ValueError(f"unsupported slurmrestd API {api!r}; known: {', '.join(API_VERSIONS)}")
        self.api = api
        if url.startswith("unix:"):
            transport = transport or httpx.HTTPTransport(uds=url.removeprefix("unix:"))
            base_url = "http://slurmrestd"
        else:
            base_url = url.rstrip("/")
        headers = {"Accept": "application/json"}
        if token is not None:
            if not user:
                raise ValueError("a slurmrestd token needs the user it was issued for")
            headers["X-SLURM-USER-NAME"] = user
            headers["X-SLURM-USER-TOKEN"] = token.get_secret_value()
        self.client = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s, transport=transport)
        self.url = url

    def close(self) -> None:
        self.client.close()

    def _path(self, *parts: str) -> str:
        return "/".join(["", "slurm", self.api, *parts])

    def _request(self, argv: list[str]) -> tuple[CommandRun, dict[str, Any] | None]:
        method, path = argv[0], argv[1]
        body = argv[2] if len(argv) > 2 else None
        started = time.monotonic()
        payload: dict[str, Any] | None = None
        try:
            resp = self.client.request(
                method,
                path,
                content=body.encode() if body is not None else None,
                headers={"Content-Type": "application/json"} if body is not None else None,
            )
            text = resp.text
            try:
                loaded = codec.loads(resp.content) if resp.content else {}
                payload = loaded if isinstance(loaded, dict) else None
            except ValueError:
                payload = None
            errors = (payload or {}).get("errors") or []
            rc = 0 if resp.is_success and not errors else (resp.status_code if not resp.is_success else 1)
            err = "; ".join(_error_text(e) for e in errors) or (
                "" if resp.is_success else f"HTTP {resp.status_code} {resp.reason_phrase}"
            )
            out = "" if rc == 0 else text[-4000:]
        except httpx.TimeoutException:
            rc, out, err = TIMED_OUT, "", f"timed out talking to slurmrestd at {self.url}"
        except httpx.TransportError as exc:
            rc, out, err = CONNECT_FAILED, "", f"slurmrestd at {self.url} unreachable: {type(exc).__name__}"
        run = CommandRun(
            argv=argv,
            returncode=rc,
            stdout=out,
            stderr=err[-4000:],
            duration_s=round(time.monotonic() - started, 4),
        )
        return run, payload

    def run(self, argv: list[str]) -> CommandRun:
        return self._request(argv)[0]

    def transient(self, run: CommandRun) -> bool:
        return run.returncode in (CONNECT_FAILED, TIMED_OUT, 502, 503, 504)

    def not_found(self, run: CommandRun) -> bool:
        return run.returncode != 0 and any(f"[{n}]" in run.stderr for n in _NOT_FOUND_ERRNOS)

    def _job_path(self, job_id: str) -> str:
        """v0.0.38 parses ``job/{id}`` as a number: ``4711_3`` is "not found", ``4711+0`` a 400."""
        if self.api == "v0.0.38" and not job_id.isdigit():
            raise Unsupported(
                f"slurmrestd v0.0.38 addresses jobs by numeric id only; {job_id} needs local or ssh mode"
            )
        return self._path("job", job_id)

    def show(self, entity: str, name: str) -> tuple[CommandRun, dict[str, str] | None]:
        if entity not in ("node", "job"):
            raise ValueError(f"cannot show {entity!r}")
        path = self._path("node", name) if entity == "node" else self._job_path(name)
        run, payload = self._request(["GET", path])
        items = (payload or {}).get("nodes" if entity == "node" else "jobs") or []
        if run.returncode != 0 or not items:
            return run, None
        return run, node_fields(items[0]) if entity == "node" else job_fields(items[0])

    def list_nodes(self) -> tuple[CommandRun, list[dict[str, str]]]:
        run, payload = self._request(["GET", self._path("nodes")])
        if run.returncode != 0:
            return run, []
        return run, [node_fields(n) for n in (payload or {}).get("nodes") or []]

    def _node_update(self, node: str, body: dict[str, Any]) -> list[str]:
        if self.api == "v0.0.38":
            raise Unsupported(
                "slurmrestd v0.0.38 (Slurm 22.05) has no node update endpoint; use local or ssh mode"
            )
        return ["POST", self._path("node", node), codec.dumps(body).decode()]

    def drain_argv(self, node: str, reason: str) -> list[str]:
        return self._node_update(node, {"state": ["DRAIN"], "reason": reason})

    def resume_argv(self, node: str) -> list[str]:
        return self._node_update(node, {"state": ["RESUME"]})

    def requeue_hold_argv(self, job_id: str) -> list[str]:
        raise Unsupported(f"slurmrestd {self.api} has no requeue endpoint; use local or ssh mode")

    def release_argv(self, job_id: str) -> list[str]:
        return ["POST", self._job_path(job_id), codec.dumps({"hold": False}).decode()]

    def exclude_argv(self, job_id: str, nodes: list[str]) -> list[str]:
        if self.api == "v0.0.38":
            raise Unsupported(
                "slurmrestd v0.0.38 (Slurm 22.05) cannot set ExcNodeList; use local or ssh mode"
            )
        return ["POST", self._job_path(job_id), codec.dumps({"excluded_nodes": nodes}).decode()]

    def begin_argv(self, job_id: str, delay_s: int) -> list[str]:
        begin = int(time.time()) + int(delay_s)
        return ["POST", self._job_path(job_id), codec.dumps({"begin_time": begin}).decode()]

    def cancel_argv(self, job_id: str) -> list[str]:
        return ["DELETE", self._job_path(job_id)]
