"""httpx client mapping 1:1 to the REST API. Errors come back as ``podfleet.errors``
exceptions rebuilt from the problem+json ``code`` (so the CLI prints one line and exits
with the same code a local error would)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx

from podfleet.errors import PodfleetError, UnknownNameError


def _error_classes() -> dict[str, type[PodfleetError]]:
    out: dict[str, type[PodfleetError]] = {}
    todo: list[type[PodfleetError]] = [PodfleetError]
    while todo:
        cls = todo.pop()
        out.setdefault(cls.code, cls)
        todo.extend(cls.__subclasses__())
    return out


_CLASSES = _error_classes()


def _seg(value: object) -> str:
    """One path segment, percent-encoded (an identifier never reaches the path raw)."""
    return quote(str(value), safe="")


def error_from_problem(status: int, body: dict[str, Any]) -> PodfleetError:
    cls = _CLASSES.get(str(body.get("code")), PodfleetError)
    exc = cls.__new__(cls)
    detail = str(body.get("detail") or body.get("title") or f"HTTP {status}")
    allowed = body.get("allowed")
    if allowed:
        text = ", ".join(map(str, allowed)) if isinstance(allowed, list) else str(allowed)
        if text not in detail:  # one line that names the field and what it accepts
            detail += f" (allowed {body.get('field') or 'values'}: {text})"
    PodfleetError.__init__(exc, detail, field=body.get("field"), allowed=body.get("allowed"))
    if isinstance(exc, UnknownNameError):
        exc.valid = list(body.get("allowed") or [])
    exc.status = status  # type: ignore[attr-defined]
    return exc


class PodfleetClient:
    def __init__(self, url: str = "http://127.0.0.1:8470", token: str | None = None, *,
                 timeout_s: float = 30.0, transport: httpx.BaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PodfleetClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing -------------------------------------------------------------------
    def _request(self, method: str, path: str, **kw: Any) -> Any:
        if "params" in kw:
            kw["params"] = {k: v for k, v in kw["params"].items() if v is not None}
        if "json" in kw:
            kw["json"] = {k: v for k, v in kw["json"].items() if v is not None}
        try:
            r = self._http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise PodfleetError(f"cannot reach podfleet at {self.url}: {exc}") from None
        if r.status_code >= 400:
            try:
                body = r.json()
            except ValueError:
                body = {"detail": r.text[:200] or f"HTTP {r.status_code}"}
            raise error_from_problem(r.status_code, body if isinstance(body, dict) else {})
        ctype = r.headers.get("content-type", "")
        return r.json() if "json" in ctype else r.text

    def _sse(self, path: str, params: dict[str, Any]) -> Iterator[tuple[str, Any]]:
        """Yield (event, data) from a server-sent-event stream until it ends."""
        try:
            with self._http.stream("GET", path, params=params, timeout=None) as r:
                if r.status_code >= 400:
                    r.read()
                    raise error_from_problem(r.status_code, r.json())
                event, data = "message", []
                for line in r.iter_lines():
                    if line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].strip())
                    elif not line and data:
                        yield event, json.loads("\n".join(data))
                        event, data = "message", []
        except httpx.HTTPError as exc:
            raise PodfleetError(f"lost the event stream from {self.url}: {exc}") from None

    # --- clusters -------------------------------------------------------------------------
    def create_cluster(self, name: str, *, type: str | None = None, client_token: str | None = None,
                       **fields: Any) -> dict[str, Any]:
        """CreateTrainiumCluster. ``type``: default trn2-ultraserver (custom for fabric local/ray).
        ``fields``: dims, chip_type, chips, hbm_gib, link_bw_gbps, storage_nodes, spares,
        encryption, network_isolation, fabric, rayAddress."""
        return self._request("POST", "/v1/clusters", json={"name": name, "type": type, **fields,
                                                           "clientToken": client_token})

    def list_clusters(self, *, next_token: str | None = None, max_results: int | None = None) -> dict[str, Any]:
        return self._request("GET", "/v1/clusters", params={"nextToken": next_token, "maxResults": max_results})

    def iter_clusters(self) -> Iterator[dict[str, Any]]:
        token = None
        while True:
            page = self.list_clusters(next_token=token)
            yield from page["clusters"]
            token = page.get("nextToken")
            if not token:
                return

    def describe_cluster(self, cluster: str) -> dict[str, Any]:
        return self._request("GET", f"/v1/clusters/{_seg(cluster)}")

    def delete_cluster(self, cluster: str) -> dict[str, Any]:
        return self._request("DELETE", f"/v1/clusters/{_seg(cluster)}")

    def describe_cluster_hardware(self, cluster: str, *, chip: int | None = None) -> dict[str, Any]:
        return self._request("GET", f"/v1/clusters/{_seg(cluster)}/hardware", params={"chip": chip})

    def get_cluster_logs(self, cluster: str, *, since: int = 0) -> dict[str, Any]:
        return self._request("GET", f"/v1/clusters/{_seg(cluster)}/logs", params={"since": since})

    def follow_cluster_logs(self, cluster: str, *, since: int = 0) -> Iterator[tuple[str, Any]]:
        """GetClusterLogs?follow=true: ('log', line) / ('progress', deployment) / ('end', {...})."""
        return self._sse(f"/v1/clusters/{_seg(cluster)}/logs", {"follow": "true", "since": since})

    def inject_fault(self, cluster: str, kind: str, *, chip: int | None = None, link: str | None = None,
                     rank: int | None = None, job: str | None = None) -> dict[str, Any]:
        """InjectFault: a twin fault (chip or link), or ``kill-worker`` (rank, job) on local/ray."""
        body = {"kind": kind, "chip": chip, "link": link, "rank": rank, "jobId": job}
        return self._request("POST", f"/v1/clusters/{_seg(cluster)}/faults", json={k: v for k, v in body.items() if v is not None})

    def kill_worker(self, cluster: str, rank: int, *, job: str | None = None) -> dict[str, Any]:
        """InjectFault kind kill-worker (local/ray clusters): SIGKILL one rank's worker."""
        return self.inject_fault(cluster, "kill-worker", rank=rank, job=job)

    # --- jobs -------------------------------------------------------------------------------
    def submit_training_job(self, cluster: str, *, model: str | None = None, chips: int,
                            client_token: str | None = None, **fields: Any) -> dict[str, Any]:
        """SubmitTrainingJob. ``fields``: model_dims, parallelism ("auto" or {tp, pp, dp}),
        steps, checkpoint_interval, priority, team, entrypoint, name."""
        return self._request("POST", f"/v1/clusters/{_seg(cluster)}/jobs",
                             json={"model": model, "chips": chips, **fields, "clientToken": client_token})

    def list_training_jobs(self, *, cluster: str | None = None, state: str | None = None,
                           next_token: str | None = None, max_results: int | None = None) -> dict[str, Any]:
        return self._request("GET", "/v1/jobs", params={"cluster": cluster, "state": state,
                                                        "nextToken": next_token, "maxResults": max_results})

    def describe_training_job(self, job_id: str) -> dict[str, Any]:
        return self._request("GET", f"/v1/jobs/{_seg(job_id)}")

    def stop_training_job(self, job_id: str) -> dict[str, Any]:
        return self._request("POST", f"/v1/jobs/{_seg(job_id)}/stop")

    def get_job_logs(self, job_id: str, *, since: int = 0) -> dict[str, Any]:
        return self._request("GET", f"/v1/jobs/{_seg(job_id)}/logs", params={"since": since})

    def follow_job_logs(self, job_id: str, *, since: int = 0) -> Iterator[tuple[str, Any]]:
        return self._sse(f"/v1/jobs/{_seg(job_id)}/logs", {"follow": "true", "since": since})

    # --- planner, audit, system --------------------------------------------------------------
    def plan_parallelism(self, model: str, chips: int, *, chip_type: str = "trn2",
                         topology: str | None = None) -> dict[str, Any]:
        return self._request("POST", "/v1/plan", json={"model": model, "chips": chips,
                                                       "chip_type": chip_type, "topology": topology})

    def list_audit_events(self, *, next_token: str | None = None, max_results: int | None = None) -> dict[str, Any]:
        return self._request("GET", "/v1/audit", params={"nextToken": next_token, "maxResults": max_results})

    def verify_audit_chain(self) -> dict[str, Any]:
        return self._request("GET", "/v1/audit/verify")

    def create_access_token(self, name: str, role: str) -> dict[str, Any]:
        return self._request("POST", "/v1/tokens", json={"name": name, "role": role})

    def list_access_tokens(self) -> dict[str, Any]:
        return self._request("GET", "/v1/tokens")

    def revoke_access_token(self, token_id: str) -> dict[str, Any]:
        return self._request("DELETE", f"/v1/tokens/{_seg(token_id)}")

    def healthz(self) -> dict[str, Any]:
        return self._request("GET", "/healthz")

    def metrics(self) -> str:
        return self._request("GET", "/metrics")

    # --- health: alerts, recoveries, firmware ---------------------------------------------
    def list_alerts(self, cluster: str, state: str | None = None) -> dict[str, Any]:
        """ListAlerts: ``{"alerts": [...]}``, optionally only those in ``state``
        (firing, acknowledged, resolved)."""
        return self._request("GET", f"/v1/clusters/{_seg(cluster)}/alerts", params={"state": state})

    def acknowledge_alert(self, alert_id: str) -> dict[str, Any]:
        return self._request("POST", f"/v1/alerts/{_seg(alert_id)}/acknowledge")

    def list_recoveries(self, cluster: str) -> dict[str, Any]:
        """ListRecoveries: ``{"recoveries": [...]}``, each with its steps."""
        return self._request("GET", f"/v1/clusters/{_seg(cluster)}/recoveries")

    def start_firmware(self, cluster: str, version: str, *, unit: str = "chip",
                       chips: list[int] | None = None) -> dict[str, Any]:
        """StartFirmwareUpdate: a rolling update, ``unit`` (chip or node) at a time, of
        ``chips`` (default: all)."""
        return self._request("POST", f"/v1/clusters/{_seg(cluster)}/firmware",
                             json={"version": version, "unit": unit, "chips": chips})

    def list_firmware(self, cluster: str) -> dict[str, Any]:
        """ListFirmwareUpdates: ``{"rollouts": [...]}``."""
        return self._request("GET", f"/v1/clusters/{_seg(cluster)}/firmware")

    def describe_firmware(self, cluster: str, rollout: str) -> dict[str, Any]:
        """DescribeFirmwareUpdate: one rollout's state and progress."""
        return self._request("GET", f"/v1/clusters/{_seg(cluster)}/firmware/{_seg(rollout)}")
