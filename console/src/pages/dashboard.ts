import { api, enc, type Reply } from "../api";
import { clear, h } from "../dom";
import { every, field, lagMs, link, select, sse, type Ctx } from "../app";
import { chart, setData, type Series } from "../chart";
import { viridis } from "../colors";
import { RANGES } from "./cluster";
import type { Hardware } from "../metrics";

const MEANS: { metric: string; label: string; unit: string; scale: number }[] = [
  { metric: "utilization_ratio", label: "utilization", unit: "%", scale: 100 },
  { metric: "hbm_used_bytes", label: "HBM used", unit: "GiB", scale: 2 ** -30 },
  { metric: "temperature_c", label: "temperature", unit: "°C", scale: 1 },
  { metric: "power_w", label: "power", unit: "W", scale: 1 },
];
const HEAT_COLS = 120;
// The heatmap's colour scale: viridis from 0 to 100 % utilization.
const RAMP = Array.from({ length: 11 }, (_, i) => viridis(i / 10)).join(", ");

/** A sample's wall-clock time of day, UTC (the axis's ends; the date is the page's). */
function clock(t: string | undefined): string {
  return t ? `${t.slice(11, 19)} UTC` : "—";
}

/** Per-cluster dashboard: a per-chip utilization heatmap, interconnect x/y against z,
 * HBM, temperature, power, job throughput; realtime (pushed) or the rollups of an hour or a day. */
export async function dashboardPage(root: HTMLElement, ctx: Ctx): Promise<void> {
  const cluster = await api<Reply<"DescribeCluster">>("GET", `/v1/clusters/${enc(ctx.params.cluster)}`);
  const rangeSel = select("range", RANGES, ctx.query.get("range") ?? "realtime");
  rangeSel.id = "dash-range";
  const lagEl = h("span", { "data-testid": "dash-lag", role: "status" }, "—");
  const canvas = h("canvas", { width: HEAT_COLS * 4, height: (cluster.chips ?? 64) * 3, role: "img",
    "aria-label": "per-chip utilization over the last samples: one row per chip, newest on the right" });
  const heat: number[][] = [];
  const heatT: string[] = []; // each column's sample time, for the time axis
  const xFirst = h("span", {}, "—"), xLast = h("span", {}, "—");
  const mean = MEANS.map((m) => chart(ctx, `${m.label} (cluster mean)`, [], [{ label: m.label, values: [] }], m.unit));
  const net = chart(ctx, "interconnect in use: x/y against z", [], [{ label: "x/y GB/s", values: [] }, { label: "z GB/s", values: [] }], "GB/s");
  const thr = chart(ctx, "job throughput", [], [{ label: "tokens/s", values: [] }], "tokens/s");
  const netT: number[] = [], xy: (number | null)[] = [], zz: (number | null)[] = [];
  const thrT: number[] = [], thrV: (number | null)[] = [];
  root.append(h("h1", {}, `Dashboard: ${cluster.name}`),
    h("p", { class: "sub" }, link(ctx, `/clusters/${enc(cluster.name)}`, "torus view"), " · live lag ", lagEl),
    h("div", { class: "toolbar" }, field("Range", rangeSel)),
    h("figure", { class: "heatmap" }, h("figcaption", {}, "per-chip utilization"),
      h("div", { class: "heat-grid" },
        h("div", { class: "heat-y", "data-axis": "chip", "aria-hidden": "true" }, h("span", {}, "chip 0"),
          h("span", {}, `chip ${Math.floor(((cluster.chips ?? 64) - 1) / 2)}`), h("span", {}, `chip ${(cluster.chips ?? 64) - 1}`)),
        canvas,
        h("span", {}),
        h("div", { class: "heat-x", "data-axis": "time", "aria-hidden": "true" }, xFirst, h("span", {}, "time →"), xLast)),
      h("div", { class: "heat-scale", "data-testid": "heat-scale" }, h("span", {}, "0 %"),
        h("span", { class: "heat-ramp", style: `background: linear-gradient(to right, ${RAMP})` }), h("span", {}, "100 %"))),
    h("div", { class: "charts" }, ...mean, net, thr));

  const drawHeat = () => {
    const g = canvas.getContext("2d");
    if (!g) return;
    g.clearRect(0, 0, canvas.width, canvas.height);
    heat.forEach((col, x) => col.forEach((u, chip) => { g.fillStyle = viridis(u); g.fillRect(x * 4, chip * 3, 4, 3); }));
  };
  sse(ctx, `/console/stream/clusters/${enc(cluster.id)}/hardware`, {
    hardware: (hw: Hardware, ev) => {
      const now = Date.parse(hw.time) / 1000;
      heat.push(hw.chips.map((c) => {
        const v = c.metrics.neuroncore_utilization;
        return Array.isArray(v) ? v.reduce((a: number, b: number) => a + b, 0) / (v.length || 1) : Number(v ?? 0);
      }));
      heatT.push(hw.time);
      if (heat.length > HEAT_COLS) { heat.shift(); heatT.shift(); }
      xFirst.textContent = clock(heatT[0]);
      xLast.textContent = clock(heatT[heatT.length - 1]);
      drawHeat();
      let a = 0, b = 0;
      for (const l of hw.links) {
        const used = Number(l.metrics.utilization ?? 0) * Number(l.metrics.bandwidth_bytes_per_s ?? 0) / 1e9;
        if (l.axis === "z") b += used; else a += used;
      }
      if (rangeSel.value === "realtime") {
        netT.push(now); xy.push(a); zz.push(b);
        if (netT.length > 900) { netT.shift(); xy.shift(); zz.shift(); }
        setData(net, netT, [{ label: "x/y", values: xy }, { label: "z", values: zz }]);
      }
      lagEl.textContent = `${lagMs(ev, hw.time)} ms`;
    },
  });
  const rollups = async () => {
    const range = rangeSel.value;
    const out = await Promise.all(MEANS.map((m) => api<Reply<"GetTelemetry">>("GET", `/v1/clusters/${enc(cluster.id)}/telemetry?metric=${m.metric}&range=${range}`)));
    out.forEach((t, i) => setData(mean[i], t.t, [{ label: MEANS[i].label, values: t.avg.map((v: number | null) => (v === null ? null : v * MEANS[i].scale)) }] as Series[]));
    if (range !== "realtime") {
      const lt = await api<Reply<"GetTelemetry">>("GET", `/v1/clusters/${enc(cluster.id)}/telemetry?scope=link&metric=utilization_ratio&range=${range}`);
      setData(net, lt.t, [{ label: "all links (ratio)", values: lt.avg }, { label: "z", values: lt.avg.map(() => null) }]);
    } else setData(net, netT, [{ label: "x/y", values: xy }, { label: "z", values: zz }]);
    const { jobs } = await api<Reply<"ListTrainingJobs">>("GET", `/v1/jobs?cluster=${enc(cluster.id)}&state=RUNNING`);
    thrT.push(Date.now() / 1000);
    thrV.push(jobs.reduce((s: number, j) => s + (j.progress.tokens_per_s ?? 0), 0));
    if (thrT.length > 900) { thrT.shift(); thrV.shift(); }
    setData(thr, thrT, [{ label: "tokens/s", values: thrV }]);
  };
  rangeSel.addEventListener("change", () => void rollups());
  await rollups();
  every(ctx, 5000, () => void rollups().catch(() => undefined));
  void clear;
}
