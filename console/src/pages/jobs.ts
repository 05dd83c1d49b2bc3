import { allows, api, enc, presets, type Reply, type Recovery, type Schemas } from "../api";
import { clear, duration, fmt, h, table, time } from "../dom";
import { every, field, link, report, select, sse, status, type Ctx } from "../app";
import { chart, setData } from "../chart";
import { COLOR_METRICS, type Hardware } from "../metrics";
import { torus } from "../torus";

// PlanParallelism's figures read here (its reply is an open object in the document).
interface Plan { tp: number; pp: number; dp: number; step_time_s: number; mfu: number; memory_per_chip_bytes: number;
  hbm_bytes: number; tokens_per_s: number }

/** Jobs with filters, and (operators) the submit form with a plan preview. */
export async function jobsPage(root: HTMLElement, ctx: Ctx): Promise<void> {
  // The model presets and job states are the server's (GetPresets), never a copy here.
  const [{ clusters }, known] = await Promise.all([api<Reply<"ListClusters">>("GET", "/v1/clusters"), presets()]);
  const names = clusters.map((c) => c.name);
  // Names beside ids: a job names its cluster by id; people read the cluster's name.
  const nameOf = new Map<string, string>(clusters.map((c) => [c.id, c.name]));
  const clusterSel = select("cluster", ["(any)", ...names], ctx.query.get("cluster") ?? "(any)");
  clusterSel.id = "jobs-cluster";
  const stateSel = select("state", ["(any)", ...known.job_states], ctx.query.get("state") ?? "(any)");
  stateSel.id = "jobs-state";
  const list = h("div", { "aria-live": "polite" });
  const refresh = async () => {
    const q = new URLSearchParams();
    if (clusterSel.value !== "(any)") q.set("cluster", clusterSel.value);
    if (stateSel.value !== "(any)") q.set("state", stateSel.value);
    const { jobs } = await api<Reply<"ListTrainingJobs">>("GET", `/v1/jobs?${q}`);
    clear(list, jobs.length ? table("Jobs", ["id", "name", "cluster", "queue", "state", "reason", "model", "chips", "progress", "tokens/s"],
      jobs.map((j) => [link(ctx, `/jobs/${enc(j.id)}`, j.id), j.name ?? "",
        h("span", { title: j.cluster_id, "data-cluster": j.cluster_id }, nameOf.get(j.cluster_id) ?? j.cluster_id),
        h("span", { "data-field": "queue" }, j.queue ?? "default"), j.state,
        // Why it waits (quota, cohort, dependency, capacity) or what it last did: the admission reason.
        h("span", { class: "reason", "data-field": "reason", "data-job": j.id }, j.reason || "—"), j.model,
        String(j.chips), `${j.progress.step} / ${j.progress.steps}`, fmt(j.progress.tokens_per_s, "tokens_per_s")]), { "data-testid": "jobs" })
      : h("p", {}, "No jobs match."));
  };
  clusterSel.addEventListener("change", () => void refresh());
  stateSel.addEventListener("change", () => void refresh());
  root.append(h("h1", {}, "Jobs"),
    h("div", { class: "toolbar" }, field("Cluster", clusterSel), field("State", stateSel)), list);
  await refresh();
  every(ctx, 3000, () => void refresh().catch(() => undefined));
  if (allows(ctx.me, "operator") && names.length) root.append(submitForm(ctx, names, clusterSel.value, known.models.map((m) => m.name)));
}

function submitForm(ctx: Ctx, clusters: string[], current: string, models: string[]): HTMLElement {
  const cluster = select("cluster", clusters, clusters.includes(current) ? current : clusters[0]);
  const model = select("model", ["(custom shape)", ...models], "llama3-8b");
  const dims = ["layers", "hidden", "heads", "vocab", "seq_len"].map((k) => h("input", { name: k, type: "number", min: 1 }));
  const chips = h("input", { name: "chips", type: "number", min: 1, max: 65536, value: 16, required: true });
  const steps = h("input", { name: "steps", type: "number", min: 1, value: 1000 });
  const ckpt = h("input", { name: "checkpoint_interval", type: "number", min: 0, value: 100 });
  const priority = h("input", { name: "priority", type: "number", min: 0, max: 100, value: 50 });
  const team = h("input", { name: "team", pattern: "[a-z0-9][a-z0-9_\\-]*", placeholder: "default" });
  const name = h("input", { name: "job-name", maxlength: 63 });
  const par = h("input", { name: "parallelism", value: "auto", "aria-describedby": "par-help" });
  const preview = h("div", { class: "plan", "data-testid": "plan-preview", "aria-live": "polite" });
  const msg = status();
  const body = (): Record<string, unknown> => {
    const b: Record<string, unknown> = { chips: Number(chips.value), steps: Number(steps.value),
      checkpoint_interval: Number(ckpt.value), priority: Number(priority.value) };
    if (model.value === "(custom shape)") b.model_dims = Object.fromEntries(dims.filter((d) => d.value).map((d) => [d.name, Number(d.value)]));
    else b.model = model.value;
    if (team.value) b.team = team.value;
    if (name.value) b.name = name.value;
    if (par.value && par.value !== "auto") {
      const [tp, pp, dp] = par.value.split(/[x,*\s]+/).map(Number);
      b.parallelism = { tp, pp, dp };
    }
    return b;
  };
  const previewBtn = h("button", { type: "button" }, "Preview plan");
  previewBtn.addEventListener("click", async () => {
    if (model.value === "(custom shape)") { clear(preview, "The planner previews presets; a custom shape is planned at submit."); return; }
    try {
      const p = await api<Plan>("POST", "/v1/plan", { model: model.value, chips: Number(chips.value) });
      clear(preview, h("dl", {},
        h("dt", {}, "tp / pp / dp"), h("dd", { "data-field": "layout" }, `${p.tp} / ${p.pp} / ${p.dp}`),
        h("dt", {}, "step time"), h("dd", {}, `${p.step_time_s.toFixed(2)} s`),
        h("dt", {}, "MFU"), h("dd", {}, `${(p.mfu * 100).toFixed(1)} %`),
        h("dt", {}, "memory per chip"), h("dd", {}, `${(p.memory_per_chip_bytes / 2 ** 30).toFixed(1)} GiB of ${(p.hbm_bytes / 2 ** 30).toFixed(0)} GiB`),
        h("dt", {}, "tokens/s"), h("dd", {}, fmt(p.tokens_per_s, "tokens_per_s"))));
    } catch (e) { clear(preview, h("p", { class: "error" }, `No plan: ${(e as Error).message}`)); }
  });
  const form = h("form", { class: "grid-form" }, field("Cluster", cluster), field("Model", model),
    ...dims.map((d) => field(`Custom ${d.name}`, d)), field("Chips", chips), field("Steps", steps),
    field("Checkpoint interval (steps)", ckpt), field("Priority (0-100)", priority), field("Team", team), field("Name", name),
    field("Parallelism", par, "auto, or tp x pp x dp such as 4x2x2"), previewBtn, h("button", { type: "submit" }, "Submit job"));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const j = await api<Reply<"SubmitTrainingJob">>("POST", `/v1/clusters/${enc(cluster.value)}/jobs`, body());
      report(msg, `Submitted ${j.id} (${j.state}).`);
      ctx.nav(`/jobs/${enc(j.id)}`);
    } catch (err) { report(msg, `Submit failed: ${(err as Error).message}`, true); }
  });
  return h("section", { class: "card", "aria-labelledby": "submit-h" }, h("h2", { id: "submit-h" }, "Submit a training job"), form, preview, msg);
}

/** One job: progress and ETA, loss and tokens/s curves, its chips on the torus, live logs, recoveries, stop. */
export async function jobPage(root: HTMLElement, ctx: Ctx): Promise<void> {
  const id = ctx.params.job;
  let job = await api<Reply<"DescribeTrainingJob">>("GET", `/v1/jobs/${enc(id)}`);
  const TERMINAL = new Set<string>((await presets()).terminal_job_states);
  const stateEl = h("span", { "data-testid": "job-state" }, job.state);
  // The admission reason (queue quota, cohort borrowing, a dependency, capacity) while it
  // waits, its last transition's once it runs; and where its block was found.
  const reasonEl = h("span", { "data-testid": "job-reason" }, job.reason || "—");
  // (A waiting job's allocation repeats its reason: placement shows only once it has chips.)
  const placement = (j: Schemas["Job"]): string => (j.allocation?.chips?.length ? j.allocation.reason : "") || "—";
  const placedEl = h("span", { "data-testid": "job-placement" }, placement(job));
  const bar = h("progress", { max: job.progress.steps, value: job.progress.step, "aria-label": "job progress", "data-testid": "job-progress" });
  const stepEl = h("span", { "data-testid": "job-step" }, String(job.progress.step));
  const eta = h("span", {}, "—");
  const t: number[] = [], loss: (number | null)[] = [], tps: (number | null)[] = [];
  const lossChart = chart(ctx, "loss", t, [{ label: "loss", values: loss }]);
  const tpsChart = chart(ctx, "tokens/s", t, [{ label: "tokens/s", values: tps }], "tokens/s");
  const logs = h("pre", { class: "log", "data-testid": "job-logs", role: "log", tabindex: 0, "aria-label": "job log" });
  const alloc = h("div", { class: "torus small" });
  const timeline = h("div", {});
  const msg = status();
  let first: { t: number; step: number } | null = null;
  const onProgress = (p: Schemas["Progress"] | null) => {
    if (!p) return;
    const wall = Date.now() / 1000;
    const now = Math.max(wall, (t[t.length - 1] ?? 0) + 0.001); // x must rise (history is on the plane's clock)
    first ??= { t: wall, step: p.step };
    bar.value = p.step; bar.max = p.steps; stepEl.textContent = String(p.step);
    const rate = (p.step - first.step) / Math.max(1e-3, wall - first.t);
    eta.textContent = rate > 0 ? duration((p.steps - p.step) / rate) : "—";
    t.push(now); loss.push(p.loss ?? null); tps.push(p.tokens_per_s ?? null);
    setData(lossChart, t, [{ label: "loss", values: loss }]);
    setData(tpsChart, t, [{ label: "tokens/s", values: tps }]);
  };
  const stop = allows(ctx.me, "operator") && !TERMINAL.has(job.state) ? h("button", { type: "button", "data-testid": "stop-job" }, "Stop job") : null;
  stop?.addEventListener("click", async () => {
    try { job = await api<Reply<"StopTrainingJob">>("POST", `/v1/jobs/${enc(id)}/stop`); stateEl.textContent = job.state; report(msg, `Stopped: ${job.state}`); stop.remove(); }
    catch (e) { report(msg, `Stop failed: ${(e as Error).message}`, true); }
  });
  // The cluster by name (its id in the tooltip): the job record holds the id only.
  const clusterName = await api<Reply<"DescribeCluster">>("GET", `/v1/clusters/${enc(job.cluster_id)}`).then((c) => String(c.name)).catch(() => job.cluster_id);
  const clusterLink = link(ctx, `/clusters/${enc(clusterName)}`, clusterName);
  clusterLink.setAttribute("title", job.cluster_id);
  clusterLink.setAttribute("data-testid", "job-cluster");
  const queueLink = link(ctx, `/queues?cluster=${enc(clusterName)}`, job.queue ?? "default", { "data-testid": "job-queue" });
  root.append(h("h1", {}, `Job ${job.name ?? job.id}`),
    h("p", { class: "sub" }, `${job.id} · ${job.model} on ${job.chips} chips · cluster `, clusterLink),
    h("dl", { class: "facts" }, h("dt", {}, "state"), h("dd", {}, stateEl), h("dt", {}, "step"), h("dd", {}, stepEl, ` / ${job.progress.steps}`),
      h("dt", {}, "ETA"), h("dd", {}, eta),
      h("dt", {}, "queue"), h("dd", {}, queueLink),
      h("dt", {}, "reason"), h("dd", {}, reasonEl), h("dt", {}, "placement"), h("dd", {}, placedEl)),
    bar, stop ?? "", msg,
    h("div", { class: "charts" }, lossChart, tpsChart),
    h("h2", {}, "Allocation"), alloc, h("h2", {}, "Recovery timeline"), timeline, h("h2", {}, "Logs"), logs);
  try { // the run so far (GetJobMetrics rollups), then live progress events
    const m = await api<Reply<"GetJobMetrics">>("GET", `/v1/jobs/${enc(id)}/metrics`);
    for (const pt of m.points) { t.push(pt.t_start); loss.push(pt.loss ?? null); tps.push(pt.tokens_per_s ?? null); }
  } catch { /* a server without job metrics: live points only */ }
  onProgress(job.progress);
  sse(ctx, `/v1/jobs/${enc(id)}/logs?follow=true`, {
    log: (ln) => { logs.textContent += `${ln.time}  ${ln.message}\n`; logs.scrollTop = logs.scrollHeight; },
    progress: onProgress,
  });
  const refresh = async () => {
    job = await api<Reply<"DescribeTrainingJob">>("GET", `/v1/jobs/${enc(id)}`);
    stateEl.textContent = job.state;
    reasonEl.textContent = job.reason || "—";
    placedEl.textContent = placement(job);
    if (TERMINAL.has(job.state)) stop?.remove();
    const chips: number[] = job.allocation?.chips ?? [];
    const hw: Hardware = await api("GET", `/v1/clusters/${enc(job.cluster_id)}/hardware`);
    const v = torus(hw, COLOR_METRICS[0], { onChip: () => ctx.nav(`/clusters/${enc(job.cluster_id)}`), onLink: () => undefined });
    for (const i of chips) v.svg.querySelector(`[data-chip="${i}"]`)?.classList.add("in-job");
    clear(alloc, chips.length ? v.svg : h("p", {}, "Not placed."));
    const { recoveries } = await api<{ recoveries: Recovery[] }>("GET", `/v1/clusters/${enc(job.cluster_id)}/recoveries`);
    const mine = recoveries.filter((r) => r.job_id === id);
    clear(timeline, mine.length ? h("ol", {}, ...mine.map((r) => h("li", {}, `${time(r.t_start)} ${r.kind} ${r.target}: ${r.state} — `,
      (r.steps ?? []).map((st) => `${st.name} (${st.reason})`).join(" → ")))) : h("p", {}, "No recoveries."));
  };
  await refresh();
  every(ctx, 5000, () => void refresh().catch(() => undefined));
}
