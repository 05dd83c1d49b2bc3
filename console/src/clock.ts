// "twin time": on a sped-up demo (`podfleet up --demo`, speed != 1) the twin's own clock,
// shown in the header beside the wall clock every other timestamp uses. /healthz sends it
// only when the plane runs faster (or slower) than the wall: at speed 1, on real fabrics,
// nothing is shown. Between reads it is extrapolated at the plane's speed.
// Not a live region: a clock ticking every second must not be read out each time.
import { api, type Reply } from "./api";
import { h } from "./dom";

interface Clock { twin: number; speed: number; readAt: number }
let clock: Clock | null = null;
let started = false;

function stamp(unixMs: number): string {
  return new Date(unixMs).toISOString().replace(/\.\d{3}Z$/, "Z");
}

function show(): void {
  const el = document.querySelector<HTMLElement>("[data-testid=twin-time]");
  if (!el) return;
  el.hidden = clock === null;
  if (clock === null) return;
  const twin = stamp(clock.twin + (Date.now() - clock.readAt) * clock.speed);
  const wall = stamp(Date.now());
  el.replaceChildren(h("time", { datetime: wall, "data-testid": "wall-time", title: "wall clock (UTC)" }, wall), " · ",
    h("abbr", { title: `the twin's virtual clock, running ${clock.speed}x the wall clock` }, "twin time"), " ",
    h("time", { datetime: twin, "data-testid": "twin-clock" }, twin), ` (${clock.speed}x)`);
}

async function read(): Promise<void> {
  const hz = await api<Reply<"Healthz">>("GET", "/healthz");
  clock = typeof hz.twin_time === "string" && typeof hz.speed === "number"
    ? { twin: Date.parse(hz.twin_time), speed: hz.speed, readAt: Date.now() } : null;
  show();
}

/** The header's slot for the twin time (hidden until /healthz says there is one). */
export function twinTime(): HTMLElement {
  const el = h("span", { class: "twin-time", "data-testid": "twin-time", hidden: true });
  if (!started) {
    started = true;
    void read().catch(() => undefined);
    window.setInterval(show, 1000);
    window.setInterval(() => void read().catch(() => undefined), 30_000); // re-anchor: engine stalls drift it
  } else {
    queueMicrotask(show);
  }
  return el;
}
