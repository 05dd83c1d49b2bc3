import { api, enc, type Reply, type Schemas } from "../api";
import { clear, h, table } from "../dom";
import { field, report, select, status, type Ctx } from "../app";

/** The audit trail (admins) and its hash-chain check. */
export async function auditPage(root: HTMLElement, _ctx: Ctx): Promise<void> {
  const list = h("div", {}), msg = status();
  const verify = h("button", { type: "button" }, "Verify chain");
  verify.addEventListener("click", async () => {
    const v = await api<Reply<"VerifyAuditChain">>("GET", "/v1/audit/verify");
    report(msg, v.ok ? `Chain intact: ${v.message}` : `Chain broken at ${v.first_bad_seq}: ${v.message}`, !v.ok);
  });
  let next: string | null = null;
  const rows: Schemas["AuditEvent"][] = [];
  const more = h("button", { type: "button" }, "Load more");
  const load = async () => {
    const page = await api<Reply<"ListAuditEvents">>("GET", `/v1/audit?max_results=200${next ? `&next_token=${enc(next)}` : ""}`);
    rows.push(...page.events);
    next = page.next_token ?? null;
    more.hidden = !next;
    clear(list, table("Audit events", ["seq", "time", "actor", "action", "target", "result"],
      rows.map((e) => [String(e.seq), e.time, e.actor, e.action, e.target, e.result]), { "data-testid": "audit" }));
  };
  more.addEventListener("click", () => void load());
  root.append(h("h1", {}, "Audit"), verify, msg, list, more);
  await load();
}

/** Access tokens (admins): issue, list, revoke. */
export async function tokensPage(root: HTMLElement, _ctx: Ctx): Promise<void> {
  const list = h("div", {}), msg = status();
  const name = h("input", { name: "token-name", required: true, pattern: "[A-Za-z0-9._\\-]+" });
  const role = select("role", ["viewer", "operator", "admin"]);
  const issued = h("output", { "data-testid": "issued-token" });
  const form = h("form", { class: "grid-form" }, field("Name", name), field("Role", role), h("button", { type: "submit" }, "Issue token"));
  const refresh = async () => {
    const { tokens } = await api<Reply<"ListAccessTokens">>("GET", "/v1/tokens");
    clear(list, table("Tokens", ["id", "name", "role", "created", "revoked", ""], tokens.map((t) => {
      const b = h("button", { type: "button", "aria-label": `revoke token ${t.name}` }, "Revoke");
      b.addEventListener("click", async () => {
        try { await api<Reply<"RevokeAccessToken">>("DELETE", `/v1/tokens/${enc(t.id)}`); report(msg, `Revoked ${t.name}`); await refresh(); }
        catch (e) { report(msg, `Revoke failed: ${(e as Error).message}`, true); }
      });
      return [t.id, t.name, t.role, t.created_at, t.revoked ? "yes" : "no", t.revoked ? "" : b];
    }), { "data-testid": "tokens" }));
  };
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const t = await api<Reply<"CreateAccessToken">>("POST", "/v1/tokens", { name: name.value, role: role.value });
      issued.textContent = `Token for ${t.name} (${t.role}), shown once: ${t.token}`;
      await refresh();
    } catch (err) { report(msg, `Issue failed: ${(err as Error).message}`, true); }
  });
  root.append(h("h1", {}, "Access tokens"), h("section", { class: "card" }, h("h2", {}, "Issue a token"), form, issued), msg, list);
  await refresh();
}
