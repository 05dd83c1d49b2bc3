// The /v1 API through the session cookie; writes carry the session's CSRF token.
// Response types come from the server's own OpenAPI document (src/generated/, made by
// `make console-types`; a Python test fails when it drifts from the app's schema).
import type { components, operations } from "./generated/api";

export type Schemas = components["schemas"];
type Json<R> = R extends { content: { "application/json": infer B } } ? B : never;
type Success<R> = R extends { 200: infer X } ? X : R extends { 201: infer X } ? X : R extends { 202: infer X } ? X : never;
/** The JSON body an operation answers with on success (200, 201 or 202), by its operationId. */
export type Reply<Op extends keyof operations> = Json<Success<operations[Op]["responses"]>>;

// ListAlerts and ListRecoveries answer open objects in the document (the health routes
// return the engine's dicts): the fields the console reads, until those routes declare models.
export interface Alert { id: string; severity: string; target: string; rule: string; state: string; count: number;
  last_seen: number; message: string }
export interface RecoveryStep { name: string; reason?: string; detail?: unknown }
export interface Recovery { id: string; kind: string; target: string; job_id?: string | null; state: string;
  t_start: number; steps?: RecoveryStep[] }

export interface Me { name: string; role: "admin" | "operator" | "viewer"; csrf: string }

export class ApiError extends Error {
  constructor(public status: number, public code: string, message: string) { super(message); }
}

let csrf = "";
export function setCsrf(token: string): void { csrf = token; }

/** ``T``: the reply's type, ``Reply<"OperationId">`` for the API's operations. Unnamed, a
 * reply is ``unknown``: read only once its shape is said. */
export async function api<T = unknown>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET") headers["X-CSRF-Token"] = csrf;
  const res = await fetch(path, { method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body) });
  if (res.status === 204) return undefined as T;
  const data = await res.json().catch(() => null);
  if (!res.ok) {
    const detail = data && (data.detail || data.title) ? String(data.detail || data.title) : res.statusText;
    throw new ApiError(res.status, data?.code ?? "error", detail);
  }
  return data as T;
}

let known: Promise<Reply<"GetPresets">> | null = null;
/** The server's model presets and state names (GetPresets), read once per page load; a
 * failed read is tried again next time. */
export function presets(): Promise<Reply<"GetPresets">> {
  known ??= api<Reply<"GetPresets">>("GET", "/v1/presets").catch((e: unknown) => { known = null; throw e; });
  return known;
}

export const enc = encodeURIComponent;

const RANK: Record<string, number> = { viewer: 0, operator: 1, admin: 2 };
export function allows(me: Me, role: "viewer" | "operator" | "admin"): boolean {
  return RANK[me.role] >= RANK[role];
}
