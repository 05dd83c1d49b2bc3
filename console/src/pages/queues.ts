import { api, enc, type Reply, type Schemas } from "../api";
import { clear, fmt, h } from "../dom";
import { every, field, link, select, type Ctx } from "../app";
import { chart, setData, type Series } from "../chart";

// GetUsage's buckets (podfleet/control/accounting.py BUCKETS) and how the picker names them.
const BUCKETS: [string, string][] = [["1m", "per minute"], ["5m", "per 5 minutes"], ["15m", "per 15 minutes"],
  ["1h", "per hour"], ["6h", "per 6 hours"], ["1d", "per day"]];
const HEADS = ["queue", "cohort", "nominal", "borrowing limit", "lending limit", "used", "borrowed", "lent",
  "pending jobs", "running jobs", "weight", "share", "usage", "fair share", "reclaim"];

/** A queue's jobs by scheduler phase, as people count them: nominated jobs still wait
 * (for victims to checkpoint); a preemption victim checkpointing still holds its chips. */
function count(jobs: Record<string, number> | undefined, ...phases: string[]): number {
  return phases.reduce((n, p) => n + (jobs?.[p] ?? 0), 0);
}

function chips(v: number | null | undefined, none: string): string {
  return v === null || v === undefined ? none : `${fmt(v)} chips`;
}

function cell(field: string, text: string, title?: string): HTMLElement {
  return h("span", { "data-field": field, title }, text);
}

function row(q: Schemas["Queue"]): HTMLElement[] {
  return [
    h("span", { "data-queue": q.name, "data-field": "name", title: String(q.id ?? "") }, q.name, q.defined ? "" : " (implicit)"),
    cell("cohort", q.cohort ?? "—"),
    cell("nominal", chips(q.nominal, "unlimited")),
    cell("borrowing_limit", chips(q.borrowing_limit, "no limit")),
    cell("lending_limit", chips(q.lending_limit, "all idle")),
    cell("used", chips(q.used, "—")),
    cell("borrowed", chips(q.borrowed, "—")),
    cell("lent", chips(q.lent, "—")),
    cell("pending", String(count(q.jobs, "pending", "nominated"))),
    cell("running", String(count(q.jobs, "running", "checkpointing"))),
    cell("weight", fmt(q.weight)),
    cell("share", `${fmt(q.share * 100)} %`, "dominant share: chips held over the cohort's nominal chips, per normalized weight"),
    cell("usage", `${fmt(q.usage / 3600)} chip-h`, "decayed chip-hours (the fair-share history)"),
    cell("fair_share", fmt(q.fair_share), "Slurm's fair-share factor: 1 unused, towards 0 the more it used"),
    cell("reclaim", q.reclaim),
  ];
}

function queueTable(cluster: string, queues: Schemas["Queue"][]): HTMLTableElement {
  return h("table", { "data-testid": `queues-${cluster}` },
    h("caption", {}, `Queues of ${cluster}`),
    h("thead", {}, h("tr", {}, ...HEADS.map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, ...queues.map((q) => h("tr", { "data-queue": q.name }, ...row(q).map((c) => h("td", {}, c))))));
}

/** One cluster's usage chart: each queue's chip-hours per bucket (the axis starts at 0).
 * uPlot fixes its series when built, so a new queue rebuilds the chart. */
function usageChart(ctx: Ctx, cluster: Schemas["Cluster"]) {
  const box = h("div", { class: "charts" });
  let built: { key: string; el: HTMLElement } | null = null;
  const update = (u: Schemas["UsageReport"], per: string, queues: string[]) => {
    const s = u.series ?? { t: [], groups: [], bucket_s: 0 };
    // Every queue, those that never ran a job at 0 (the usage report names only queues with jobs).
    const of = new Map<string, (number | null)[]>(s.groups.map((g) => [g.name, g.chip_hours]));
    const names = [...new Set([...queues, ...of.keys()])].sort();
    // Each bucket's amount holds from its start to the next; the last one's end closes the line.
    const t: number[] = s.t.length ? [...s.t, s.t[s.t.length - 1] + s.bucket_s] : [];
    const series: Series[] = names.map((n) => {
      const v = of.get(n) ?? s.t.map(() => 0);
      return { label: n, values: v.length ? [...v, v[v.length - 1]] : [] };
    });
    const key = [per, ...series.map((x) => x.label)].join("\n");
    if (!built || built.key !== key) {
      (built?.el as any)?.plot?.destroy();
      const el = chart(ctx, `chip-hours per queue, ${cluster.name} (${per})`, t, series, "chip-hours", { zero: true, stepped: true });
      el.setAttribute("data-testid", `usage-${cluster.name}`);
      built = { key, el };
      clear(box, el);
    } else setData(built.el, t, series);
    const total = s.groups.reduce((a: number, g) => a + g.chip_hours.reduce((b: number, v: number) => b + v, 0), 0);
    built.el.setAttribute("data-buckets", String(s.t.length));
    built.el.setAttribute("data-chip-hours", String(Number(total.toFixed(4))));
  };
  return { box, update };
}

/** Queues per cluster (quota, borrowing, lending, jobs, fair share) and their usage over time. */
export async function queuesPage(root: HTMLElement, ctx: Ctx): Promise<void> {
  const { clusters } = await api<Reply<"ListClusters">>("GET", "/v1/clusters");
  const clusterSel = select("cluster", ["(all)", ...clusters.map((c) => c.name)], ctx.query.get("cluster") ?? "(all)");
  clusterSel.id = "queues-cluster";
  const bucket = ctx.query.get("bucket") ?? "1h";
  const bucketSel = h("select", { name: "bucket", id: "queues-bucket" },
    ...BUCKETS.map(([v, label]) => h("option", { value: v, selected: v === bucket }, label)));
  const body = h("div", { "aria-live": "polite" });
  root.append(h("h1", {}, "Queues"),
    h("p", { class: "sub" }, "Each queue's nominal quota, what it borrows from and lends to its cohort, its jobs and its fair share; usage is chip-hours held (busy, reserved and lost)."),
    h("div", { class: "toolbar" }, field("Cluster", clusterSel), field("Usage", bucketSel)), body);
  let views: { name: string; table: HTMLElement; update: (u: Schemas["UsageReport"], per: string, queues: string[]) => void }[] = [];
  const build = () => {
    const shown = clusters.filter((c) => clusterSel.value === "(all)" || c.name === clusterSel.value);
    views = shown.map((c) => {
      const table = h("div", {}, h("p", {}, "Loading…"));
      const u = usageChart(ctx, c);
      const title = link(ctx, `/clusters/${enc(c.name)}`, c.name);
      title.setAttribute("title", c.id);
      body.append(h("section", { class: "card", "data-cluster": c.name }, h("h2", {}, "Cluster ", title), table, u.box));
      return { name: c.name, table, update: u.update };
    });
    if (!shown.length) body.append(h("p", {}, "No clusters."));
  };
  const refresh = async () => {
    await Promise.all(views.map(async (v) => {
      const [{ queues }, usage] = await Promise.all([
        api<Reply<"ListQueues">>("GET", `/v1/clusters/${enc(v.name)}/queues`),
        api<Reply<"GetUsage">>("GET", `/v1/usage?by=queue&bucket=${enc(bucketSel.value)}&cluster=${enc(v.name)}`),
      ]);
      // Fifteen columns: on a narrow screen the table scrolls (by keyboard too), not the page.
      clear(v.table, queues.length ? h("div", { class: "wide", tabindex: 0, role: "region", "aria-label": `queues of ${v.name}` },
        queueTable(v.name, queues)) : h("p", {}, "No queues."));
      v.update(usage, bucketSel.selectedOptions[0]?.textContent ?? bucketSel.value, queues.map((q) => q.name));
    }));
  };
  const rebuild = () => { clear(body); build(); void refresh(); };
  clusterSel.addEventListener("change", rebuild);
  bucketSel.addEventListener("change", () => void refresh());
  build();
  await refresh();
  every(ctx, 5000, () => void refresh().catch(() => undefined));
}
