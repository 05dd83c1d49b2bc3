// The /v1 API through the session cookie; writes carry the session's CSRF token.
export interface Me { name: string; role: "admin" | "operator" | "viewer"; csrf: string }

export class ApiError extends Error {
  constructor(public status: number, public code: string, message: string) { super(message); }
}

let csrf = "";
export function setCsrf(token: string): void { csrf = token; }

export async function api<T = any>(method: string, path: string, body?: unknown): Promise<T> {
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

export const enc = encodeURIComponent;

const RANK: Record<string, number> = { viewer: 0, operator: 1, admin: 2 };
export function allows(me: Me, role: "viewer" | "operator" | "admin"): boolean {
  return RANK[me.role] >= RANK[role];
}
