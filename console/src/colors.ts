// Colour-blind-safe palettes: viridis for values, Okabe-Ito for categories.
const VIRIDIS = ["#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b", "#fde725"];

export function viridis(t: number): string {
  if (!Number.isFinite(t)) return "#888888";
  const x = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
  const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
  const f = x - i;
  const a = hex(VIRIDIS[i]), b = hex(VIRIDIS[i + 1]);
  return `rgb(${a.map((c, k) => Math.round(c + (b[k] - c) * f)).join(",")})`;
}

/** Text colour readable on a viridis fill. */
export function ink(t: number): string { return t > 0.55 ? "#000000" : "#ffffff"; }

function hex(c: string): number[] {
  return [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16));
}

export const OKABE_ITO = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000"];

// Job outlines: Paul Tol's muted palette, none of whose colours a chip state or the
// focus ring uses, so an outline never reads as a state (and outlines are dashed).
export const JOB_PALETTE = ["#332288", "#117733", "#44AA99", "#88CCEE", "#882255", "#AA4499", "#999933", "#661100"];

export function jobColor(key: string): string {
  let hsh = 0;
  for (const ch of key) hsh = (hsh * 31 + ch.charCodeAt(0)) >>> 0;
  return JOB_PALETTE[hsh % JOB_PALETTE.length];
}

// Chip states: a colour and a letter, so no state rests on colour alone.
export const STATE_MARK: Record<string, { color: string; glyph: string }> = {
  healthy: { color: "transparent", glyph: "" },
  degraded: { color: "#E69F00", glyph: "D" },
  failed: { color: "#D55E00", glyph: "✕" },
  isolated: { color: "#CC79A7", glyph: "I" },
  updating: { color: "#56B4E9", glyph: "U" },
  spare: { color: "#009E73", glyph: "S" },
  cordoned: { color: "#F0E442", glyph: "C" },
  draining: { color: "#F0E442", glyph: "R" },
};

export const LINK_STATE: Record<string, { color: string; dash: string }> = {
  up: { color: "", dash: "" },
  degraded: { color: "#E69F00", dash: "5 3" },
  down: { color: "#D55E00", dash: "2 3" },
};

// A fleet's pods (the fleet view's tiles): Okabe-Ito as the chip states use them, and a
// glyph each, so no state rests on colour alone.
export const POD_STATE: Record<"healthy" | "impaired" | "down", { color: string; glyph: string; meaning: string }> = {
  healthy: { color: "#009E73", glyph: "✓", meaning: "every chip healthy" },
  impaired: { color: "#E69F00", glyph: "!", meaning: "some chips failed or isolated" },
  down: { color: "#D55E00", glyph: "✕", meaning: "no chip healthy (pod lost)" },
};
