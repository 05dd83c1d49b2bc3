// Time series with uPlot (one chart per series set, sized to its container).
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { OKABE_ITO } from "./colors";
import type { Ctx } from "./app";
import { h } from "./dom";

export interface Series { label: string; values: (number | null)[] }
/** ``zero``: the value axis starts at 0; ``stepped``: each value holds until the next
 * time (amounts per bucket, a bucket's start as its time). */
export interface ChartOpts { zero?: boolean; stepped?: boolean }

/** A chart over time. A percentage's axis is fixed at 0-100 % (an autoscaled one made a
 * point of noise look like a swing); with ``zero`` other units' axes start at 0 (amounts
 * such as chip-hours: a bar's height reads as its size), else they scale to their data. */
export function chart(ctx: Ctx, title: string, t: number[], series: Series[], unit = "", { zero = false, stepped = false }: ChartOpts = {}): HTMLElement {
  const box = h("figure", { class: "chart", role: "group", "aria-label": title }, h("figcaption", {}, title));
  const opts: uPlot.Options = {
    width: 520, height: 200,
    // One sample alone would stretch the axis over years: give it the minute before it.
    scales: { x: { time: true, range: (_u, min, max) => (min === max ? [min - 60, max + 1] : [min, max]) },
      ...(unit === "%" ? { y: { auto: false, range: [0, 100] as uPlot.Range.MinMax } }
        : zero ? { y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] as uPlot.Range.MinMax } } : {}) },
    axes: [{}, { label: unit, size: 90 }],
    series: [{}, ...series.map((sr, i) => ({ label: sr.label, stroke: OKABE_ITO[(i + 4) % OKABE_ITO.length], width: 2,
      ...(stepped ? { paths: uPlot.paths.stepped?.({ align: 1 }) } : {}) }))],
  };
  const plot = new uPlot(opts, [t, ...series.map((sr) => sr.values)] as uPlot.AlignedData, box);
  ctx.onLeave(() => plot.destroy());
  (box as any).plot = plot;
  return box;
}

export function setData(box: HTMLElement, t: number[], series: Series[]): void {
  const plot: uPlot | undefined = (box as any).plot;
  plot?.setData([t, ...series.map((sr) => sr.values)] as uPlot.AlignedData);
}
