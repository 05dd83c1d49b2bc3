import { api, ApiError, setCsrf, type Me } from "../api";
import { h } from "../dom";
import { report, status } from "../app";

/** Sign-in: the token is exchanged for an HttpOnly session cookie and never stored by the page. */
export function loginPage(root: HTMLElement, onSignedIn: (me: Me) => void): void {
  const input = h("input", { name: "token", id: "token", type: "password", autocomplete: "current-password", required: true,
    spellcheck: "false", "aria-describedby": "token-help" });
  const msg = status();
  const form = h("form", { class: "login", method: "post", action: "/console/session" },
    h("h1", {}, "Sign in to podfleet"),
    h("label", { for: "token" }, "Access token"), input,
    h("small", { id: "token-help" }, "The token printed by `podfleet up` on first start, or one an admin issued."),
    h("button", { type: "submit" }, "Sign in"), msg);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    report(msg, "Signing in…");
    try {
      const me = await api<Me>("POST", "/console/session", { token: input.value });
      input.value = "";
      setCsrf(me.csrf);
      onSignedIn(me);
    } catch (err) {
      report(msg, err instanceof ApiError ? `Sign-in failed: ${err.message}` : "Sign-in failed", true);
    }
  });
  root.replaceChildren(h("main", { id: "main", class: "narrow" }, form));
  input.focus();
}
