// The chip metrics the torus can be coloured by: names as the API spells them.
export interface Chip {
  index: number; coords: number[]; state: string; spare: boolean; mode?: string;
  job: string | null; health: unknown; metrics: Record<string, any>;
}
export interface Link {
  index: number; src: number; dst: number; axis: string; state: string; bw_gbps?: number;
  metrics: Record<string, any>; health?: unknown;
}
export interface Hardware {
  cluster_id: string; name: string; state: string; type: string; dims: number[]; time: string;
  chips: Chip[]; links: Link[];
}

export interface ColorMetric {
  key: string; label: string; unit: string; value: (c: Chip) => number; max: (hw: Hardware) => number;
  telemetry: string; scale: number; // GetTelemetry's name for it, and the factor to this unit
}

function mean(v: unknown): number {
  if (Array.isArray(v)) return v.length ? v.reduce((a: number, b: number) => a + (b ?? 0), 0) / v.length : NaN;
  return typeof v === "number" ? v : NaN;
}

// neuroncore_utilization is percent per core on every fabric (the twin, neuron-monitor, the
// workers' CPU or GPU share), as the dashboard's heatmap reads it; its history is a ratio.
export const COLOR_METRICS: ColorMetric[] = [
  { key: "neuroncore_utilization", label: "utilization", unit: "%", telemetry: "utilization_ratio", scale: 100, value: (c) => mean(c.metrics.neuroncore_utilization), max: () => 100 },
  { key: "hbm_used_bytes", label: "HBM used", unit: "GiB", telemetry: "hbm_used_bytes", scale: 2 ** -30, value: (c) => mean(c.metrics.hbm_used_bytes) / 2 ** 30, max: () => 96 },
  { key: "temperature_c", label: "temperature", unit: "°C", telemetry: "temperature_c", scale: 1, value: (c) => mean(c.metrics.temperature_c), max: () => 100 },
  { key: "power_w", label: "power", unit: "W", telemetry: "power_w", scale: 1, value: (c) => mean(c.metrics.power_w), max: () => 500 },
  { key: "mem_ecc_corrected", label: "ECC corrected", unit: "", telemetry: "mem_ecc_corrected", scale: 1, value: (c) => mean(c.metrics.mem_ecc_corrected) + mean(c.metrics.sram_ecc_corrected),
    max: (hw) => Math.max(1, ...hw.chips.map((c) => mean(c.metrics.mem_ecc_corrected) + mean(c.metrics.sram_ecc_corrected))) },
];

export function metricByKey(key: string): ColorMetric {
  return COLOR_METRICS.find((m) => m.key === key) ?? COLOR_METRICS[0];
}

/** The state a chip element shows: the fabric's state, or spare/cordoned/draining where healthy. */
export function shownState(c: Chip): string {
  if (c.state !== "healthy") return c.state;
  if (c.mode === "cordoned" || c.mode === "draining") return c.mode;
  return c.spare ? "spare" : "healthy";
}
