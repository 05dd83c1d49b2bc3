"""Each hardware error kind a fabric reports, mapped to its documented action, the
hardware-level repair steps and its runbook (a guide in docs/kb, ``podfleet docs TOPIC``).

Actions follow the Neuron runtime troubleshooting tables (neuron-docs
nrt-troubleshoot.rst: ``NEURON_HW_ERR`` uncorrectable memory errors and device failures
-> replace the instance; firmware / DMA errors -> reset the device; a collective timeout
seen on one worker -> look at the worker that actually failed). One entry per
``FaultKind``: a kind without a runbook is a test failure, not a silent gap.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from podfleet.hardware.faults import FaultKind


class Action(StrEnum):
    REPLACE = "replace"  # swap the chip's board / the instance
    RESET = "reset"  # reset the device (neuron-reset, or reboot the instance) and re-run checks
    REBOOT = "reboot"  # reboot the node (re-trains its NeuronLink ports)
    WATCH = "watch"  # no repair yet: drain if the rate climbs
    LOOK_ELSEWHERE = "look-at-another-worker"  # the symptom is here, the cause on a peer


@dataclass(frozen=True)
class Runbook:
    kind: str
    action: Action
    severity: int  # which root cause wins when one chip reports several (higher wins)
    root_cause: str
    repair_steps: tuple[str, ...]

    @property
    def topic(self) -> str:
        return f"runbook-{self.kind}"


RUNBOOKS: dict[str, Runbook] = {rb.kind: rb for rb in (
    Runbook(FaultKind.CHIP_FAILURE.value, Action.REPLACE, 90,
            "the chip stopped executing (NEURON_HW_ERR: device failure)",
            ("drain the chip: podfleet chip drain CLUSTER CHIP (its job moves to a spare)",
             "collect neuron-dump / dmesg from the host for the vendor ticket",
             "replace the instance (or the chip's board) and run podfleet verify CLUSTER",
             "return it to service: podfleet chip repair CLUSTER CHIP")),
    Runbook(FaultKind.HBM_UNCORRECTABLE.value, Action.REPLACE, 100,
            "uncorrectable HBM error (NEURON_HW_ERR=HBM_UNREPAIRABLE_ERR)",
            ("drain the chip: podfleet chip drain CLUSTER CHIP",
             "record mem_ecc_uncorrected and the address from neuron-monitor for the RMA",
             "replace the instance: HBM is not field-repairable",
             "podfleet verify CLUSTER, then podfleet chip repair CLUSTER CHIP")),
    Runbook(FaultKind.SRAM_UNCORRECTABLE.value, Action.REPLACE, 95,
            "uncorrectable on-chip SRAM error (NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERR)",
            ("drain the chip: podfleet chip drain CLUSTER CHIP",
             "replace the instance: SRAM errors are not field-repairable",
             "podfleet verify CLUSTER, then podfleet chip repair CLUSTER CHIP")),
    Runbook(FaultKind.FIRMWARE_FAULT.value, Action.RESET, 80,
            "the device firmware stopped responding (NEURON_HW_ERR: firmware / DMA error)",
            ("drain the chip: podfleet chip drain CLUSTER CHIP",
             "reset the device (neuron-reset, or reboot the instance)",
             "check the firmware version against the fleet's: podfleet hardware describe CLUSTER --chip CHIP",
             "if it recurs, roll the firmware back: podfleet firmware update CLUSTER --version PREVIOUS",
             "podfleet chip repair CLUSTER CHIP once the self-test passes")),
    Runbook(FaultKind.THERMAL_RUNAWAY.value, Action.REPLACE, 85,
            "the chip's cooling failed: temperature climbs at a power that should hold it steady",
            ("drain the chip before it reaches its critical temperature: podfleet chip drain CLUSTER CHIP",
             "inspect the cold plate, fans and coolant flow of its node",
             "replace the thermal interface or the board; keep the chip out until it holds temperature under load",
             "podfleet verify CLUSTER (compute shows a throttled chip), then podfleet chip repair CLUSTER CHIP")),
    Runbook(FaultKind.HBM_CORRECTED_BURST.value, Action.WATCH, 40,
            "a burst of corrected HBM errors: not an interruption yet, often a precursor",
            ("watch the corrected-error rate: podfleet alerts list CLUSTER",
             "if it keeps climbing, drain the chip: podfleet chip drain CLUSTER CHIP",
             "plan a replacement at the next maintenance window")),
    Runbook(FaultKind.LINK_DOWN.value, Action.REBOOT, 70,
            "a NeuronLink link is down: traffic detours around it at lower bandwidth",
            ("check both ports' counters: podfleet hardware describe CLUSTER",
             "reboot the node of either end to re-train the link",
             "if it stays down, reseat or replace the link's cable / backplane connector",
             "podfleet verify CLUSTER: the interconnect table shows the ring's bandwidth back")),
    Runbook(FaultKind.LINK_FLAP.value, Action.LOOK_ELSEWHERE, 60,
            "a link that goes down and up: collectives time out on every worker that crosses it",
            ("a collective timeout on one worker is often a peer's: find the link's two chips in the finding",
             "read both ends' link error counters; the end whose errors rise is the bad port",
             "reseat the cable; replace it if it flaps again",
             "podfleet verify CLUSTER to confirm the ring's bandwidth")),
)}

# What happened to a worker process on a worker fabric (local, Ray): its slot's kinds,
# read from the fabric's fault log and its telemetry (advisor/diagnose.py).
WORKER_HUNG, WORKER_KILLED, WORKER_OOM_KILLED, WORKER_SLOW = ("worker-hung", "worker-killed", "worker-oom-killed",
                                                              "worker-slow")
WORKER_KINDS = (WORKER_HUNG, WORKER_KILLED, WORKER_OOM_KILLED, WORKER_SLOW)
RUNBOOKS.update({rb.kind: rb for rb in (
    Runbook(WORKER_OOM_KILLED, Action.LOOK_ELSEWHERE, 58,
            "the kernel's OOM killer ended the worker: the host ran out of memory (its cgroup's oom_kill rose)",
            ("read the worker's last memory sample in the finding and the host's: podfleet hardware describe CLUSTER",
             "find what else holds the host's memory (another job's workers, a data loader) and move or shrink it",
             "give the job fewer samples per rank (global_batch) or a smaller model preset",
             "the job was recovered on a free slot; resubmit it if recovery was off")),
    Runbook(WORKER_HUNG, Action.LOOK_ELSEWHERE, 56,
            "the worker stopped sending heartbeats (stopped, deadlocked, or starved of CPU) and was restarted",
            ("read its last log lines in the finding: a stack in a C call or a lock points at the job's code",
             "check the host for a stopped process (state T in ps) or a CPU hog: podfleet hardware describe CLUSTER",
             "if the same job hangs again it fails as a user-code failure (PODFLEET_HANG_RESTARTS)")),
    Runbook(WORKER_KILLED, Action.LOOK_ELSEWHERE, 54,
            "a signal podfleet did not send ended the worker (kill -9 from outside, a node drain, a host agent)",
            ("find who sent it: the host's audit log or the agent that manages its processes",
             "the job was recovered (a peer replica or the last checkpoint); nothing to repair on the slot",
             "if it recurs on one host, drain that host's slots: podfleet chip drain CLUSTER CHIP")),
    Runbook(WORKER_SLOW, Action.WATCH, 30,
            "one rank runs well under its gang's speed per sample (its host is throttled or shared)",
            ("the balancer gives it fewer samples: podfleet job describe JOB shows scheduling.work_split",
             "check the host for a CPU hog or a throttled core: podfleet hardware describe CLUSTER",
             "if it stays slow, drain its slot so the rank moves: podfleet chip drain CLUSTER CHIP")),
)})

# A chip out of service with no hardware error reported: the health service drained it
# (predicted failure) or an operator cordoned it.
UNEXPLAINED = Runbook("chip-out-of-service", Action.LOOK_ELSEWHERE, 10,
                      "the chip is out of service but the fabric reported no hardware error for it",
                      ("read the cluster's events: podfleet cluster events CLUSTER",
                       "a chip drained on a prediction shows a health alert: podfleet alerts list CLUSTER",
                       "podfleet verify CLUSTER, then podfleet chip repair CLUSTER CHIP if it passes"))


def runbook(kind: str) -> Runbook:
    return RUNBOOKS.get(kind, UNEXPLAINED)
