"""Real Trainium telemetry: neuron-monitor's report stream and ``neuron-ls -j`` as podfleet metrics.

    inv = parse_neuron_ls(subprocess.check_output(["neuron-ls", "-j"]))
    tele = NeuronTelemetry(inv)                 # topology from connected_to (trn2-node: 4x4 torus)
    with NeuronMonitorReader.spawn(period_s=1) as reader:
        for report in reader:
            events = tele.update(report)        # chip-failed / chip-degraded on ECC and HW errors
            tele.chip_metrics()["utilization"]  # same names as the twin (metrics.CHIP_METRICS)
"""

from podfleet.fabric.neuron.ls import (
    NeuronDevice,
    NeuronInventory,
    Wiring,
    build_topology,
    chip_type_of,
    parse_neuron_ls,
)
from podfleet.fabric.neuron.metrics import (
    CHIP_METRICS,
    LINK_METRICS,
    chip_metrics,
    host_metrics,
    link_metrics,
)
from podfleet.fabric.neuron.monitor import MonitorReport, RuntimeReport, parse_monitor_report
from podfleet.fabric.neuron.reader import NeuronMonitorReader
from podfleet.fabric.neuron.telemetry import NeuronTelemetry

__all__ = [
    "CHIP_METRICS",
    "LINK_METRICS",
    "MonitorReport",
    "NeuronDevice",
    "NeuronInventory",
    "NeuronMonitorReader",
    "NeuronTelemetry",
    "RuntimeReport",
    "Wiring",
    "build_topology",
    "chip_metrics",
    "chip_type_of",
    "host_metrics",
    "link_metrics",
    "parse_monitor_report",
    "parse_neuron_ls",
]
