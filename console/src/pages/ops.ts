import { allows, api, enc } from "../api";
import { clear, h, table, time } from "../dom";
import { every, field, report, select, status, type Ctx } from "../app";

async function clusterPicker(root: HTMLElement, ctx: Ctx, title: string): Promise<HTMLSelectElement | null> {
  const { clusters } = await api("GET", "/v1/clusters");
  root.append(h("h1", {}, title));
  if (!clusters.length) { root.append(h("p", {}, "No clusters yet.")); return null; }
  const names = clusters.map((c: any) => c.name);
  const sel = select("cluster", names, ctx.query.get("cluster") ?? names[0]);
  sel.id = "ops-cluster";
  root.append(h("div", { class: "toolbar" }, field("Cluster", sel)));
  return sel;
}

/** Alerts of a cluster; operators acknowledge them. */
export async function alertsPage(root: HTMLElement, ctx: Ctx): Promise<void> {
  const sel = await clusterPicker(root, ctx, "Alerts");
  if (!sel) return;
  const state = select("state", ["firing", "acknowledged", "resolved", "(any)"], "firing");
  state.id = "alert-state";
  const list = h("div", { "aria-live": "polite" }), msg = status();
  root.append(field("State", state), list, msg);
  const refresh = async () => {
    const q = state.value === "(any)" ? "" : `?state=${enc(state.value)}`;
    const { alerts } = await api("GET", `/v1/clusters/${enc(sel.value)}/alerts${q}`);
    clear(list, alerts.length ? table("Alerts", ["severity", "target", "rule", "state", "count", "last seen", "message", ""],
      alerts.map((a: any) => [a.severity, a.target, a.rule, a.state, String(a.count), time(a.last_seen), a.message,
        allows(ctx.me, "operator") && a.state === "firing" ? ackButton(a.id, msg, refresh) : ""]), { "data-testid": "alerts" })
      : h("p", {}, "No alerts."));
  };
  sel.addEventListener("change", () => void refresh());
  state.addEventListener("change", () => void refresh());
  await refresh();
  every(ctx, 5000, () => void refresh().catch(() => undefined));
}

function ackButton(id: string, msg: HTMLElement, refresh: () => Promise<void>): HTMLElement {
  const b = h("button", { type: "button", "aria-label": `acknowledge alert ${id}` }, "Acknowledge");
  b.addEventListener("click", async () => {
    try { await api("POST", `/v1/alerts/${enc(id)}/acknowledge`); report(msg, `Acknowledged ${id}`); await refresh(); }
    catch (e) { report(msg, `Acknowledge failed: ${(e as Error).message}`, true); }
  });
  return b;
}

/** Recovery flows with their steps. */
export async function recoveriesPage(root: HTMLElement, ctx: Ctx): Promise<void> {
  const sel = await clusterPicker(root, ctx, "Recoveries");
  if (!sel) return;
  const list = h("div", { "aria-live": "polite" });
  root.append(list);
  const refresh = async () => {
    const { recoveries } = await api("GET", `/v1/clusters/${enc(sel.value)}/recoveries`);
    clear(list, recoveries.length ? table("Recoveries", ["id", "kind", "target", "job", "state", "started", "steps"],
      recoveries.map((r: any) => [r.id, r.kind, r.target, r.job_id ?? "—", r.state, time(r.t_start),
        h("ol", {}, ...(r.steps ?? []).map((st: any) => h("li", {}, `${st.name}: ${st.reason}`)))]), { "data-testid": "recoveries" })
      : h("p", {}, "No recoveries."));
  };
  sel.addEventListener("change", () => void refresh());
  await refresh();
  every(ctx, 5000, () => void refresh().catch(() => undefined));
}

/** Rolling firmware updates: start one (operators), watch it chip by chip. */
export async function firmwarePage(root: HTMLElement, ctx: Ctx): Promise<void> {
  const sel = await clusterPicker(root, ctx, "Firmware");
  if (!sel) return;
  const list = h("div", { "aria-live": "polite" }), msg = status();
  if (allows(ctx.me, "operator")) {
    const version = h("input", { name: "version", required: true, pattern: "[0-9A-Za-z.\\-]+", placeholder: "e.g. 2.22.0" });
    const unit = select("unit", ["chip", "node"]);
    const form = h("form", { class: "grid-form" }, field("Version", version), field("Unit", unit), h("button", { type: "submit" }, "Start rolling update"));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      try { const r = await api("POST", `/v1/clusters/${enc(sel.value)}/firmware`, { version: version.value, unit: unit.value });
        report(msg, `Rollout ${r.id} ${r.state}`); await refresh(); }
      catch (err) { report(msg, `Update refused: ${(err as Error).message}`, true); }
    });
    root.append(h("section", { class: "card" }, h("h2", {}, "Start a rolling update"), form, msg));
  }
  root.append(list);
  const refresh = async () => {
    const { rollouts } = await api("GET", `/v1/clusters/${enc(sel.value)}/firmware`);
    clear(list, rollouts.length ? table("Rollouts", ["id", "version", "state", "progress", "chips done"],
      rollouts.map((r: any) => [r.id, r.version, r.state,
        h("progress", { max: 1, value: r.progress, "aria-label": `rollout ${r.id} progress` }),
        `${(r.done ?? []).length} / ${r.chips ?? "?"}${(r.done ?? []).length ? ` (last: ${r.done[r.done.length - 1]})` : ""}`]), { "data-testid": "rollouts" })
      : h("p", {}, "No rollouts yet."));
  };
  sel.addEventListener("change", () => void refresh());
  await refresh();
  every(ctx, 2000, () => void refresh().catch(() => undefined));
}
