"""IAM-style policies: JSON statements, and the one evaluation rule (pure).

A policy is ``{"Statement": [{"Effect": "Allow"|"Deny", "Action": ..., "Resource": ...,
"Condition": ...}]}``. ``Action`` names operationIds (``DeleteCluster``) with ``*`` and
``?`` wildcards (``Describe*``), and the option actions a handler asks for when a request
uses a privileged option (``UseCheckpointOptions``, ``UseFabricCommands``); ``Resource``
names ``cluster/NAME``, ``job/ID``, ``token/ID``, ``audit``, ``code``... with wildcards (``job/*``). ``Condition`` supports
``Bool`` / ``BoolIfExists`` / ``StringEquals`` / ``StringLike`` over the request context
(``podfleet:MultiFactorAuthPresent``, ``podfleet:PrincipalRole``...).

Evaluation, as IAM's: an explicit Deny in any matching statement wins; else an Allow in
any matching statement allows; else the request is denied implicitly. The order of
policies and statements never matters.

Built-in policies: ``ClusterAdmin``, ``Scheduler`` (jobs), ``StorageAccess`` (checkpoint
options), ``ReadOnly``, ``Auditor``; their reads are named one by one (``READ_ACTIONS``),
so the admin-only reads (``ADMIN_READS``: tokens, users) stay ClusterAdmin's. And one
policy per role, derived from the API's table of operations and option actions
(``role_policy``), so role tokens keep exactly the rights the role model gives them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from podfleet.errors import InvalidInputError, UnknownNameError

EFFECTS = ("Allow", "Deny")
CONDITION_OPS = ("Bool", "BoolIfExists", "StringEquals", "StringLike")
MFA_KEY = "podfleet:MultiFactorAuthPresent"
MAX_STATEMENTS = 100


@dataclass(frozen=True)
class Statement:
    effect: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    condition: tuple[tuple[str, str, tuple[str, ...]], ...] = ()  # (operator, key, values)
    sid: str = ""

    def matches(self, action: str, resource: str, context: Mapping[str, str]) -> bool:
        return (any(fnmatchcase(action, a) for a in self.actions)
                and any(fnmatchcase(resource, r) for r in self.resources)
                and all(_condition(op, key, values, context) for op, key, values in self.condition))


@dataclass(frozen=True)
class Policy:
    name: str
    statements: tuple[Statement, ...]


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str  # "explicit-deny" | "allowed" | "implicit-deny"
    policy: str | None = None
    sid: str | None = None

    def describe(self) -> str:
        where = f" by {self.policy}" + (f" ({self.sid})" if self.sid else "") if self.policy else ""
        return {"explicit-deny": "denied explicitly", "allowed": "allowed",
                "implicit-deny": "denied: no statement allows it"}[self.reason] + where


def _condition(op: str, key: str, values: tuple[str, ...], context: Mapping[str, str]) -> bool:
    have = context.get(key)
    if have is None:
        return op == "BoolIfExists"
    if op in ("Bool", "BoolIfExists"):
        return have.lower() in (v.lower() for v in values)
    if op == "StringEquals":
        return have in values
    return any(fnmatchcase(have, v) for v in values)  # StringLike


def _strings(value: Any, *, field: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(x, str) and x for x in items):
        raise InvalidInputError(f"{field} must be a string or a non-empty list of strings, got {value!r}",
                                field=field)
    return tuple(items)


def parse_policy(name: str, doc: Any) -> Policy:
    """A policy from its JSON document, every field checked with a message naming it."""
    if not isinstance(doc, dict) or "Statement" not in doc:
        raise InvalidInputError('a policy is an object with a "Statement" list', field="Statement")
    raw = doc["Statement"]
    raw = [raw] if isinstance(raw, dict) else raw
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_STATEMENTS:
        raise InvalidInputError(f"Statement must hold 1-{MAX_STATEMENTS} statements", field="Statement")
    out = []
    for i, st in enumerate(raw):
        where = f"Statement[{i}]"
        if not isinstance(st, dict):
            raise InvalidInputError(f"{where} must be an object", field=where)
        extra = sorted(set(st) - {"Sid", "Effect", "Action", "Resource", "Condition"})
        if extra:
            raise UnknownNameError(f"{where} field", extra[0], ["Sid", "Effect", "Action", "Resource", "Condition"],
                                   field=where)
        if st.get("Effect") not in EFFECTS:
            raise UnknownNameError(f"{where}.Effect", st.get("Effect"), EFFECTS, field=f"{where}.Effect")
        cond = []
        for op, tests in (st.get("Condition") or {}).items():
            if op not in CONDITION_OPS:
                raise UnknownNameError("condition operator", op, CONDITION_OPS, field=f"{where}.Condition")
            if not isinstance(tests, dict):
                raise InvalidInputError(f"{where}.Condition.{op} must map keys to values", field=f"{where}.Condition")
            for key, values in tests.items():
                cond.append((op, str(key), _strings(values, field=f"{where}.Condition.{op}.{key}")))
        out.append(Statement(st["Effect"], _strings(st.get("Action"), field=f"{where}.Action"),
                             _strings(st.get("Resource", "*"), field=f"{where}.Resource"),
                             tuple(cond), str(st.get("Sid", ""))))
    return Policy(name, tuple(out))


def evaluate(policies: Iterable[Policy], action: str, resource: str,
             context: Mapping[str, str] | None = None) -> Decision:
    """Explicit deny > allow > implicit deny, whatever the order of policies and statements."""
    ctx = context or {}
    allow: Decision | None = None
    for p in policies:
        for st in p.statements:
            if not st.matches(action, resource, ctx):
                continue
            if st.effect == "Deny":
                return Decision(False, "explicit-deny", p.name, st.sid or None)
            if allow is None:
                allow = Decision(True, "allowed", p.name, st.sid or None)
    return allow or Decision(False, "implicit-deny")


def _policy(name: str, *statements: dict[str, Any]) -> Policy:
    return parse_policy(name, {"Statement": list(statements)})


# The reads anyone with a read policy may make, named one by one: wildcards such as
# ``List*`` would also grant the admin-only reads below, and any read added later.
READ_ACTIONS = ["ListClusters", "DescribeCluster", "DescribeClusterHardware", "GetClusterLogs",
                "ListTrainingJobs", "DescribeTrainingJob", "GetJobLogs", "GetJobMetrics", "GetTelemetry",
                "PlanParallelism", "GetPresets", "ListAlerts", "ListRecoveries", "ListFirmwareUpdates", "DescribeFirmwareUpdate",
                "DiagnoseCluster", "GetRecommendations", "ListGuides", "GetGuide", "ListHealthReports",
                "GetHealthReport", "ListQueues", "DescribeQueue", "DescribeJobArray", "ListPriorityClasses",
                "ListReservations", "DescribeReservation", "GetUsage", "ListMaintenance", "DescribeMaintenance"]
AUDIT_READS = ["ListAuditEvents", "VerifyAuditChain"]
# Reads only ClusterAdmin (or an inline policy naming them) grants: who holds which
# credential, and who may do what.
ADMIN_READS = ["ListAccessTokens", "ListUsers", "DescribeUser"]
# Actions that are parts of an operation, not operations: the handler asks for them when
# a request uses the option. UseCheckpointOptions: a job's checkpoint_dir, key_file or
# encrypt_checkpoints false (checkpoints leave the cluster's encrypted data directory).
# UseFabricCommands: a cluster's ray_address, neuron_ls or neuron_monitor (the control plane
# connects to, or runs, what they name on its own host).
CHECKPOINT_OPTIONS_ACTION = "UseCheckpointOptions"
FABRIC_COMMANDS_ACTION = "UseFabricCommands"
OPTION_ACTIONS = [CHECKPOINT_OPTIONS_ACTION, FABRIC_COMMANDS_ACTION]
# Changes that need a second factor when MFA is enforced (``MFA_REQUIRED`` policy): token
# creation, policy changes (creating a user attaches policies), key rotation, cluster
# deletion, unlocking a user's second factor, and running a maintenance command on the
# hosts (StartMaintenance, ResumeMaintenance). EnableMfa is not among them: a user without
# MFA must be able to enrol.
MFA_ACTIONS = ["CreateAccessToken", "CreateUser", "Put*Policy", "Attach*Policy", "Delete*Policy", "RotateKeys",
               "DeleteCluster", "UnlockUser", "StartMaintenance", "ResumeMaintenance"]

BUILTIN: dict[str, Policy] = {
    "ClusterAdmin": _policy("ClusterAdmin", {"Sid": "Everything", "Effect": "Allow", "Action": "*", "Resource": "*"}),
    "Scheduler": _policy("Scheduler",
                         {"Sid": "Jobs", "Effect": "Allow", "Resource": "*",
                          "Action": ["SubmitTrainingJob", "StopTrainingJob", "StopJobArray", "UploadCode",
                                     *READ_ACTIONS]},
                         {"Sid": "NotAudit", "Effect": "Deny", "Action": ["ListAuditEvents", "VerifyAuditChain"],
                          "Resource": "*"}),
    "StorageAccess": _policy("StorageAccess", {"Sid": "CheckpointOptions", "Effect": "Allow", "Resource": "*",
                                               "Action": ["UseCheckpointOptions", "DescribeTrainingJob"]}),
    "ReadOnly": _policy("ReadOnly", {"Sid": "Read", "Effect": "Allow", "Action": READ_ACTIONS, "Resource": "*"},
                        {"Sid": "NotAudit", "Effect": "Deny", "Action": ["ListAuditEvents", "VerifyAuditChain"],
                         "Resource": "*"}),
    "Auditor": _policy("Auditor", {"Sid": "Audit", "Effect": "Allow", "Resource": "*",
                                   "Action": [*AUDIT_READS, *READ_ACTIONS]}),
    "MFARequired": _policy("MFARequired", {"Sid": "SecondFactor", "Effect": "Deny", "Action": MFA_ACTIONS,
                                           "Resource": "*", "Condition": {"BoolIfExists": {MFA_KEY: "false"}}}),
}


def role_policy(role: str, rules: Mapping[str, str], ranks: Mapping[str, int]) -> Policy:
    """The built-in policy of a role: Allow exactly the operations ``rules`` (operationId
    -> least role) grant it, given the roles' ``ranks``. Existing tokens keep their rights."""
    mine = ranks[role]
    actions = sorted(op for op, need in rules.items() if ranks[need] <= mine)
    return Policy(f"Role:{role}", (Statement("Allow", tuple(actions) or ("-none-",), ("*",), sid="RoleRights"),))


def builtin(name: str) -> Policy:
    try:
        return BUILTIN[name]
    except KeyError:
        raise UnknownNameError("policy", name, sorted(BUILTIN), field="policy") from None


def resource_of(path_params: Mapping[str, Any]) -> str:
    """The resource a request acts on, from its path: ``cluster/NAME``, ``job/ID``..."""
    if "queue" in path_params and "cluster" in path_params:
        return queue_resource(str(path_params["cluster"]), str(path_params["queue"]))
    if "reservation" in path_params and "cluster" in path_params:
        return f"reservation/{path_params['cluster']}/{path_params['reservation']}"
    for key, kind in (("job", "job"), ("array", "job-array"), ("token_id", "token"), ("alert_id", "alert"),
                      ("cluster", "cluster")):
        if key in path_params:
            return f"{kind}/{path_params[key]}"
    return "*"


def queue_resource(cluster: str, queue: str) -> str:
    """A cluster queue as a policy resource: ``queue/CLUSTER/QUEUE``."""
    return f"queue/{cluster}/{queue}"


def names_queues(policies: Iterable[Policy], action: str) -> bool:
    """Whether any statement about ``action`` names queue resources: then a submit's
    queue must be allowed too (a team's Scheduler policy limited to its queues)."""
    return any(r.startswith("queue/") for p in policies for s in p.statements
               if any(fnmatchcase(action, a) for a in s.actions) for r in s.resources)
