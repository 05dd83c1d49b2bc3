import { allows, api, enc, type Reply, type Alert, type Recovery, type Schemas } from "../api";
import { clear, h, table, time } from "../dom";
import { every, field, report, select, status, type Ctx } from "../app";
import type { Hardware } from "../metrics";

async function clusterPicker(root: HTMLElement, ctx: Ctx, title: string): Promise<HTMLSelectElement | null> {
  const { clusters } = await api<Reply<"ListClusters">>("GET", "/v1/clusters");
  root.append(h("h1", {}, title));
  if (!clusters.length) { root.append(h("p", {}, "No clusters yet.")); return null; }
  const names = clusters.map((c) => c.name);
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
    const { alerts } = await api<{ alerts: Alert[] }>("GET", `/v1/clusters/${enc(sel.value)}/alerts${q}`);
    clear(list, alerts.length ? table("Alerts", ["severity", "target", "rule", "state", "count", "last seen", "message", ""],
      alerts.map((a) => [a.severity, a.target, a.rule, a.state, String(a.count), time(a.last_seen), a.message,
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
    try { await api<Reply<"AcknowledgeAlert">>("POST", `/v1/alerts/${enc(id)}/acknowledge`); report(msg, `Acknowledged ${id}`); await refresh(); }
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
    const { recoveries } = await api<{ recoveries: Recovery[] }>("GET", `/v1/clusters/${enc(sel.value)}/recoveries`);
    clear(list, recoveries.length ? table("Recoveries", ["id", "kind", "target", "job", "state", "started", "steps"],
      recoveries.map((r) => [r.id, r.kind, r.target, r.job_id ?? "—", r.state, time(r.t_start),
        h("ol", {}, ...(r.steps ?? []).map((st) => h("li", {}, `${st.name}: ${st.reason}`)))]), { "data-testid": "recoveries" })
      : h("p", {}, "No recoveries."));
  };
  sel.addEventListener("change", () => void refresh());
  await refresh();
  every(ctx, 5000, () => void refresh().catch(() => undefined));
}

/** The firmware versions the server accepts (the API's own contract: the enum of
 * StartFirmwareUpdate's `version`); empty where the document is not served. */
async function knownVersions(): Promise<string[]> {
  try {
    // Only the part read here: the firmware versions the schema enumerates.
    type Doc = { components?: { schemas?: { FirmwareUpdateRequest?: { properties?: { version?: { enum?: unknown[] } } } } } };
    const doc = await api<Doc>("GET", "/openapi.json");
    const v = doc.components?.schemas?.FirmwareUpdateRequest?.properties?.version;
    return Array.isArray(v?.enum) ? v.enum.map(String) : [];
  } catch { return []; }
}

const FW_MARK: Record<string, string> = { updated: "✓", updating: "U", skipped: "S", failed: "✕", "not-updated": "·" };

/** A chip's place in a rollout: updated, updating (its turn now), skipped (out of service
 * at its turn), failed (rolled back the rollout), or not updated (yet, or not in it). */
// The chip lists of a rollout, which the document leaves open (extra fields of FirmwareRollout).
type Rollout = Schemas["FirmwareRollout"] & { done?: number[]; current?: number[]; skipped?: number[];
  failed_chip?: number | null; chips?: number; reason?: string; unit?: string };

function fwState(r: Rollout, chip: number): string {
  if (r.failed_chip === chip) return "failed";
  if ((r.current ?? []).includes(chip)) return "updating";
  if ((r.done ?? []).includes(chip)) return "updated";
  if ((r.skipped ?? []).includes(chip)) return "skipped";
  return "not-updated";
}

/** Rolling firmware updates: start one (operators), watch it chip by chip. */
export async function firmwarePage(root: HTMLElement, ctx: Ctx): Promise<void> {
  const sel = await clusterPicker(root, ctx, "Firmware");
  if (!sel) return;
  const list = h("div", { "aria-live": "polite" }), msg = status();
  const unavailable = h("p", { class: "hint", "data-testid": "firmware-unavailable", hidden: true });
  const chipsBox = h("section", { "aria-labelledby": "fw-chips-h" });
  let card: HTMLElement | null = null;
  if (allows(ctx.me, "operator")) {
    const versions = await knownVersions();
    const version = versions.length ? select("version", versions, versions[versions.length - 1])
      : h("input", { name: "version", required: true, pattern: "[0-9A-Za-z.\\-]+", placeholder: "e.g. 2.22.0" });
    const unit = select("unit", ["chip", "node"]);
    const only = h("input", { name: "chips", placeholder: "e.g. 62,63 (default: every chip)", "aria-describedby": "fw-chips-help" });
    const form = h("form", { class: "grid-form" }, field("Version", version), field("Unit", unit),
      h("div", { class: "field" }, h("label", { for: "fw-chips" }, "Chips"), Object.assign(only, { id: "fw-chips" }),
        h("small", { id: "fw-chips-help" }, "optional: only these chips, one at a time")),
      h("button", { type: "submit" }, "Start rolling update"));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const body: Record<string, unknown> = { version: version.value, unit: unit.value };
      const chips = only.value.split(",").map((x) => x.trim()).filter(Boolean).map(Number);
      if (chips.length) body.chips = chips;
      try {
        const r = await api<Reply<"StartFirmwareUpdate">>("POST", `/v1/clusters/${enc(sel.value)}/firmware`, body);
        report(msg, `Rollout ${r.id} to ${r.version}: ${r.state}`); await refresh();
      } catch (err) { report(msg, `Update refused: ${(err as Error).message}`, true); }
    });
    card = h("section", { class: "card", "aria-labelledby": "fw-start-h" }, h("h2", { id: "fw-start-h" }, "Start a rolling update"), form, msg);
    root.append(card);
  }
  root.append(unavailable, list, chipsBox);
  const refresh = async () => {
    const cluster = sel.value;
    const [fw, hw] = await Promise.all([api<Reply<"ListFirmwareUpdates">>("GET", `/v1/clusters/${enc(cluster)}/firmware`),
      api<Hardware>("GET", `/v1/clusters/${enc(cluster)}/hardware`)]);
    if (cluster !== sel.value) return; // another cluster was picked meanwhile
    unavailable.hidden = !fw.unavailable;
    unavailable.textContent = fw.unavailable ?? "";
    if (card) card.hidden = Boolean(fw.unavailable);
    const rollouts = fw.rollouts as Rollout[];
    clear(list, rollouts.length ? table("Rollouts", ["id", "version", "unit", "state", "progress", "chips updated", "updating now", "skipped", "reason"],
      rollouts.map((r) => [r.id, r.version, r.unit, h("span", { "data-testid": "rollout-state" }, r.state),
        h("progress", { max: 1, value: r.progress, "aria-label": `rollout ${r.id} progress` }),
        h("span", { "data-testid": "rollout-done" }, `${(r.done ?? []).length} / ${r.chips ?? "?"}`),
        (r.current ?? []).join(", ") || "—", (r.skipped ?? []).join(", ") || "—", r.reason || "—"]), { "data-testid": "rollouts" })
      : fw.unavailable ? "" : h("p", {}, "No rollouts yet."));
    const last = rollouts[rollouts.length - 1];
    chipsBox.hidden = Boolean(fw.unavailable); // no versions to show where none can change
    clear(chipsBox, h("h2", { id: "fw-chips-h" }, last ? `Chip by chip: rollout ${last.id} to ${last.version}` : "Firmware by chip"),
      h("ul", { class: "fw-chips", "data-testid": "firmware-chips" }, ...hw.chips.map((c) => {
        const st = last ? fwState(last, c.index) : "not-updated";
        const ver = String(c.metrics.firmware_version ?? "?");
        return h("li", { "data-fw-chip": c.index, "data-fw-state": st, "data-version": ver },
          h("span", { class: "fw-mark", "aria-hidden": "true" }, FW_MARK[st]), h("b", {}, String(c.index)), " ", ver,
          h("span", { class: "visually-hidden" }, `: ${st.replace("-", " ")}`));
      })),
      h("ul", { class: "state-legend", "aria-label": "rollout states" }, ...Object.entries(FW_MARK).map(([st, m]) =>
        h("li", {}, h("span", { class: "swatch", "data-fw-swatch": st }, m), st.replace("-", " ")))));
  };
  sel.addEventListener("change", () => void refresh());
  await refresh();
  every(ctx, 2000, () => void refresh().catch(() => undefined));
}
