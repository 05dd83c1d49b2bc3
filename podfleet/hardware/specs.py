"""Chip specifications catalog.

Every figure cites ../shared/reference/trn2.md, which in turn names the vendor document.
Dense (non-sparse) TFLOPS per dtype. Bandwidths are bytes per second.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from podfleet.errors import UnknownNameError

# Firmware versions a rollout can install (the twin's chips run these; ``podfleet firmware update``).
FIRMWARE_VERSIONS = ("2.20.0", "2.21.0", "2.22.0", "2.23.0")

GiB = 1024**3
GB = 10**9
TB = 10**12


@dataclass(frozen=True)
class ChipSpec:
    name: str
    vendor: str
    cores: int
    tflops: dict[str, float] = field(hash=False)
    hbm_bytes: int
    hbm_bw_bytes_per_s: float
    # Aggregate chip-to-chip bandwidth per chip (all links, one direction).
    link_bw_bytes_per_s: float
    tdp_w: float
    sram_bytes: int
    source: str

    def peak_flops(self, dtype: str = "bf16") -> float:
        """Dense peak FLOP/s for ``dtype``; raises with the valid choices otherwise."""
        if dtype not in self.tflops:
            raise UnknownNameError("dtype", dtype, self.tflops, field="dtype")
        return self.tflops[dtype] * 1e12



def _nvidia(name: str, *, sms: int, tflops: dict[str, float], hbm_gb: int, hbm_tb_s: float, nvlink_gb_s: float,
            tdp_w: float, l2_mib: int, sheet: str) -> ChipSpec:
    """A GPU from its data sheet's units: ``link_bw_bytes_per_s`` is one direction, the
    sheet's NVLink figure both; the L2 cache stands for on-chip SRAM."""
    return ChipSpec(name=name, vendor="nvidia", cores=sms, tflops=tflops, hbm_bytes=hbm_gb * GB,
                    hbm_bw_bytes_per_s=hbm_tb_s * TB, link_bw_bytes_per_s=nvlink_gb_s * GB / 2, tdp_w=tdp_w,
                    sram_bytes=l2_mib * 1024**2, source=f"NVIDIA {sheet} data sheet")


_HOPPER_TFLOPS = {"fp8": 1979.0, "bf16": 989.0, "fp16": 989.0, "fp32": 67.0}

CHIPS: dict[str, ChipSpec] = {
    "trn2": ChipSpec(
        name="trn2",
        vendor="aws",
        cores=8,  # NeuronCore-v3; LNC=2 (default) exposes 4 logical cores
        tflops={"fp8": 1299.0, "bf16": 667.0, "fp16": 667.0, "fp32": 181.0},
        hbm_bytes=96 * GiB,
        hbm_bw_bytes_per_s=2.9 * TB,
        link_bw_bytes_per_s=1.28 * TB,  # 1,024 GB/s in-node + 256 GB/s across instances
        # Not published; third-party estimates ~500 W (reference/trn2.md). A parameter.
        tdp_w=500.0,
        sram_bytes=8 * (28 + 2) * 1024**2,  # 28 MiB SBUF + 2 MiB PSUM per core
        source="neuron-docs about-neuron/arch/neuron-hardware/trainium2.rst; trn2-arch.rst",
    ),
    "trn1": ChipSpec(
        name="trn1",
        vendor="aws",
        cores=2,
        tflops={"fp8": 191.0, "bf16": 190.0, "fp16": 190.0, "fp32": 47.5},
        hbm_bytes=32 * GiB,
        hbm_bw_bytes_per_s=820 * GiB,
        link_bw_bytes_per_s=384 * GiB,
        tdp_w=400.0,  # not published; kept a parameter
        sram_bytes=2 * 24 * 1024**2,
        source="neuron-docs about-neuron/arch/neuron-hardware/trainium.rst; trn1-arch.rst",
    ),
    # NVIDIA data sheets: memory in GB and TB/s, NVLink bidirectional (halved to one direction).
    "a100": _nvidia("a100", sms=108, tflops={"bf16": 312.0, "fp16": 312.0, "fp32": 19.5, "tf32": 156.0},
                    hbm_gb=80, hbm_tb_s=2.0, nvlink_gb_s=600, tdp_w=400.0, l2_mib=40, sheet="A100 80GB"),
    "h100": _nvidia("h100", sms=132, tflops=_HOPPER_TFLOPS, hbm_gb=80, hbm_tb_s=3.35, nvlink_gb_s=900,
                    tdp_w=700.0, l2_mib=50, sheet="H100 SXM"),
    # The H100's die with more and faster HBM.
    "h200": _nvidia("h200", sms=132, tflops=_HOPPER_TFLOPS, hbm_gb=141, hbm_tb_s=4.8, nvlink_gb_s=900,
                    tdp_w=700.0, l2_mib=50, sheet="H200 SXM"),
}


def get_chip(name: str) -> ChipSpec:
    try:
        return CHIPS[name]
    except KeyError:
        raise UnknownNameError("chip type", name, CHIPS, field="chip_type") from None
