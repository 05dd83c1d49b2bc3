// Shared page plumbing: the context a page gets, the live streams it opens, and status lines.
import type { Me } from "./api";
import { h } from "./dom";

export interface Ctx {
  me: Me;
  params: Record<string, string>;
  query: URLSearchParams;
  nav: (path: string) => void;
  /** Register something to close when the page is left (streams, timers, charts). */
  onLeave: (fn: () => void) => void;
}

export type Page = (root: HTMLElement, ctx: Ctx) => void | Promise<void>;

export function sse(ctx: Ctx, url: string, handlers: Record<string, (data: any, ev: MessageEvent) => void>): EventSource {
  const es = new EventSource(url, { withCredentials: true });
  for (const [kind, fn] of Object.entries(handlers)) es.addEventListener(kind, (e) => fn(JSON.parse((e as MessageEvent).data), e as MessageEvent));
  es.addEventListener("end", () => es.close());
  ctx.onLeave(() => es.close());
  return es;
}

export function every(ctx: Ctx, ms: number, fn: () => void): void {
  const id = window.setInterval(fn, ms);
  ctx.onLeave(() => window.clearInterval(id));
}

/** A polite live region for results and errors of actions. */
export function status(): HTMLElement {
  return h("p", { class: "status", role: "status", "aria-live": "polite" });
}

export function report(el: HTMLElement, msg: string, error = false): void {
  el.textContent = msg;
  el.classList.toggle("error", error);
}

export function link(ctx: Ctx, path: string, text: string, attrs: Record<string, string> = {}): HTMLAnchorElement {
  const a = h("a", { href: path, ...attrs }, text);
  a.addEventListener("click", (e) => {
    if (e.metaKey || e.ctrlKey || e.shiftKey || e.button !== 0) return;
    e.preventDefault();
    ctx.nav(path);
  });
  return a;
}

export function field(label: string, input: HTMLElement, hint?: string): HTMLElement {
  const id = input.id || `f-${Math.random().toString(36).slice(2, 9)}`;
  input.id = id;
  return h("div", { class: "field" }, h("label", { for: id }, label), input, hint ? h("small", {}, hint) : null);
}

export function select(name: string, options: string[], value?: string): HTMLSelectElement {
  const el = h("select", { name });
  for (const o of options) el.append(h("option", { value: o, selected: o === value }, o));
  return el;
}

/** Milliseconds from a pushed snapshot's sample (its event id: wall-clock ms, set by the
 * server at any --speed) to now; from its `time` where the server sent no id. */
export function lagMs(ev: MessageEvent, time: string): number {
  const sampled = Number(ev.lastEventId);
  return Date.now() - (ev.lastEventId && Number.isFinite(sampled) ? sampled : Date.parse(time));
}
