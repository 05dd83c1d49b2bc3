import { allows, api, enc, type Reply, type Alert, type Schemas } from "../api";
import { clear, h, table } from "../dom";
import type { Hardware } from "../metrics";
import { every, field, link, report, select, sse, status, type Ctx } from "../app";

type Cluster = Schemas["Cluster"];
// The figures of DescribeCluster's scheduler object read here (an open object in the document).
interface SchedulerFigures { running_jobs?: number; pending_jobs?: number; utilization?: number }

/** One tile of a cluster's state at a glance: chips healthy, failed, spare and busy, jobs
 * running and queued, firing alerts; its border says whether anything needs a look. */
function tile(ctx: Ctx, c: Cluster, n: Record<string, number | null>): HTMLElement {
  const bad = (n.failed ?? 0) > 0 || (n.alerts ?? 0) > 0;
  const figure = (key: string, label: string) =>
    [h("dt", {}, label), h("dd", { "data-count": key }, n[key] === null ? "—" : String(n[key]))];
  return h("li", { class: "tile", "data-tile": c.name, "data-health": c.state !== "active" ? "other" : bad ? "attention" : "ok" },
    h("h2", {}, link(ctx, `/clusters/${enc(c.name)}`, c.name)),
    h("p", { class: "sub" }, `${c.state} · ${c.fabric ?? ""} · ${c.chips ?? "?"} chips`),
    h("dl", { class: "facts" }, ...figure("healthy", "healthy"), ...figure("failed", "failed"), ...figure("spare", "spare"),
      ...figure("busy", "busy"), ...figure("running", "running jobs"), ...figure("queued", "queued jobs"),
      ...figure("alerts", "firing alerts")));
}

/** Every cluster's state at a glance (a tile each), then the table with load and views;
 * creating and deleting a cluster sit behind their buttons. */
export async function overviewPage(root: HTMLElement, ctx: Ctx): Promise<void> {
  const list = h("div", { class: "cluster-list", "aria-busy": "true" });
  const tiles = h("ul", { class: "tiles", "data-testid": "tiles", "aria-label": "clusters at a glance" });
  root.append(h("h1", {}, "Clusters"), tiles, list);
  const refresh = async () => {
    const { clusters } = await api<Reply<"ListClusters">>("GET", "/v1/clusters");
    const glance: HTMLElement[] = [];
    const rows = await Promise.all(clusters.map(async (c) => {
      let healthy = 0, failed = 0, spare = 0, busy = 0;
      // Each figure on its own: one the server cannot give (a cluster going away meanwhile)
      // leaves its cell "—" and never hides the others.
      const [hw, al] = await Promise.allSettled([api<Hardware>("GET", `/v1/clusters/${enc(c.id)}/hardware`),
        api<{ alerts: Alert[] }>("GET", `/v1/clusters/${enc(c.id)}/alerts?state=firing`)]);
      if (hw.status === "fulfilled") {
        for (const chip of hw.value.chips) {
          if (chip.spare) spare++;
          if (chip.job) busy++;
          if (chip.state === "healthy") healthy++;
          else if (chip.state === "failed" || chip.state === "isolated") failed++;
        }
      }
      const alerts = al.status === "fulfilled" ? String(al.value.alerts.length) : "—";
      const sch: SchedulerFigures = c.scheduler ?? {};
      const hwn = (v: number) => (hw.status === "fulfilled" ? v : null);
      glance.push(tile(ctx, c, { healthy: hwn(healthy), failed: hwn(failed), spare: hwn(spare), busy: hwn(busy),
        running: sch.running_jobs ?? 0, queued: sch.pending_jobs ?? 0,
        alerts: al.status === "fulfilled" ? al.value.alerts.length : null }));
      return [link(ctx, `/clusters/${enc(c.name)}`, c.name), c.state, c.type ?? "", c.fabric ?? "", String(c.chips ?? ""),
        hw.status === "fulfilled" ? `${healthy} / ${failed} / ${spare}` : "—", `${Math.round((sch.utilization ?? 0) * 100)}%`,
        `${sch.running_jobs ?? 0} / ${sch.pending_jobs ?? 0}`, alerts,
        link(ctx, `/clusters/${enc(c.name)}/dashboard`, "dashboard", { "aria-label": `dashboard of ${c.name}` })];
    }));
    clear(list, clusters.length ? table("Clusters", ["name", "state", "type", "fabric", "chips",
      "healthy / failed / spare", "utilization", "running / pending jobs", "firing alerts", "views"], rows, { "data-testid": "clusters" })
      : h("p", {}, "No clusters yet."));
    const order = new Map(clusters.map((c, i) => [c.name, i]));
    glance.sort((a, b) => (order.get(a.dataset.tile ?? "") ?? 0) - (order.get(b.dataset.tile ?? "") ?? 0));
    clear(tiles, ...glance);
    list.setAttribute("aria-busy", "false");
  };
  await refresh();
  every(ctx, 5000, () => void refresh().catch(() => undefined));
  if (allows(ctx.me, "operator")) root.append(createForm(ctx, refresh), deleteForm(refresh));
}

/** Delete a cluster (its jobs are stopped): the name typed again confirms it. */
function deleteForm(refresh: () => Promise<void>): HTMLElement {
  const name = h("input", { name: "delete-name", required: true, autocomplete: "off", pattern: "[a-z][a-z0-9\\-]*" });
  const again = h("input", { name: "delete-confirm", required: true, autocomplete: "off" });
  const msg = status();
  const form = h("form", { class: "grid-form", "aria-labelledby": "delete-h" },
    field("Cluster", name), field("Type its name again", again),
    h("button", { type: "submit", class: "danger" }, "Delete cluster"));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (again.value !== name.value) { report(msg, "The names differ: nothing deleted.", true); return; }
    try {
      const c = await api<Reply<"DeleteCluster">>("DELETE", `/v1/clusters/${enc(name.value)}`);
      report(msg, `Cluster ${c.name} is ${c.state}; its jobs were stopped.`);
      name.value = again.value = "";
      await refresh();
    } catch (err) { report(msg, `Delete failed: ${(err as Error).message}`, true); }
  });
  return h("details", { class: "card", "data-testid": "delete-cluster" }, h("summary", {}, "Delete a cluster…"),
    h("section", { "aria-labelledby": "delete-h" }, h("h2", { id: "delete-h" }, "Delete a cluster"), form, msg));
}

function createForm(ctx: Ctx, refresh: () => Promise<void>): HTMLElement {
  const name = h("input", { name: "name", required: true, pattern: "[a-z][a-z0-9\\-]*", maxlength: 63 });
  const type = select("type", ["trn2-ultraserver", "trn2-node", "trn1-node", "custom"]);
  const fabric = select("fabric", ["(server default)", "sim", "local", "ray", "neuron"]);
  const dims = h("input", { name: "dims", placeholder: "custom only, e.g. 2,2" });
  const chipType = select("chip_type", ["(default)", "trn2", "trn1"]);
  const chips = h("input", { name: "chips", type: "number", min: 1, max: 256 });
  const hbm = h("input", { name: "hbm_gib", type: "number", min: 1, max: 1024, step: "any" });
  const bw = h("input", { name: "link_bw_gbps", type: "number", min: 1, max: 10000, step: "any" });
  const storage = h("input", { name: "storage_nodes", type: "number", min: 0, max: 16, value: 1 });
  const spares = h("input", { name: "spares", type: "number", min: 0, max: 4, value: 0 });
  const spareChips = h("input", { name: "spare_chips", placeholder: "e.g. 0,63 (optional)" });
  const restore = h("input", { name: "restore_spares", type: "checkbox", checked: true });
  const ray = h("input", { name: "ray_address", maxlength: 512, placeholder: "HOST:6379, ray://HOST:10001 or auto" });
  // Commands the server runs on its own host: admins only (the API refuses others anyway).
  const admin = allows(ctx.me, "admin");
  const neuronLs = h("input", { name: "neuron_ls", maxlength: 1024, placeholder: "neuron-ls --json-output" });
  const neuronMon = h("input", { name: "neuron_monitor", maxlength: 1024, placeholder: "neuron-monitor" });
  const quotas = h("input", { name: "quotas", placeholder: "team=chips, e.g. research=32,prod=32" });
  const encryption = h("input", { name: "encryption", type: "checkbox", checked: true });
  const isolation = h("input", { name: "network_isolation", type: "checkbox", checked: true });
  const msg = status();
  const log = h("pre", { class: "log", "data-testid": "deploy-log", role: "log", "aria-label": "deployment log", tabindex: 0, hidden: true });
  const steps = h("ol", { class: "steps", "aria-label": "deployment steps" });
  const ints = (v: string) => v.split(",").map((x) => x.trim()).filter(Boolean).map(Number);
  const form = h("form", { class: "grid-form", "aria-labelledby": "create-h" },
    field("Name", name), field("Type", type), field("Fabric", fabric), field("Dims", dims),
    field("Chip type", chipType, "custom only"), field("Chips", chips, "custom only"),
    field("Per-chip memory (GiB)", hbm), field("Link bandwidth (GB/s)", bw),
    field("Storage nodes", storage), field("Spares (0-4)", spares), field("Spare chips", spareChips),
    field("Restore spares", restore), field("Quotas", quotas), field("Encryption", encryption),
    field("Network isolation", isolation), field("Ray address", ray, "fabric ray only"),
    admin ? field("neuron-ls command", neuronLs, "fabric neuron only") : null,
    admin ? field("neuron-monitor command", neuronMon, "fabric neuron only") : null,
    h("button", { type: "submit" }, "Create cluster"));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const body: Record<string, unknown> = { name: name.value, type: type.value, storage_nodes: Number(storage.value),
      spares: Number(spares.value), restore_spares: restore.checked, encryption: encryption.checked,
      network_isolation: isolation.checked };
    if (fabric.value !== "(server default)") body.fabric = fabric.value;
    if (dims.value) body.dims = ints(dims.value);
    if (chipType.value !== "(default)") body.chip_type = chipType.value;
    if (chips.value) body.chips = Number(chips.value);
    if (ray.value) body.ray_address = ray.value;
    if (admin && neuronLs.value) body.neuron_ls = neuronLs.value;
    if (admin && neuronMon.value) body.neuron_monitor = neuronMon.value;
    if (hbm.value) body.hbm_gib = Number(hbm.value);
    if (bw.value) body.link_bw_gbps = Number(bw.value);
    if (spareChips.value) body.spare_chips = ints(spareChips.value);
    if (quotas.value) body.quotas = Object.fromEntries(quotas.value.split(",").map((kv) => kv.split("=").map((x) => x.trim()))
      .map(([k, v]) => [k, Number(v)]));
    try {
      const c = await api<Reply<"CreateTrainiumCluster">>("POST", "/v1/clusters", body);
      report(msg, `Cluster ${c.name} (${c.id}) is ${c.state}: following its deployment.`);
      log.textContent = "";
      log.hidden = false;
      sse(ctx, `/v1/clusters/${enc(c.id)}/logs?follow=true`, {
        log: (ln) => { log.textContent += `${ln.time}  ${ln.message}\n`; },
        progress: (d: Schemas["Deployment"] | null) => {
          if (!d) return;
          clear(steps, ...d.steps.map((st) => h("li", { "data-step": st.name, "data-state": st.state }, `${st.name}: ${st.state}`)));
          if (d.state !== "running") void refresh();
        },
      });
    } catch (err) {
      report(msg, `Create failed: ${(err as Error).message}`, true);
    }
  });
  return h("details", { class: "card", "data-testid": "create-cluster" }, h("summary", {}, "Create a cluster…"),
    h("section", { "aria-labelledby": "create-h" }, h("h2", { id: "create-h" }, "Create a cluster"), form, msg, steps, log));
}
