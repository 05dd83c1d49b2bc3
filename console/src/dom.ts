// Tiny DOM builders: text always goes in as text nodes (never parsed as HTML).
type Attrs = Record<string, string | number | boolean | null | undefined | EventListener>;
type Child = Node | string | number | null | undefined | false;

function apply(el: Element, attrs: Attrs, children: Child[]): void {
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
}

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  apply(el, attrs, children);
  return el;
}

const SVG_NS = "http://www.w3.org/2000/svg";
export function s(tag: string, attrs: Attrs = {}, ...children: Child[]): SVGElement {
  const el = document.createElementNS(SVG_NS, tag) as SVGElement;
  apply(el, attrs, children);
  return el;
}

export function clear(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  apply(el, {}, children);
}

/** A value in human units, by the CLI's rules (podfleet/cli/output.py ``number``): the
 * key's suffix names the unit (``_bytes`` GiB, ``_per_s`` k/M/G per second, ``_s`` a
 * duration, ``_ms``, ``_at`` a time); large plain numbers get k/M/G; at most 4 digits.
 * Never ``8.762e+10`` or ``245964.831``. */
export function fmt(v: unknown, key = ""): string {
  if (v === null || v === undefined) return "—";
  if (typeof v === "number") {
    if (!Number.isFinite(v)) return "—";
    if (key.endsWith("_bytes")) return bytes(v);
    if (/(_at|time|_t)$/.test(key) && v > 1e9) return time(v);
    if (key.endsWith("_per_s")) return `${si(v)}/s`;
    if (key.endsWith("_ms")) return `${sig(v, 3)} ms`;
    if (key.endsWith("_s")) return duration(v);
    if (Math.abs(v) >= 1e4) return si(v);
    return Number.isInteger(v) ? String(v) : sig(v, 4);
  }
  if (Array.isArray(v)) return v.map((x) => fmt(x, key)).join(", ");
  return String(v);
}

function sig(v: number, digits: number): string {
  return String(Number(v.toPrecision(digits)));
}

export function si(v: number): string {
  for (const [unit, size] of [["T", 1e12], ["G", 1e9], ["M", 1e6], ["k", 1e3]] as const) {
    if (Math.abs(v) >= size) return `${(v / size).toFixed(1)}${unit}`;
  }
  return sig(v, 3);
}

export function bytes(v: number): string {
  for (const [unit, size] of [["TiB", 2 ** 40], ["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]] as const) {
    if (Math.abs(v) >= size) return `${(v / size).toFixed(1)} ${unit}`;
  }
  return `${Math.round(v)} B`;
}

export function duration(s: number): string {
  if (Math.abs(s) < 1) return `${sig(s * 1000, 3)} ms`;
  if (Math.abs(s) < 60) return `${s.toFixed(1)} s`;
  const r = Math.round(s), h = Math.floor(r / 3600), m = Math.floor((r % 3600) / 60), sec = r % 60;
  const two = (n: number) => String(n).padStart(2, "0");
  return h ? `${h}h${two(m)}m${two(sec)}s` : `${m}m${two(sec)}s`;
}

export function time(v: unknown): string {
  if (typeof v === "number") return new Date(v * 1000).toISOString().replace(".000Z", "Z");
  return v ? String(v) : "—";
}

/** A table with a caption and column headers (screen readers read both). */
export function table(caption: string, heads: string[], rows: Child[][], attrs: Attrs = {}): HTMLTableElement {
  return h("table", attrs, h("caption", {}, caption),
    h("thead", {}, h("tr", {}, ...heads.map((x) => h("th", { scope: "col" }, x)))),
    h("tbody", {}, ...rows.map((r) => h("tr", {}, ...r.map((c) => h("td", {}, c))))));
}
