// The torus view: one 4x4 plane per node (z), side by side, z links routed in the gaps
// between rows; one plane for a node; a grid for other shapes. SVG: every chip and
// link is an element with data attributes, focusable and labelled.
import { s } from "./dom";
import { ink, jobColor, LINK_STATE, STATE_MARK, viridis } from "./colors";
import type { Chip, ColorMetric, Hardware, Link } from "./metrics";
import { shownState } from "./metrics";

const C = 44, G = 26, P = C + G, PLANE_GAP = 70, PAD = 24;

interface Pos { x: number; y: number }

export interface TorusHandlers {
  onChip: (index: number) => void;
  onLink: (key: string) => void;
}

export function linkKey(l: Link): string { return `${l.src}-${l.dst}`; }

interface Layout { pos: Pos[]; w: number; h: number; cols: number; rows: number; planes: number; hubs: number[]; hubY: number }

// A cluster of worker slots (local, Ray) is a star: its links join each chip to a host
// switch, a vertex past the chips. The switch is drawn as a bar under the chips, each
// link a drop from its chip to the bar.
const HUB_H = 18, HUB_GAP = 28;

function layout(hw: Hardware): Layout {
  const d = hw.dims;
  let cols: number, rows: number, planes: number;
  if (d.length >= 2) { cols = d[0]; rows = d[1]; planes = d.slice(2).reduce((a, b) => a * b, 1); }
  else { cols = Math.min(8, hw.chips.length); rows = Math.ceil(hw.chips.length / cols); planes = 1; }
  const planeW = cols * P;
  const pos = hw.chips.map((c) => {
    let x: number, y: number, z: number;
    if (d.length >= 2) { x = c.coords[0]; y = c.coords[1]; z = Math.floor(c.index / (cols * rows)); }
    else { x = c.index % cols; y = Math.floor(c.index / cols); z = 0; }
    return { x: PAD + z * (planeW + PLANE_GAP) + x * P, y: PAD + 22 + y * P };
  });
  const n = hw.chips.length;
  const hubs = [...new Set(hw.links.flatMap((l) => [l.src, l.dst]).filter((v) => v >= n))].sort((a, b) => a - b);
  const w = PAD * 2 + planes * planeW + (planes - 1) * PLANE_GAP;
  const hubY = PAD + 22 + rows * P - G + HUB_GAP;
  hubs.forEach((v) => { pos[v] = { x: PAD, y: hubY }; });
  const h = PAD * 2 + 22 + rows * P + 16 + (hubs.length ? HUB_GAP + HUB_H : 0);
  return { pos, w, h, cols, rows, planes, hubs, hubY };
}

function linkPath(l: Link, L: Layout, nChips: number, lane: number): string {
  const { pos, cols } = L;
  if (l.src >= nChips || l.dst >= nChips) { // a drop from the chip to the host switch
    const c = pos[l.src < nChips ? l.src : l.dst];
    return `M${c.x + C / 2},${c.y + C} L${c.x + C / 2},${L.hubY}`;
  }
  const a = pos[l.src], b = pos[l.dst];
  const ax = a.x + C / 2, ay = a.y + C / 2, bx = b.x + C / 2, by = b.y + C / 2;
  if (l.axis === "z" || Math.abs(ay - by) > 0 && Math.abs(ax - bx) > 0) {
    // Down into the gap under the row, across, and up: lanes keep the z links apart.
    const gy = a.y + C + 4 + lane * 5;
    return `M${ax},${a.y + C} L${ax},${gy} L${bx},${gy} L${bx},${b.y + C}`;
  }
  const wrap = Math.abs(ax - bx) > P * 1.5 || Math.abs(ay - by) > P * 1.5;
  if (!wrap) return `M${ax},${ay} L${bx},${by}`;
  if (ay === by) { // x wrap: an arc over the row
    const top = a.y - 8;
    return `M${ax},${a.y} C${ax},${top} ${bx},${top} ${bx},${b.y}`;
  }
  const left = a.x - 8 - (cols > 0 ? 0 : 0); // y wrap: an arc left of the column
  return `M${a.x},${ay} C${left},${ay} ${left},${by} ${b.x},${by}`;
}

export interface TorusView { svg: SVGSVGElement; update: (hw: Hardware, metric: ColorMetric) => void; select: (chip: number | null) => void }

export function torus(hw: Hardware, metric: ColorMetric, handlers: TorusHandlers): TorusView {
  const L = layout(hw);
  const svg = s("svg", { viewBox: `0 0 ${L.w} ${L.h}`, width: L.w, height: L.h, role: "group",
    "aria-label": `${hw.name}: ${hw.chips.length} chips and ${hw.links.length} links` }) as SVGSVGElement;
  for (let z = 0; z < L.planes; z++) {
    const x0 = PAD + z * (L.cols * P + PLANE_GAP);
    svg.append(s("text", { x: x0, y: PAD + 8, class: "plane-label" }, L.planes > 1 ? `node ${z}` : hw.type));
  }
  const linkLayer = s("g", { class: "links" });
  const chipLayer = s("g", { class: "chips" });
  svg.append(linkLayer, chipLayer);
  const linkEls = new Map<string, { g: SVGElement; line: SVGElement }>();
  for (const l of hw.links) {
    const key = linkKey(l);
    const lane = l.axis === "z" ? hw.chips[l.src]?.coords[0] ?? 0 : 0;
    const d = linkPath(l, L, hw.chips.length, lane);
    // Links are reached from a chip's detail panel (192 tab stops would bury the page).
    const g = s("g", { class: `link axis-${l.axis}`, "data-link": key, "data-state": l.state, tabindex: -1, role: "button",
      "aria-label": `link ${key} (${l.axis}), ${l.state}` });
    const hit = s("path", { d, class: "hit" });
    const line = s("path", { d, class: "wire" });
    g.append(hit, line);
    g.addEventListener("click", () => handlers.onLink(key));
    g.addEventListener("keydown", (e) => { if ((e as KeyboardEvent).key === "Enter" || (e as KeyboardEvent).key === " ") { e.preventDefault(); handlers.onLink(key); } });
    linkLayer.append(g);
    linkEls.set(key, { g, line });
  }
  for (const v of L.hubs) {
    const hub = s("g", { class: "hub", "data-hub": v, role: "img", "aria-label": "host switch: the chips' links meet here" });
    hub.append(s("rect", { x: PAD, y: L.hubY, width: L.w - 2 * PAD, height: HUB_H, rx: 4, class: "hub-body" }),
      s("text", { x: PAD + 6, y: L.hubY + HUB_H - 5, class: "idx" }, "host switch"));
    chipLayer.append(hub);
  }
  const chipEls: { g: SVGElement; rect: SVGElement; glyph: SVGElement; label: SVGElement; mark: SVGElement }[] = [];
  for (const c of hw.chips) {
    const p = L.pos[c.index];
    const g = s("g", { class: "chip", "data-chip": c.index, "data-state": shownState(c), tabindex: c.index === 0 ? 0 : -1,
      role: "button" });
    const rect = s("rect", { x: p.x, y: p.y, width: C, height: C, rx: 5, class: "body" });
    const mark = s("rect", { x: p.x - 3, y: p.y - 3, width: C + 6, height: C + 6, rx: 7, class: "job-outline" });
    const label = s("text", { x: p.x + 5, y: p.y + 15, class: "idx" }, c.index);
    const glyph = s("text", { x: p.x + C - 5, y: p.y + C - 6, class: "glyph", "text-anchor": "end" });
    g.append(mark, rect, label, glyph);
    g.addEventListener("click", () => handlers.onChip(c.index));
    g.addEventListener("keydown", (e) => {
      const k = (e as KeyboardEvent).key;
      if (k === "Enter" || k === " ") { e.preventDefault(); handlers.onChip(c.index); return; }
      const next = neighbour(hw, c.index, k);
      if (next !== null) { e.preventDefault(); focusChip(next); }
    });
    chipLayer.append(g);
    chipEls.push({ g, rect, glyph, label, mark });
  }
  const focusChip = (i: number): void => {
    chipEls.forEach((el, j) => el.g.setAttribute("tabindex", j === i ? "0" : "-1"));
    (chipEls[i].g as unknown as HTMLElement).focus();
  };
  let selected: number | null = null;
  // Live updates write only what changed since the last frame: each write invalidates
  // style and repaints the element, and a page open on a busy pod gets an update a second
  // (with many consoles open, unchanged rewrites were most of the browsers' and so the
  // machine's work at every telemetry tick).
  const shown = new WeakMap<Element, Map<string, string | null>>();
  const put = (el: Element, name: string, value: string | null): void => {
    let attrs = shown.get(el);
    if (!attrs) shown.set(el, (attrs = new Map()));
    if (attrs.has(name) && attrs.get(name) === value) return;
    attrs.set(name, value);
    if (value === null) el.removeAttribute(name); else el.setAttribute(name, value);
  };
  const text = (el: Element, value: string): void => { if (el.textContent !== value) el.textContent = value; };
  // What each chip and link was last drawn from: an element whose inputs did not move is
  // skipped without building its colours and label (most of a pod is idle most ticks).
  const chipWas: { st: string; v: number; max: number; job: string | null; sel: boolean; metric: string }[] = [];
  const linkWas = new Map<string, { state: string; u: number }>();
  const update = (next: Hardware, m: ColorMetric): void => {
    const max = m.max(next) || 1;
    for (const c of next.chips) {
      const el = chipEls[c.index];
      if (!el) continue;
      const v = m.value(c), st = shownState(c), sel = selected === c.index;
      const was = chipWas[c.index];
      if (was && was.st === st && Object.is(was.v, v) && was.max === max && was.job === c.job && was.sel === sel
          && was.metric === m.key) continue;
      chipWas[c.index] = { st, v, max, job: c.job, sel, metric: m.key };
      const t = v / max;
      put(el.g, "data-state", st);
      put(el.rect, "fill", viridis(t));
      const mark = STATE_MARK[st] ?? STATE_MARK.healthy;
      put(el.rect, "stroke", mark.color === "transparent" ? "#333" : mark.color);
      put(el.rect, "stroke-width", st === "healthy" ? "1" : "4");
      put(el.label, "fill", ink(t));
      put(el.glyph, "fill", ink(t));
      text(el.glyph, mark.glyph);
      put(el.mark, "stroke", c.job ? jobColor(c.job) : "none");
      put(el.g, "data-job", c.job ? c.job : null);
      put(el.g, "aria-label", `chip ${c.index}, ${st}, ${m.label} ${Number.isFinite(v) ? v.toFixed(1) : "n/a"}${m.unit}` +
        (c.job ? `, job ${c.job}` : ""));
      put(el.g, "aria-pressed", String(sel));
    }
    for (const l of next.links) {
      const key = linkKey(l);
      const el = linkEls.get(key);
      if (!el) continue;
      const u = Number(l.metrics.utilization ?? 0);
      const was = linkWas.get(key);
      if (was && was.state === l.state && Object.is(was.u, u)) continue;
      linkWas.set(key, { state: l.state, u });
      const ls = LINK_STATE[l.state] ?? LINK_STATE.up;
      put(el.g, "data-state", l.state);
      put(el.line, "stroke", ls.color || viridis(0.15 + 0.85 * u));
      put(el.line, "stroke-dasharray", ls.dash);
      put(el.g, "aria-label", `link ${key} (${l.axis}), ${l.state}, ${(u * 100).toFixed(0)}% of bandwidth in use`);
    }
  };
  update(hw, metric);
  return {
    svg, update,
    select: (chip) => {
      selected = chip;
      if (chip !== null) chipEls.forEach((el, j) => el.g.setAttribute("tabindex", j === chip ? "0" : "-1"));
      chipEls.forEach((el, i) => { el.g.classList.toggle("selected", i === chip); put(el.g, "aria-pressed", String(i === chip)); });
    },
  };
}

/** Arrow keys move within a plane (wrapping, as the torus does), PageUp/PageDown between planes. */
function neighbour(hw: Hardware, i: number, key: string): number | null {
  const d = hw.dims.length >= 2 ? hw.dims : [Math.min(8, hw.chips.length), Math.ceil(hw.chips.length / 8)];
  const [cols, rows] = d;
  const planeSize = cols * rows, planes = Math.ceil(hw.chips.length / planeSize);
  const z = Math.floor(i / planeSize), y = Math.floor((i % planeSize) / cols), x = i % cols;
  const at = (xx: number, yy: number, zz: number) => {
    const j = ((zz + planes) % planes) * planeSize + ((yy + rows) % rows) * cols + ((xx + cols) % cols);
    return j < hw.chips.length ? j : null;
  };
  switch (key) {
    case "ArrowRight": return at(x + 1, y, z);
    case "ArrowLeft": return at(x - 1, y, z);
    case "ArrowDown": return at(x, y + 1, z);
    case "ArrowUp": return at(x, y - 1, z);
    case "PageDown": return at(x, y, z + 1);
    case "PageUp": return at(x, y, z - 1);
    case "Home": return 0;
    case "End": return hw.chips.length - 1;
    default: return null;
  }
}

export function legend(metric: ColorMetric, hw: Hardware): SVGElement {
  const max = metric.max(hw);
  const g = s("svg", { viewBox: "0 0 260 40", width: 260, height: 40, role: "img",
    "aria-label": `colour scale: ${metric.label} from 0 to ${max.toFixed(0)} ${metric.unit}` });
  const defs = s("defs");
  const grad = s("linearGradient", { id: "legend-grad" });
  for (let i = 0; i <= 10; i++) grad.append(s("stop", { offset: `${i * 10}%`, "stop-color": viridis(i / 10) }));
  defs.append(grad);
  g.append(defs, s("rect", { x: 0, y: 0, width: 260, height: 14, fill: "url(#legend-grad)" }),
    s("text", { x: 0, y: 32, class: "legend-text" }, `0 ${metric.unit}`),
    s("text", { x: 260, y: 32, class: "legend-text", "text-anchor": "end" }, `${max.toFixed(0)} ${metric.unit}`));
  return g;
}

export function stateOf(hw: Hardware, chip: number): Chip | undefined { return hw.chips[chip]; }
