// The console shell: who is signed in, the navigation (role-aware), and a path router.
import "./style.css";
import { allows, api, ApiError, setCsrf, type Me } from "./api";
import { clear, h } from "./dom";
import { link, type Ctx, type Page } from "./app";
import { twinTime } from "./clock";
import { loginPage } from "./pages/login";
import { overviewPage } from "./pages/overview";
import { clusterPage } from "./pages/cluster";
import { dashboardPage } from "./pages/dashboard";
import { jobPage, jobsPage } from "./pages/jobs";
import { queuesPage } from "./pages/queues";
import { alertsPage, firmwarePage, recoveriesPage } from "./pages/ops";
import { auditPage, tokensPage } from "./pages/admin";

interface Route { re: RegExp; keys: string[]; page: Page; title: string; role?: "admin" }
const ROUTES: Route[] = [
  { re: /^\/$/, keys: [], page: overviewPage, title: "Overview" },
  { re: /^\/clusters\/?$/, keys: [], page: overviewPage, title: "Overview" },
  { re: /^\/clusters\/([^/]+)\/dashboard$/, keys: ["cluster"], page: dashboardPage, title: "Dashboard" },
  { re: /^\/clusters\/([^/]+)$/, keys: ["cluster"], page: clusterPage, title: "Cluster" },
  { re: /^\/jobs\/?$/, keys: [], page: jobsPage, title: "Jobs" },
  { re: /^\/jobs\/([^/]+)$/, keys: ["job"], page: jobPage, title: "Job" },
  { re: /^\/queues\/?$/, keys: [], page: queuesPage, title: "Queues" },
  { re: /^\/alerts$/, keys: [], page: alertsPage, title: "Alerts" },
  { re: /^\/recoveries$/, keys: [], page: recoveriesPage, title: "Recoveries" },
  { re: /^\/firmware$/, keys: [], page: firmwarePage, title: "Firmware" },
  { re: /^\/audit$/, keys: [], page: auditPage, title: "Audit", role: "admin" },
  { re: /^\/tokens$/, keys: [], page: tokensPage, title: "Tokens", role: "admin" },
];
const NAV: [string, string, "admin"?][] = [["/", "Overview"], ["/jobs", "Jobs"], ["/queues", "Queues"], ["/alerts", "Alerts"],
  ["/recoveries", "Recoveries"], ["/firmware", "Firmware"], ["/audit", "Audit", "admin"], ["/tokens", "Tokens", "admin"]];

const app = document.getElementById("app") as HTMLElement;
let me: Me | null = null;
let leaving: (() => void)[] = [];

function nav(path: string): void {
  history.pushState(null, "", path);
  void render();
}

async function render(): Promise<void> {
  for (const fn of leaving.splice(0)) { try { fn(); } catch { /* already closed */ } }
  const path = location.pathname;
  if (!me) {
    if (path !== "/login") history.replaceState(null, "", `/login?next=${encodeURIComponent(path + location.search)}`);
    document.title = "Sign in · podfleet";
    loginPage(app, (who) => {
      me = who;
      const next = new URLSearchParams(location.search).get("next");
      nav(next && next.startsWith("/") && !next.startsWith("//") && !next.startsWith("/login") ? next : "/");
    });
    return;
  }
  if (path === "/login") { history.replaceState(null, "", "/"); return render(); }
  const route = ROUTES.find((r) => r.re.test(path));
  const main = h("main", { id: "main", tabindex: -1, "aria-busy": "false" }); // busy only while a page loads
  clear(app, shell(), main);
  if (!route) { main.append(h("h1", {}, "Not found"), h("p", {}, `No console page at ${path}.`)); return; }
  document.title = `${route.title} · podfleet`;
  if (route.role && !allows(me, route.role)) {
    main.append(h("h1", {}, route.title), h("p", {}, `This page needs the ${route.role} role; you are ${me.role}.`));
    return;
  }
  const m = path.match(route.re) as RegExpMatchArray;
  const params = Object.fromEntries(route.keys.map((k, i) => [k, decodeURIComponent(m[i + 1])]));
  const ctx: Ctx = { me, params, query: new URLSearchParams(location.search), nav, onLeave: (fn) => leaving.push(fn) };
  main.setAttribute("aria-busy", "true");
  try {
    await route.page(main, ctx);
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) { me = null; return render(); }
    main.append(h("p", { class: "error", role: "alert" }, `Could not load this page: ${(e as Error).message}`));
  } finally {
    main.setAttribute("aria-busy", "false");
  }
}

function shell(): HTMLElement {
  const who = me as Me;
  const out = h("button", { type: "button", class: "signout" }, "Sign out");
  out.addEventListener("click", async () => {
    await api("POST", "/console/logout").catch(() => undefined);
    me = null;
    setCsrf("");
    nav("/login");
  });
  const ctx = { nav } as Ctx;
  const here = location.pathname;
  return h("header", { class: "top" },
    h("a", { href: "/", class: "brand", "aria-label": "podfleet overview" }, "podfleet"),
    h("nav", { "aria-label": "console" }, h("ul", {}, ...NAV.filter(([, , role]) => !role || allows(who, role))
      .map(([p, label]) => h("li", {}, link(ctx, p, label, here === p || (p !== "/" && here.startsWith(p)) ? { "aria-current": "page" } : {}))))),
    twinTime(), h("span", { class: "me", "data-role": who.role }, `${who.name} (${who.role})`), out);
}

window.addEventListener("popstate", () => void render());

async function start(): Promise<void> {
  // The console's own route (not in the API's document): signed in, or not.
  const s = await api<Partial<Me> & { signed_in?: boolean }>("GET", "/console/session");
  if (s.signed_in) { me = s as Me; setCsrf(s.csrf ?? ""); }
  await render();
}
void start();
