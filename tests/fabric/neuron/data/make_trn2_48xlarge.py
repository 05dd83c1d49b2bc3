"""Write ``neuron-monitor-trn2-48xlarge.jsonl``: reports covering all 16 devices of a
trn2.48xlarge, derived from ``neuron-monitor-trn2-full.json`` (the documented schema).

Line 1 and 2: one runtime on all 64 logical cores (4 per device at LNC=2), every core
busy (utilization 10 + device index percent), HBM in use on every core, hardware
counters for every device with no errors. Line 3: the same, with one uncorrectable SRAM
ECC error on device 5. Rerun this script to regenerate the file.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

HERE = Path(__file__).parent
ECC_DEVICE = 5


def report(step: int, ecc_device: int | None = None) -> dict:
    doc = copy.deepcopy(json.loads((HERE / "neuron-monitor-trn2-full.json").read_text()))
    rt = doc["neuron_runtime_data"][0]
    rep = rt["report"]
    cores = {}
    mem = {}
    for core in range(64):
        dev = core // 4
        pct = 10.0 + dev + step
        cores[str(core)] = {
            "neuroncore_utilization": pct, "flops": 1e12 * (dev + 1),
            "v3d": {f"nc_v3.{2 * core}": {"neuroncore_utilization": pct},
                    f"nc_v3.{2 * core + 1}": {"neuroncore_utilization": pct}},
        }
        mem[str(core)] = {"constants": 1_000_000 * (dev + 1), "model_code": 0, "model_shared_scratchpad": 0,
                          "runtime_memory": 0, "tensors": 0}
    rep["neuroncore_counters"]["neuroncores_in_use"] = cores
    rep["memory_used"]["neuron_runtime_used_bytes"]["usage_breakdown"]["neuroncore_memory_usage"] = mem
    rep["execution_stats"]["error_summary"] = dict.fromkeys(rep["execution_stats"]["error_summary"], 0)
    doc["system_data"]["neuron_hw_counters"]["neuron_devices"] = [
        {"neuron_device_index": d, "mem_ecc_corrected": 0, "mem_ecc_uncorrected": 0,
         "sram_ecc_uncorrected": 1 if d == ecc_device else 0, "sram_ecc_corrected": 0}
        for d in range(16)
    ]
    return doc


def main() -> None:
    lines = [report(0), report(1), report(2, ecc_device=ECC_DEVICE)]
    (HERE / "neuron-monitor-trn2-48xlarge.jsonl").write_text(
        "".join(json.dumps(d, separators=(",", ":")) + "\n" for d in lines))


if __name__ == "__main__":
    main()
