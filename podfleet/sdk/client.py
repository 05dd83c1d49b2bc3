"""httpx client mapping 1:1 to the REST API. Errors come back as ``podfleet.errors``
exceptions rebuilt from the problem+json ``code`` (so the CLI prints one line and exits
with the same code a local error would)."""

from __future__ import annotations

import difflib
import json
import time
from collections.abc import Iterator
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlsplit

import httpx
from pydantic import ValidationError

from podfleet.errors import (
    InvalidInputError,
    NotFoundError,
    PodfleetError,
    UnknownNameError,
    error_class,
)
from podfleet.sdk import models
from podfleet.sdk.models import Reply


def _seg(value: object) -> str:
    """One path segment, percent-encoded (an identifier never reaches the path raw).
    ``.`` and ``..`` are refused: HTTP clients resolve them, which would aim the call at
    another resource (``token revoke ..`` must not become a call on ``/v1``)."""
    text = str(value)
    if text in ("", ".", ".."):
        raise InvalidInputError(f"{text!r} is not an identifier", field="id")
    return quote(text, safe="")


def error_from_problem(status: int, body: dict[str, Any]) -> PodfleetError:
    cls = error_class(str(body.get("code")))
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


def check_url(url: str) -> str:
    """The server's root URL. One that names the API's version (``.../v1``) would aim every
    call at ``/v1/v1/...``: refused with the fix, rather than answered "no such route"."""
    root = url.strip().rstrip("/")
    parts = urlsplit(root)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidInputError(f"server URL {url!r} must look like http://HOST:PORT or https://HOST:PORT "
                                "(PODFLEET_URL or --url)", field="url")
    if parts.path.endswith("/v1"):
        fixed = root[: -len("/v1")]
        raise InvalidInputError(f"server URL {url!r} ends in /v1: give the server's root, {fixed} "
                                "(drop /v1; podfleet adds it)", field="url")
    return root


def unreachable(url: str, exc: httpx.HTTPError) -> PodfleetError:
    """A connection that failed, in one line with the likely cause."""
    text = str(exc)
    if url.startswith("https://") and ("SSL" in text or "WRONG_VERSION_NUMBER" in text or "record layer" in text):
        plain = "http://" + url[len("https://"):]
        return PodfleetError(f"cannot reach podfleet at {url}: the server does not answer TLS; if it serves "
                             f"plain HTTP (podfleet up without --tls-cert), use {plain}")
    if url.startswith("http://") and isinstance(exc, httpx.RemoteProtocolError):
        return PodfleetError(f"cannot reach podfleet at {url}: the server did not answer HTTP; if it serves "
                             f"HTTPS (podfleet up --tls-cert), use https://{url[len('http://'):]}")
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return PodfleetError(f"cannot reach podfleet at {url}: its TLS certificate is not trusted "
                             "(SSL_CERT_FILE names a CA bundle that holds it)")
    if isinstance(exc, httpx.ConnectError):
        return PodfleetError(f"cannot reach podfleet at {url}: {text or 'connection failed'} "
                             "(is podfleet up running there? PODFLEET_URL or --url names the server)")
    return PodfleetError(f"cannot reach podfleet at {url}: {text or type(exc).__name__}")


def _retry_after(r: httpx.Response) -> float | None:
    value = r.headers.get("retry-after", "")
    try:
        return min(max(float(value), 0.1), 10.0) if value else None
    except ValueError:
        return None  # an HTTP date: not one podfleet sends


M = TypeVar("M", bound=Reply)


def _typed(model: type[M], data: Any) -> M:
    """``data`` as ``model`` (the server's own response model). A reply that does not fit,
    from a server of another release, is kept as it came rather than refused: a client
    reads what it is given (its fields still read by attribute and by key)."""
    try:
        reply = model.model_validate(data)
    except ValidationError:
        reply = model.model_construct(**data) if isinstance(data, dict) else model.model_construct()
    reply.keep_order(data)  # to_dict (what the CLI prints) keeps the server's key order
    return reply


class PodfleetClient:
    def __init__(self, url: str = "http://127.0.0.1:8470", token: str | None = None, *,
                 timeout_s: float = 30.0, transport: httpx.BaseTransport | None = None,
                 retry_unavailable_s: float = 15.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.retry_unavailable_s = retry_unavailable_s
        self.url = check_url(url)
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PodfleetClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing -------------------------------------------------------------------
    def _reply(self, model: type[M], method: str, path: str, **kw: Any) -> M:
        """``method path`` (``_request``), its reply read as ``model`` (``_typed``)."""
        return _typed(model, self._request(method, path, **kw))

    def _request(self, method: str, path: str, **kw: Any) -> Any:
        if "params" in kw:
            kw["params"] = {k: v for k, v in kw["params"].items() if v is not None}
        if "json" in kw:
            kw["json"] = {k: v for k, v in kw["json"].items() if v is not None}
        deadline = time.monotonic() + self.retry_unavailable_s
        while True:
            try:
                r = self._http.request(method, path, **kw)
            except httpx.HTTPError as exc:
                raise unreachable(self.url, exc) from None
            # 503 + Retry-After: nothing was changed (a follower between leaders, the store
            # unreachable), so the same request is sent again, for at most retry_unavailable_s.
            wait = _retry_after(r)
            if r.status_code != 503 or wait is None or time.monotonic() + wait > deadline:
                break
            time.sleep(wait)
        if r.status_code >= 400:
            try:
                body = r.json()
            except ValueError:
                body = {"detail": r.text[:200] or f"HTTP {r.status_code}"}
            err = error_from_problem(r.status_code, body if isinstance(body, dict) else {})
            if isinstance(err, NotFoundError) and err.field == "cluster":
                err = self._with_cluster_names(err, path, kw.get("params") or {})
            raise err
        ctype = r.headers.get("content-type", "")
        return r.json() if "json" in ctype else r.text

    def _with_cluster_names(self, err: NotFoundError, path: str, params: dict[str, Any]) -> NotFoundError:
        """An unknown cluster: say which clusters there are, and the likeliest one. Asked with
        the caller's own token, so it lists only clusters the caller may see."""
        parts = path.split("/")
        ref = unquote(parts[3]) if len(parts) > 3 and parts[:3] == ["", "v1", "clusters"] else params.get("cluster")
        try:
            names = sorted(c["name"] for c in self.iter_clusters())
        except PodfleetError:  # the list is a courtesy; the error stands without it
            return err
        near = difflib.get_close_matches(str(ref), names, n=1, cutoff=0.6) if ref else []
        hint = (f"; did you mean {near[0]!r}?" if near else "") + (
            f" (clusters: {', '.join(names[:20])}{', ...' if len(names) > 20 else ''})" if names
            else " (no clusters yet: podfleet cluster create NAME)")
        out = NotFoundError(err.message + hint, field="cluster", allowed=names)
        out.status = 404  # type: ignore[attr-defined]
        return out

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
            if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
                raise unreachable(self.url, exc) from None
            raise PodfleetError(f"lost the event stream from {self.url}: {exc}") from None

    # --- clusters -------------------------------------------------------------------------
    def create_cluster(self, name: str, *, type: str | None = None, client_token: str | None = None,
                       **fields: Any) -> models.Cluster:
        """CreateTrainiumCluster. ``type``: default trn2-ultraserver (custom for fabric local/ray).
        ``fields``: dims, chip_type, chips, hbm_gib, link_bw_gbps, storage_nodes, spares,
        encryption, network_isolation, fabric, ray_address."""
        return self._reply(models.Cluster, "POST", "/v1/clusters", json={"name": name, "type": type, **fields,
                                                                  "client_token": client_token})

    def list_clusters(self, *, next_token: str | None = None, max_results: int | None = None) -> models.ClusterList:
        return self._reply(models.ClusterList, "GET", "/v1/clusters", params={"next_token": next_token,
                                                                       "max_results": max_results})

    def iter_clusters(self) -> Iterator[models.Cluster]:
        token = None
        while True:
            page = self.list_clusters(next_token=token)
            yield from page.clusters
            token = page.next_token
            if not token:
                return

    def describe_cluster(self, cluster: str) -> models.Cluster:
        return self._reply(models.Cluster, "GET", f"/v1/clusters/{_seg(cluster)}")

    def delete_cluster(self, cluster: str) -> models.Cluster:
        return self._reply(models.Cluster, "DELETE", f"/v1/clusters/{_seg(cluster)}")

    def rotate_keys(self, cluster: str) -> models.KeyRotation:
        """RotateKeys: add a version to the cluster's checkpoint key ring (admin; a user's
        token needs a fresh code, ``use_mfa``)."""
        return self._reply(models.KeyRotation, "POST", f"/v1/clusters/{_seg(cluster)}/keys/rotate")

    def describe_cluster_hardware(self, cluster: str, *, chip: int | None = None, pod: int | None = None,
                                  state: str | None = None, job: str | None = None, limit: int | None = None,
                                  next_token: str | None = None, summary: bool = False) -> models.Hardware | models.ChipOut | models.HardwareSummary:
        """The whole cluster, one chip, a filtered page (pod, state, job, limit, next_token),
        or with ``summary`` per-pod and per-block counts."""
        params: dict[str, Any] = {"chip": chip, "pod": pod, "state": state, "job": job, "limit": limit,
                                  "next_token": next_token}
        if summary:
            params["summary"] = "true"
        body = self._request("GET", f"/v1/clusters/{_seg(cluster)}/hardware", params=params)
        # The route answers one of three shapes, by what was asked (as it documents).
        paged = any(v is not None for v in (pod, state, job, limit, next_token))
        shape: type[models.Hardware | models.ChipOut | models.HardwareSummary] = (
            models.HardwareSummary if summary else models.ChipOut if chip is not None and not paged else models.Hardware)
        return _typed(shape, body)

    def get_cluster_logs(self, cluster: str, *, since: int = 0) -> models.Logs:
        return self._reply(models.Logs, "GET", f"/v1/clusters/{_seg(cluster)}/logs", params={"since": since})

    def follow_cluster_logs(self, cluster: str, *, since: int = 0) -> Iterator[tuple[str, Any]]:
        """GetClusterLogs?follow=true: ('log', line) / ('progress', deployment) / ('end', {...})."""
        return self._sse(f"/v1/clusters/{_seg(cluster)}/logs", {"follow": "true", "since": since})

    def inject_fault(self, cluster: str, kind: str, *, chip: int | None = None, link: str | None = None,
                     rank: int | None = None, job: str | None = None, factor: float | None = None,
                     pod: int | None = None) -> models.FaultOut:
        """InjectFault: a twin fault (chip or link; ``pod-loss`` at a fleet's ``pod``), or
        ``kill-worker`` (rank, job) / ``slow-worker`` (rank, factor, job) on local/ray."""
        body = {"kind": kind, "chip": chip, "link": link, "rank": rank, "job_id": job, "factor": factor, "pod": pod}
        return self._reply(models.FaultOut, "POST", f"/v1/clusters/{_seg(cluster)}/faults", json={k: v for k, v in body.items() if v is not None})

    def kill_worker(self, cluster: str, rank: int, *, job: str | None = None) -> models.FaultOut:
        """InjectFault kind kill-worker (local/ray clusters): SIGKILL one rank's worker."""
        return self.inject_fault(cluster, "kill-worker", rank=rank, job=job)

    def slow_worker(self, cluster: str, rank: int, factor: float, *, job: str | None = None) -> models.FaultOut:
        """InjectFault kind slow-worker (local clusters): rank ``rank`` computes ``factor`` x slower."""
        return self.inject_fault(cluster, "slow-worker", rank=rank, job=job, factor=factor)

    # --- chip lifecycle ---------------------------------------------------------------------
    def cordon_chip(self, cluster: str, chip: int, *, reason: str | None = None) -> models.ChipLifecycleOut:
        """CordonChip: no new placement lands on the chip (``reason``: kept in the audit record)."""
        return self._reply(models.ChipLifecycleOut, "POST", f"/v1/clusters/{_seg(cluster)}/chips/{_seg(chip)}/cordon",
                             params={"reason": reason})

    def drain_chip(self, cluster: str, chip: int, *, reason: str | None = None) -> models.ChipLifecycleOut:
        """DrainChip: cordon, and move the chip's rank off through the recovery path."""
        return self._reply(models.ChipLifecycleOut, "POST", f"/v1/clusters/{_seg(cluster)}/chips/{_seg(chip)}/drain",
                             params={"reason": reason})

    def uncordon_chip(self, cluster: str, chip: int) -> models.ChipLifecycleOut:
        """UncordonChip: back to placement."""
        return self._reply(models.ChipLifecycleOut, "POST", f"/v1/clusters/{_seg(cluster)}/chips/{_seg(chip)}/uncordon")

    def repair_chip(self, cluster: str, chip: int) -> models.ChipLifecycleOut:
        """RepairChip: a failed, isolated or degraded chip no job holds back to healthy."""
        return self._reply(models.ChipLifecycleOut, "POST", f"/v1/clusters/{_seg(cluster)}/chips/{_seg(chip)}/repair")

    # --- jobs -------------------------------------------------------------------------------
    def submit_training_job(self, cluster: str, *, model: str | None = None, chips: int,
                            client_token: str | None = None, **fields: Any) -> models.Job:
        """SubmitTrainingJob. ``fields``: model_dims, parallelism ("auto" or {tp, pp, dp}),
        steps, checkpoint_interval, priority, team, entrypoint, name, grad_compression, queue,
        after_ok / after_any (job or array ids), array ("0-15%4")."""
        return self._reply(models.Job, "POST", f"/v1/clusters/{_seg(cluster)}/jobs",
                                json={"model": model, "chips": chips, **fields, "client_token": client_token})

    # --- queues and job arrays --------------------------------------------------------------
    def create_queue(self, cluster: str, name: str, *, nominal: int, **fields: Any) -> models.Queue:
        """CreateQueue. ``fields``: cohort, borrowing_limit, lending_limit, weight, reclaim."""
        return self._reply(models.Queue, "POST", f"/v1/clusters/{_seg(cluster)}/queues", json={
            "name": name, "nominal": nominal, **{k: v for k, v in fields.items() if v is not None}})

    def list_queues(self, cluster: str) -> models.QueueList:
        return self._reply(models.QueueList, "GET", f"/v1/clusters/{_seg(cluster)}/queues")

    def describe_queue(self, cluster: str, name: str) -> models.Queue:
        return self._reply(models.Queue, "GET", f"/v1/clusters/{_seg(cluster)}/queues/{_seg(name)}")

    def update_queue(self, cluster: str, name: str, **changes: Any) -> models.Queue:
        """UpdateQueue: only the fields given change; a limit given as None is cleared
        (so the body keeps its nulls, unlike other requests)."""
        import json

        return self._reply(models.Queue, "PATCH", f"/v1/clusters/{_seg(cluster)}/queues/{_seg(name)}",
                                  content=json.dumps(changes), headers={"content-type": "application/json"})

    def delete_queue(self, cluster: str, name: str) -> models.DeletedQueue:
        return self._reply(models.DeletedQueue, "DELETE", f"/v1/clusters/{_seg(cluster)}/queues/{_seg(name)}")

    # --- advance reservations ------------------------------------------------------------------
    def create_reservation(self, cluster: str, *, chips: int, duration: str | float, start: str = "now",
                           queue: str | None = None, name: str | None = None) -> models.Reservation:
        """CreateReservation: ``chips`` held from ``start`` (RFC 3339, now, now+1h) for
        ``duration`` (seconds, 2h, 30m, HH:MM:SS) for ``queue``'s jobs (None: nobody's)."""
        body = {"chips": chips, "duration": duration, "start": start, "queue": queue, "name": name}
        return self._reply(models.Reservation, "POST", f"/v1/clusters/{_seg(cluster)}/reservations",
                             json={k: v for k, v in body.items() if v is not None})

    def list_reservations(self, cluster: str) -> models.ReservationList:
        return self._reply(models.ReservationList, "GET", f"/v1/clusters/{_seg(cluster)}/reservations")

    def describe_reservation(self, cluster: str, name: str) -> models.Reservation:
        return self._reply(models.Reservation, "GET", f"/v1/clusters/{_seg(cluster)}/reservations/{_seg(name)}")

    def delete_reservation(self, cluster: str, name: str) -> models.Reservation:
        return self._reply(models.Reservation, "DELETE", f"/v1/clusters/{_seg(cluster)}/reservations/{_seg(name)}")

    def get_usage(self, *, by: str = "user", since: float | None = None, cluster: str | None = None,
                  bucket: str | None = None) -> models.UsageReport:
        """GetUsage: chip-seconds per user, queue or team; with ``bucket`` (``1m`` ... ``1d``)
        also ``series``, each one's chip-hours per bucket."""
        return self._reply(models.UsageReport, "GET", "/v1/usage", params={"by": by, "since": since, "cluster": cluster,
                                                "bucket": bucket})

    def create_priority_class(self, name: str, value: int, *, preemption: str = "lower") -> models.PriorityClass:
        return self._reply(models.PriorityClass, "POST", "/v1/priority-classes", json={"name": name, "value": value,
                                                          "preemption": preemption})

    def list_priority_classes(self) -> models.PriorityClassList:
        return self._reply(models.PriorityClassList, "GET", "/v1/priority-classes")

    def delete_priority_class(self, name: str) -> models.DeletedPriorityClass:
        return self._reply(models.DeletedPriorityClass, "DELETE", f"/v1/priority-classes/{_seg(name)}")

    def describe_job_array(self, array_id: str) -> models.JobArray:
        return self._reply(models.JobArray, "GET", f"/v1/job-arrays/{_seg(array_id)}")

    def stop_job_array(self, array_id: str) -> models.JobArray:
        return self._reply(models.JobArray, "POST", f"/v1/job-arrays/{_seg(array_id)}/stop")

    def list_training_jobs(self, *, cluster: str | None = None, state: str | None = None,
                           next_token: str | None = None, max_results: int | None = None) -> models.JobList:
        return self._reply(models.JobList, "GET", "/v1/jobs", params={
            "cluster": cluster, "state": state, "next_token": next_token, "max_results": max_results})

    def describe_training_job(self, job_id: str) -> models.Job:
        return self._reply(models.Job, "GET", f"/v1/jobs/{_seg(job_id)}")

    def stop_training_job(self, job_id: str) -> models.Job:
        return self._reply(models.Job, "POST", f"/v1/jobs/{_seg(job_id)}/stop")

    def get_job_logs(self, job_id: str, *, since: int = 0) -> models.Logs:
        return self._reply(models.Logs, "GET", f"/v1/jobs/{_seg(job_id)}/logs", params={"since": since})

    def follow_job_logs(self, job_id: str, *, since: int = 0) -> Iterator[tuple[str, Any]]:
        return self._sse(f"/v1/jobs/{_seg(job_id)}/logs", {"follow": "true", "since": since})

    def get_job_metrics(self, job_id: str, *, resolution: float | None = None, since: float | None = None,
                        limit: int | None = None) -> models.JobMetricsOut:
        """GetJobMetrics: ``{"job_id", "resolution_s", "points": [{time, step_first, step_last,
        loss, tokens_per_s, step_time_s, *_min, *_max}]}``, oldest first."""
        return self._reply(models.JobMetricsOut, "GET", f"/v1/jobs/{_seg(job_id)}/metrics",
                             params={"resolution": resolution, "since": since, "limit": limit})

    # --- planner, audit, system --------------------------------------------------------------
    def plan_parallelism(self, model: str, chips: int, *, chip_type: str = "trn2",
                         topology: str | None = None) -> models.ParallelismPlan:
        return self._reply(models.ParallelismPlan, "POST", "/v1/plan", json={
            "model": model, "chips": chips, "chip_type": chip_type, "topology": topology})

    def get_presets(self) -> models.Presets:
        """GetPresets: the model presets and the job and chip state vocabularies, by name."""
        return self._reply(models.Presets, "GET", "/v1/presets")

    def list_audit_events(self, *, next_token: str | None = None, max_results: int | None = None) -> models.AuditList:
        return self._reply(models.AuditList, "GET", "/v1/audit", params={"next_token": next_token, "max_results": max_results})

    def verify_audit_chain(self, *, allow_missing_digests: bool = False) -> models.AuditVerify:
        """VerifyAuditChain; ``allow_missing_digests`` accepts records no digest signs yet."""
        return self._reply(models.AuditVerify, "GET", "/v1/audit/verify",
                             params={"allow_missing_digests": "true" if allow_missing_digests else None})

    def create_access_token(self, name: str, role: str) -> models.AccessToken:
        return self._reply(models.AccessToken, "POST", "/v1/tokens", json={"name": name, "role": role})

    def list_access_tokens(self) -> models.AccessTokenList:
        return self._reply(models.AccessTokenList, "GET", "/v1/tokens")

    def revoke_access_token(self, token_id: str) -> models.AccessToken:
        return self._reply(models.AccessToken, "DELETE", f"/v1/tokens/{_seg(token_id)}")

    def healthz(self) -> models.Liveness:
        return self._reply(models.Liveness, "GET", "/healthz")

    def metrics(self) -> str:
        return self._request("GET", "/metrics")

    # --- health: alerts, recoveries, firmware ---------------------------------------------
    def list_alerts(self, cluster: str, state: str | None = None) -> models.AlertList:
        """ListAlerts: ``{"alerts": [...]}``, optionally only those in ``state``
        (firing, acknowledged, resolved)."""
        return self._reply(models.AlertList, "GET", f"/v1/clusters/{_seg(cluster)}/alerts", params={"state": state})

    def get_telemetry(self, cluster: str, *, metric: str = "temperature_c", scope: str = "chip",
                      range_: str = "realtime", target: int | None = None) -> models.Telemetry:
        """GetTelemetry: one metric over a range (realtime, hour, day, week, quarter), of one
        chip or link (``target``) or the mean."""
        return self._reply(models.Telemetry, "GET", f"/v1/clusters/{_seg(cluster)}/telemetry",
                             params={"metric": metric, "scope": scope, "range": range_, "target": target})

    def acknowledge_alert(self, alert_id: str) -> models.Alert:
        return self._reply(models.Alert, "POST", f"/v1/alerts/{_seg(alert_id)}/acknowledge")

    def list_recoveries(self, cluster: str) -> models.RecoveryList:
        """ListRecoveries: ``{"recoveries": [...]}``, each with its steps."""
        return self._reply(models.RecoveryList, "GET", f"/v1/clusters/{_seg(cluster)}/recoveries")

    def start_firmware(self, cluster: str, version: str, *, unit: str = "chip",
                       chips: list[int] | None = None) -> models.FirmwareRollout:
        """StartFirmwareUpdate: a rolling update, ``unit`` (chip or node) at a time, of
        ``chips`` (default: all)."""
        return self._reply(models.FirmwareRollout, "POST", f"/v1/clusters/{_seg(cluster)}/firmware",
                             json={"version": version, "unit": unit, "chips": chips})

    def list_firmware(self, cluster: str) -> models.FirmwareRolloutList:
        """ListFirmwareUpdates: ``{"rollouts": [...]}``."""
        return self._reply(models.FirmwareRolloutList, "GET", f"/v1/clusters/{_seg(cluster)}/firmware")

    def describe_firmware(self, cluster: str, rollout: str) -> models.FirmwareRollout:
        """DescribeFirmwareUpdate: one rollout's state and progress."""
        return self._reply(models.FirmwareRollout, "GET", f"/v1/clusters/{_seg(cluster)}/firmware/{_seg(rollout)}")

    def start_maintenance(self, cluster: str, command: str, *, unit: str = "chip", chips: list[int] | None = None,
                          max_failures: int = 1, timeout_s: float = 600.0) -> models.MaintenanceRollout:
        """StartMaintenance (admin; a second factor under MFARequired, ``use_mfa``): run
        ``command`` on each host, ``unit`` (chip or host) at a time, ranks moved away first."""
        return self._reply(models.MaintenanceRollout, "POST", f"/v1/clusters/{_seg(cluster)}/maintenance",
                             json={"command": command, "unit": unit, "chips": chips, "max_failures": max_failures,
                                   "timeout_s": timeout_s})

    def list_maintenance(self, cluster: str) -> models.MaintenanceList:
        """ListMaintenance: ``{"rollouts": [...]}``."""
        return self._reply(models.MaintenanceList, "GET", f"/v1/clusters/{_seg(cluster)}/maintenance")

    def describe_maintenance(self, cluster: str, rollout: str) -> models.MaintenanceRollout:
        """DescribeMaintenance: state, progress, failed chips, each host's exit code and output."""
        return self._reply(models.MaintenanceRollout, "GET", f"/v1/clusters/{_seg(cluster)}/maintenance/{_seg(rollout)}")

    def resume_maintenance(self, cluster: str, rollout: str) -> models.MaintenanceRollout:
        """ResumeMaintenance: go on with a rollout paused after its failures."""
        return self._reply(models.MaintenanceRollout, "POST", f"/v1/clusters/{_seg(cluster)}/maintenance/{_seg(rollout)}/resume")

    # --- operations intelligence ----------------------------------------------------------
    def verify_cluster(self, cluster: str, *, max_size_bytes: int | None = None, ops: list[str] | None = None,
                       compute: bool = True, interconnect: bool = True, drill: bool = True,
                       budget_s: float | None = None) -> models.Verification:
        """VerifyCluster: ``{"passed", "status", "checks": [{name, status, figures, evidence}]}``."""
        return self._reply(models.Verification, "POST", f"/v1/clusters/{_seg(cluster)}/verify",
                             json={"max_size_bytes": max_size_bytes, "ops": ops, "compute": compute,
                                   "interconnect": interconnect, "drill": drill, "budget_s": budget_s})

    def diagnose_cluster(self, cluster: str) -> models.Diagnosis:
        """DiagnoseCluster: ``{"healthy", "findings": [{kind, chips, links, root_cause, ...}]}``."""
        return self._reply(models.Diagnosis, "GET", f"/v1/clusters/{_seg(cluster)}/diagnosis")

    def get_recommendations(self, cluster: str) -> models.Recommendations:
        """GetRecommendations: advice proven in rehearsal, ``{"recommendations": [...]}``."""
        return self._reply(models.Recommendations, "GET", f"/v1/clusters/{_seg(cluster)}/recommendations")

    def apply_recommendation(self, rec_id: str) -> models.AppliedRecommendation:
        """ApplyRecommendation: carry it out (audited); a stale one is a ConflictError."""
        return self._reply(models.AppliedRecommendation, "POST", f"/v1/recommendations/{_seg(rec_id)}/apply")

    def create_health_report(self, cluster: str, *, period: str = "24h") -> models.HealthReport:
        """CreateHealthReport: generate and archive one; returns the report."""
        return self._reply(models.HealthReport, "POST", f"/v1/clusters/{_seg(cluster)}/reports",
                                                json={"period": period})

    def list_health_reports(self, cluster: str) -> models.ReportList:
        """ListHealthReports: ``{"reports": [{id, created_at, period_s, ...}]}``."""
        return self._reply(models.ReportList, "GET", f"/v1/clusters/{_seg(cluster)}/reports")

    def get_health_report(self, cluster: str, report_id: str, *, format: str = "json") -> str:
        """GetHealthReport: the archived report's text, JSON or HTML."""
        out = self._request("GET", f"/v1/clusters/{_seg(cluster)}/reports/{_seg(report_id)}",
                            params={"format": format})
        return out if isinstance(out, str) else json.dumps(out)

    def list_guides(self) -> models.GuideList:
        """ListGuides: ``{"guides": [{topic, title}]}``."""
        return self._reply(models.GuideList, "GET", "/v1/kb")

    def get_guide(self, topic: str) -> models.Guide:
        """GetGuide: ``{topic, title, text}`` (Markdown)."""
        return self._reply(models.Guide, "GET", f"/v1/kb/{_seg(topic)}")

    # --- security ---------------------------------------------------------------------
    def upload_code(self, data: bytes) -> models.CodeArtifact:
        """UploadCode: a gzipped tarball of code; returns its ``digest`` and ``ref``
        (``code:<sha256>/``): submit jobs with ``entrypoint=ref + "train.py"``."""
        return self._reply(models.CodeArtifact, "POST", "/v1/code", content=data,
                                                headers={"content-type": "application/gzip"})

    def use_mfa(self, code: str | None) -> None:
        """Send this TOTP (or recovery) code with the following calls (``X-Podfleet-MFA``);
        a code works once, so set a fresh one for each call that needs it."""
        if code:
            self._http.headers["X-Podfleet-MFA"] = code
        else:
            self._http.headers.pop("X-Podfleet-MFA", None)

    def create_user(self, name: str, *, policies: list[str] | None = None) -> models.User:
        """CreateUser: tokens named ``name`` then act with this user's policies."""
        return self._reply(models.User, "POST", "/v1/users", json={"name": name, "policies": policies or []})

    def list_users(self) -> models.UserList:
        return self._reply(models.UserList, "GET", "/v1/users")

    def describe_user(self, name: str) -> models.User:
        return self._reply(models.User, "GET", f"/v1/users/{_seg(name)}")

    def put_user_policy(self, name: str, policy: str, document: dict[str, Any] | None = None) -> models.User:
        """PutUserPolicy: attach a built-in ``policy`` (no document) or set an inline one."""
        path = f"/v1/users/{_seg(name)}/policies/{_seg(policy)}"
        return self._reply(models.User, "PUT", path, **({} if document is None else {"json": document}))

    def delete_user_policy(self, name: str, policy: str) -> models.User:
        return self._reply(models.User, "DELETE", f"/v1/users/{_seg(name)}/policies/{_seg(policy)}")

    def enable_mfa(self, name: str) -> models.MfaEnrolment:
        """EnableMfa: ``otpauth_uri`` and ``recovery_codes``, shown once."""
        return self._reply(models.MfaEnrolment, "POST", f"/v1/users/{_seg(name)}/mfa")

    def unlock_user(self, name: str) -> models.UnlockedUser:
        """UnlockUser: clear the user's wrong-MFA-code count and lock (admin)."""
        return self._reply(models.UnlockedUser, "POST", f"/v1/users/{_seg(name)}/unlock")

    def push_file(self, path: str) -> models.CodeArtifact:
        """Upload one script alone (``podfleet job submit --entrypoint FILE``); its ``ref``
        plus the file's name is the entrypoint. A script that imports its neighbours is
        pushed with its directory (``push_code``)."""
        import io
        import tarfile
        from pathlib import Path

        src = Path(path)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar, src.open("rb") as f:
            info = tar.gettarinfo(str(src), arcname=src.name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0  # the same script gives the same digest
            tar.addfile(info, f)
        return self.upload_code(buf.getvalue())

    def push_code(self, directory: str) -> models.CodeArtifact:
        """Pack ``directory`` (links, ``.git`` and ``__pycache__`` left out) and upload it."""
        from podfleet.security.code import pack_dir

        return self.upload_code(pack_dir(directory))
