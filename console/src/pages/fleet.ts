import { allows, api, enc, type Reply } from "../api";
import { clear, h } from "../dom";
import { every, link, select, type Ctx } from "../app";
import { jobColor, POD_STATE } from "../colors";
import { COLOR_METRICS, metricByKey, shownState, type Hardware } from "../metrics";
import { legend, torus, type TorusView } from "../torus";
import { chipControls } from "./cluster";

/** One pod's row of DescribeClusterHardware ?summary=true. */
interface PodRow {
  pod: number; block: number; chips: number; healthy: number; failed: number; spare: number; busy: number;
  utilization: number; states?: Record<string, number>; jobs: string[];
}
interface BlockRow { block: number; pods: number[]; chips: number; healthy: number; busy: number; utilization: number }
interface Summary { name: string; time: string; pods_per_block: number; pods: PodRow[]; blocks: BlockRow[] }

/** A pod's state at a glance: down when no chip of it is healthy (a pod lost as a whole),
 * impaired when some chips are failed or isolated, else healthy (other states, such as
 * updating or degraded, are listed on the tile but leave its colour). */
export function podState(p: PodRow): keyof typeof POD_STATE {
  if (p.healthy === 0) return "down";
  const st = p.states ?? {};
  return (st.failed ?? 0) + (st.isolated ?? 0) > 0 ? "impaired" : "healthy";
}

/** A page of one pod as the torus draws a cluster: chips and links renumbered from 0 and
 * given the pod's own coordinates (a fleet's chips carry their fleet index, its first
 * dimension is the pod), so the torus lays it out as it lays out a one-pod cluster. */
function podHardware(page: Hardware & { pod: number }, lo: number): Hardware {
  const n = page.chips.length;
  const local = (i: number) => i - lo;
  const dims = page.dims.length > 3 ? page.dims.slice(1) : page.dims;
  // Index order within a pod is x fastest, then y, then z (as a one-pod cluster's coords).
  const coords = (i: number) => dims.map((_, k) => Math.floor(i / dims.slice(0, k).reduce((a, b) => a * b, 1)) % dims[k]);
  return {
    ...page,
    name: `${page.name} pod ${page.pod}`,
    dims,
    chips: page.chips.map((c) => ({ ...c, index: local(c.index), coords: coords(local(c.index)) })),
    links: page.links.filter((l) => local(l.src) >= 0 && local(l.src) < n && local(l.dst) >= 0 && local(l.dst) < n)
      .map((l) => ({ ...l, src: local(l.src), dst: local(l.dst) })),
  };
}

/** A fleet cluster's page: one tile per pod, grouped by network block, coloured by state,
 * with its utilisation and jobs, read from the per-pod summary (never every chip); a
 * tile opens its pod's torus, read a pod at a time (?pod=N). Both refresh every 2 s. */
export async function fleetView(root: HTMLElement, ctx: Ctx, cluster: Reply<"DescribeCluster">): Promise<void> {
  const base = `/v1/clusters/${enc(cluster.id)}/hardware`;
  let summary = await api<Summary>("GET", `${base}?summary=true`);
  const names = new Map<string, string>();
  let nameKey = "";
  const loadNames = async () => {
    const ids = [...new Set(summary.pods.flatMap((p) => p.jobs))].sort();
    if (ids.join() === nameKey) return;
    nameKey = ids.join();
    try {
      const { jobs } = await api<Reply<"ListTrainingJobs">>("GET", `/v1/jobs?cluster=${enc(cluster.name)}`);
      for (const j of jobs) if (j.name) names.set(j.id, j.name);
    } catch { /* ids alone */ }
  };
  await loadNames();

  let shown: number | null = ctx.query.has("pod") ? Number(ctx.query.get("pod")) : null;
  let metric = metricByKey(ctx.query.get("metric") ?? "neuroncore_utilization");
  const blocks = h("div", { class: "fleet", "data-testid": "fleet" });
  const live = h("span", { class: "live", "data-testid": "fleet-time", role: "status", "aria-live": "off" }, summary.time ?? "");
  const podKey = h("ul", { class: "state-legend", "aria-label": "pod states (tile colours)" },
    ...Object.entries(POD_STATE).map(([st, m]) => h("li", {},
      h("span", { class: "swatch pod-swatch", "data-pod-swatch": st, style: `border-color: ${m.color}` }, m.glyph), `${st}: ${m.meaning}`)),
    h("li", {}, h("span", { class: "util-bar legend-bar", "aria-hidden": "true" }, h("span", { style: "width: 50%" })),
      "bar: busy chips / chips"),
    h("li", {}, h("span", { class: "swatch job-swatch", style: "border-color: #332288" }), "a job on the pod"));

  const metricSel = select("metric", COLOR_METRICS.map((m) => m.key), metric.key);
  metricSel.id = "pod-metric-sel";
  const podBox = h("section", { class: "pod-torus card", "data-testid": "pod-torus", hidden: true, "aria-live": "polite" });
  const detail = h("aside", { class: "detail", "data-testid": "chip-detail", hidden: true, tabindex: -1 });
  let view: TorusView | null = null;
  let hw: Hardware | null = null;
  let lo = 0;

  function tile(p: PodRow): HTMLElement {
    const state = podState(p);
    const others = Object.entries(p.states ?? {}).map(([st, n]) => `${n} ${st}`).join(" · ");
    const pct = Math.round(p.utilization * 100);
    const open = h("button", { type: "button", class: "pod-open", "aria-pressed": String(shown === p.pod),
      "aria-label": `pod ${p.pod}: ${state}, ${p.busy} of ${p.chips} chips busy; show its torus` },
      h("span", { class: "pod-glyph", "aria-hidden": "true" }, POD_STATE[state].glyph), ` pod ${p.pod}`);
    open.addEventListener("click", () => void showPod(p.pod));
    return h("li", { class: "pod-tile", "data-pod": p.pod, "data-block": p.block, "data-state": state, "data-busy": p.busy,
      "data-chips": p.chips, "data-healthy": p.healthy, "data-jobs": p.jobs.join(" "), "data-shown": shown === p.pod,
      style: `border-color: ${POD_STATE[state].color}` },
      h("h3", {}, open),
      h("p", { class: "sub" }, `${state} · ${p.healthy}/${p.chips} healthy${p.spare ? ` · ${p.spare} spare` : ""}`),
      h("p", { class: "util" }, h("span", { class: "util-bar", "aria-hidden": "true" }, h("span", { style: `width: ${pct}%` })),
        h("span", { "data-field": "busy" }, `${p.busy}/${p.chips} busy (${pct}%)`)),
      others ? h("p", { class: "sub", "data-field": "states" }, others) : null,
      h("ul", { class: "pod-jobs", "aria-label": `jobs on pod ${p.pod}` }, ...p.jobs.map((id) => h("li", { "data-job": id },
        h("span", { class: "swatch job-swatch", style: `border-color: ${jobColor(id)}` }),
        link(ctx, `/jobs/${enc(id)}`, names.get(id) ?? id), names.has(id) ? h("small", {}, ` ${id}`) : null))));
  }

  const draw = () => {
    // Redrawn on each refresh: the keyboard's place (a tile's button) is kept across it.
    const focused = (document.activeElement as HTMLElement | null)?.closest?.(".pod-tile")?.getAttribute("data-pod");
    clear(blocks, ...summary.blocks.map((b) => h("section", { class: "fleet-block", "data-block": b.block,
      "aria-label": `block ${b.block}` },
      h("h2", {}, `Block ${b.block} `, h("small", {}, `pods ${b.pods[0]}-${b.pods[b.pods.length - 1]} · ${b.busy}/${b.chips} chips busy · ${b.healthy} healthy`)),
      h("ul", { class: "pod-tiles" }, ...summary.pods.filter((p) => p.block === b.block).map(tile)))));
    live.textContent = summary.time ?? "";
    if (focused) blocks.querySelector<HTMLElement>(`.pod-tile[data-pod="${focused}"] .pod-open`)?.focus();
  };

  async function loadPod(pod: number): Promise<void> {
    const page = await api<Hardware & { pod: number }>("GET", `${base}?pod=${pod}&limit=4096`);
    if (shown !== pod) return;
    lo = pod * (summary.pods[pod]?.chips ?? page.chips.length);
    hw = podHardware(page, lo);
  }

  async function showPod(pod: number): Promise<void> {
    shown = pod;
    draw();
    await loadPod(pod);
    if (!hw || shown !== pod) return;
    const cur = hw;
    view = torus(cur, metric, { onChip: (i) => showChip(i), onLink: () => undefined });
    detail.hidden = true;
    chosen = null;
    clear(podBox, h("h2", {}, `Pod ${pod} torus `, h("small", {}, `chips ${lo}-${lo + cur.chips.length - 1}, numbered within the pod`)),
      h("div", { class: "toolbar" }, h("label", { for: metricSel.id }, "Colour by "), metricSel, legend(metric, cur)),
      h("div", { class: "cluster-layout" }, h("div", { class: "torus", "data-pod": pod }, view.svg), h("div", { class: "side" }, detail)));
    podBox.setAttribute("data-pod", String(pod));
    podBox.hidden = false;
  }

  let chosen: number | null = null;
  function showChip(i: number): void {
    if (!hw || !view) return;
    chosen = i;
    view.select(i);
    const c = hw.chips[i], chip = lo + i;
    clear(detail, h("h2", {}, `Chip ${chip}`),
      h("dl", {}, h("dt", {}, "index"), h("dd", { "data-field": "index" }, String(chip)),
        h("dt", {}, "in pod"), h("dd", {}, `${shown} (chip ${i})`), h("dt", {}, "coords"), h("dd", {}, c.coords.join(", ")),
        h("dt", {}, "state"), h("dd", { "data-field": "state" }, shownState(c)),
        h("dt", {}, "job"), h("dd", {}, c.job ? link(ctx, `/jobs/${enc(c.job)}`, names.get(c.job) ?? c.job) : "—")),
      allows(ctx.me, "operator") ? chipControls(ctx, cluster.id, chip) : null);
    detail.hidden = false;
  }

  metricSel.addEventListener("change", () => {
    metric = metricByKey(metricSel.value);
    if (shown !== null) void showPod(shown);
  });

  root.append(
    h("h1", {}, `Cluster ${cluster.name}`),
    h("p", { class: "sub" }, `${cluster.id} · ${cluster.type ?? ""} · ${cluster.state} · ${summary.pods.length} pods in `,
      `${summary.blocks.length} block${summary.blocks.length === 1 ? "" : "s"} of ${summary.pods_per_block} · ${cluster.chips} chips · `,
      link(ctx, `/clusters/${enc(cluster.name)}/dashboard`, "dashboard"), " · ",
      link(ctx, `/jobs?cluster=${enc(cluster.name)}`, "jobs"), " · ", live),
    h("div", { class: "toolbar" }, podKey), blocks, podBox);
  draw();
  if (shown !== null && summary.pods[shown]) await showPod(shown);

  every(ctx, 2000, () => void (async () => {
    summary = await api<Summary>("GET", `${base}?summary=true`);
    await loadNames();
    draw();
    if (shown === null || !view) return;
    const pod = shown;
    await loadPod(pod);
    if (!hw || shown !== pod) return;
    view.update(hw, metric);
    const st = detail.querySelector("[data-field=state]");
    if (st && chosen !== null) st.textContent = shownState(hw.chips[chosen]);
  })().catch(() => undefined));
}
