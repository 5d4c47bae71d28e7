// clusterlimit's live view: reads the sidecar's picture stream (/v1/live/events) and draws
// it; changes go through the sidecar's API with the login's CSRF value. No framework, no
// build step: this file is served as it is.
"use strict";

const $ = (id) => document.getElementById(id);
let csrf = "";
let source = null;
let last = null;
// Cards drawn per section at most (busiest first; the filter finds the others).
const SHOWN = 50;

// --- small helpers -------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}
const rate = (x) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));
function dur(ms) {
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  if (ms < 3600000) return Math.floor(ms / 60000) + " min " + Math.floor((ms % 60000) / 1000) + " s";
  return (ms / 3600000).toFixed(1) + " h";
}
function table(headers, rows, empty) {
  if (!rows.length) return el("p", { class: "muted" }, empty);
  return el("table", {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { class: h.num ? "num" : "" }, h.t)))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c, i) =>
      el("td", { class: headers[i].num ? "num" : "" }, c))))));
}
const H = (t, num) => ({ t, num });

// --- API calls -----------------------------------------------------------------------------
async function api(method, path, body) {
  const headers = { "content-type": "application/json" };
  if (csrf) headers["x-csrf-token"] = csrf;
  const r = await fetch(path, {
    method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { /* not JSON */ }
  if (!r.ok) {
    const why = (json && (json.detail || json.title)) || r.statusText;
    throw new Error(why + " (HTTP " + r.status + ")");
  }
  return json;
}

// --- login ---------------------------------------------------------------------------------
function showLogin(message) {
  if (source) { source.close(); source = null; }
  $("view").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  $("status").textContent = "not logged in";
}

async function start() {
  const r = await fetch("/ui/session", { credentials: "same-origin" });
  if (r.status === 401) return showLogin();
  const s = await r.json();
  csrf = s.csrf || "";
  $("logout").hidden = !s.token_required;
  $("login").hidden = true;
  $("view").hidden = false;
  listen();
}

$("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  try {
    const s = await api("POST", "/ui/login", { token: $("token").value });
    $("token").value = "";
    csrf = s.csrf || "";
    start();
  } catch (e) {
    $("login-error").textContent = e.message;
  }
});

$("logout").addEventListener("click", async () => {
  try { await api("POST", "/ui/logout"); } catch (_) { /* gone anyway */ }
  csrf = "";
  showLogin("logged out");
});

// --- the stream ----------------------------------------------------------------------------
function listen() {
  if (source) source.close();
  source = new EventSource("/v1/live/events");
  source.addEventListener("picture", (ev) => {
    last = JSON.parse(ev.data);
    render(last);
  });
  source.onerror = async () => {
    $("status").textContent = "reconnecting…";
    // A 401 (logged out elsewhere, sidecar restarted) closes the stream: log in again.
    const r = await fetch("/ui/session", { credentials: "same-origin" }).catch(() => null);
    if (r && r.status === 401) showLogin("your login ended: log in again");
  };
}

setInterval(() => {
  if (last) $("status").textContent = "updated " + dur(Math.max(0, Date.now() - last.at_unix_ms)) + " ago";
}, 500);

// --- drawing -------------------------------------------------------------------------------
function render(p) {
  $("source").textContent = "— " + p.source;
  $("status").textContent = "updated just now";
  $("store").replaceChildren(renderStore(p.store));
  $("stale").textContent = staleText(p);
  $("stale").hidden = !p.stale;
  const filter = $("filter").value.trim().toLowerCase();
  const match = (x) => !filter || x.name.toLowerCase().includes(filter);
  // The busiest first; at most SHOWN cards each, so a store with thousands stays responsive.
  const sems = p.semaphores.filter(match).sort((a, b) =>
    (b.waiters.length - a.waiters.length) || (b.used / (b.capacity || 1) - a.used / (a.capacity || 1))
    || a.name.localeCompare(b.name));
  const limits = p.rate_limits.filter(match).sort((a, b) =>
    (b.denied_per_s + b.fleet_denied_per_s - a.denied_per_s - a.fleet_denied_per_s)
    || (b.admitted_per_s - a.admitted_per_s) || a.name.localeCompare(b.name));
  const more = (n, what) => n > SHOWN
    ? [el("p", { class: "muted" }, (n - SHOWN) + " more " + what + " not shown: type in the filter to find one")] : [];
  $("sem-count").textContent = "(" + p.semaphores_total + " in the store" +
    (p.semaphores.length < p.semaphores_total ? ", " + p.semaphores.length + " read" : "") + ")";
  $("semaphores").replaceChildren(...(sems.length
    ? sems.slice(0, SHOWN).map(renderSemaphore).concat(more(sems.length, "semaphores"))
    : [el("p", { class: "muted" }, filter ? "no semaphore matches the filter" : "no semaphores")]));
  $("rate-limits").replaceChildren(...(limits.length
    ? limits.slice(0, SHOWN).map(renderRateLimit).concat(more(limits.length, "rate limits"))
    : [el("p", { class: "muted" }, filter ? "no rate limit matches the filter" : "no rate limits")]));
  $("rls").replaceChildren(renderRls(p.rls));
  $("fleet").replaceChildren(renderFleet(p.fleet));
}

// "reachable, 0.7 ms", or "unreachable since 14:02:11, because …" (one cluster, or the store).
function clusterState(c) {
  if (c.reachable) {
    return el("span", { class: "ok" }, "reachable" + (c.latency_ms == null ? "" : ", " + c.latency_ms.toFixed(1) + " ms"));
  }
  return el("span", { class: "bad" }, "unreachable since " + new Date(c.since_unix_ms).toLocaleTimeString() +
    (c.error ? ", because " + c.error : ""));
}

function storeState(s) {
  const clusters = s.clusters || [];
  if (clusters.length === 1) return clusterState(clusters[0]);
  const down = clusters.filter((c) => !c.reachable).length;
  if (down) return el("span", { class: "bad" }, down + " of " + clusters.length + " clusters unreachable");
  return s.reachable
    ? el("span", { class: "ok" }, "reachable" + (s.latency_ms == null ? "" : ", " + s.latency_ms.toFixed(1) + " ms"))
    : el("span", { class: "bad" }, "unreachable: " + (s.error || "no answer"));
}

function renderStore(s) {
  const clusters = s.clusters || [];
  return el("div", {},
    el("p", {}, el("code", {}, s.url), " — ", storeState(s), " — session TTL " + dur(s.session_ttl_ms)),
    clusters.length > 1 ? el("ul", { id: "clusters" },
      clusters.map((c) => el("li", { "data-cluster": String(c.position + 1) }, c.name + ": ", clusterState(c)))) : null,
    s.members.length ? table([H("member"), H("address"), H("role")],
      s.members.map((m) => [m.name, m.address, m.role === "leader" ? el("b", {}, "leader") : m.role]), "") : null,
    table([H("breaker"), H("state"), H("opened", 1), H("closed", 1)],
      s.breakers.map((b) => [b.name, b.open ? el("span", { class: "bad" }, "open") : "closed", b.opened, b.closed]),
      "no store-down breakers"),
    s.events.length ? table([H("when"), H("event")],
      s.events.slice().reverse().map((e) => [new Date(e.at_unix_ms).toLocaleTimeString(), e.what]), "") : null);
}

// "as of 14:02:09, store unreachable": the panes are the last ones read, not read now.
function staleText(p) {
  if (!p.stale) return "";
  const why = p.store.reachable ? "not read now: " + p.stale.why : "store unreachable";
  return "The panes below are the last read, as of " + new Date(p.stale.as_of_unix_ms).toLocaleTimeString() + ", " + why;
}

// ", controller: held by host-a/1": an adaptive semaphore's controller seat.
function controllerText(c) {
  const holder = c.holder ? "held by " + c.holder.owner : "nobody holds it";
  return "controller: " + holder + (c.waiting ? " (" + c.waiting + " waiting to take over)" : "");
}

// "batch: held 3 of 0 guaranteed (borrowing 3), 2 waiting: tenant-a, tenant-b": one class
// of a fair semaphore.
function classLine(c) {
  const borrowing = c.held > c.guaranteed ? " (borrowing " + (c.held - c.guaranteed) + ")" : "";
  const flows = c.waiting_flows.length ? ": " + c.waiting_flows.join(", ") : "";
  return c.name + ": held " + c.held + " of " + c.guaranteed + " guaranteed" + borrowing + ", " + c.waiting + " waiting" + flows;
}

function renderSemaphore(s) {
  if (s.error) return el("div", { class: "card" }, el("b", {}, s.name), " ", el("span", { class: "error" }, s.error));
  const pct = s.capacity ? Math.min(100, (100 * s.used) / s.capacity) : 100;
  // On a fair semaphore, each request's flow and class after its owner.
  const owner = (h) => (h.flow ? h.owner + " (" + h.flow + " / " + h.class + ")" : h.owner);
  const who = (h) => [owner(h), h.permits, h.fencing_token, dur(h.for_ms)];
  const classes = s.classes || [];
  // Widths through the style property: the page's CSP refuses style attributes.
  const fill = el("span", { class: s.used >= s.capacity ? "full" : "" });
  fill.style.width = pct + "%";
  const idle = !s.holders.length && !s.waiters.length;
  return el("div", { class: "card", "data-semaphore": s.name },
    el("header", {},
      el("b", {}, s.name),
      el("span", { class: "bar" }, fill),
      el("span", { class: "used" }, s.used + " of " + s.capacity + " used"),
      el("span", { class: "muted" }, s.waiters.length + " waiting"),
      el("span", { class: "muted" }, rate(s.grants_per_s) + " grants/s, " + rate(s.releases_per_s) + " releases/s"),
      s.controller ? el("span", { class: "controller" }, controllerText(s.controller)) : null,
      s.losses_per_s > 0 ? el("span", { class: "bad" }, rate(s.losses_per_s) + " lost/s") : null,
      el("button", { class: "small", onclick: () => setCapacity(s) }, "Set capacity…")),
    classes.length ? el("ul", { class: "classes" }, classes.map((c) => el("li", {}, classLine(c)))) : null,
    idle ? el("p", { class: "muted" }, "nobody holds a permit, nobody waits") : el("div", { class: "grid" },
      el("div", {}, el("h3", {}, "Holders"),
        table([H("owner"), H("permits", 1), H("token", 1), H("held for", 1)], s.holders.map(who), "nobody holds a permit")),
      el("div", {}, el("h3", {}, "Waiting, in queue order"),
        table([H("owner"), H("permits", 1), H("token", 1), H("waiting for", 1)], s.waiters.map(who), "nobody waits"))));
}

function chart(series, at) {
  const W = 900, Hh = 90, span = 900;
  const now = Math.floor(at / 1000);
  const max = Math.max(1, ...series.map((p) => p.admitted + p.denied));
  const x = (t) => ((t - (now - span)) / span) * W;
  const y = (v) => Hh - (v / max) * (Hh - 10);
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 " + W + " " + Hh);
  svg.setAttribute("class", "chart");
  svg.setAttribute("preserveAspectRatio", "none");
  for (const p of series) {
    const total = p.admitted + p.denied;
    const bar = (v0, v1, color) => {
      const r = document.createElementNS(svg.namespaceURI, "rect");
      r.setAttribute("x", x(p.unix_sec)); r.setAttribute("width", Math.max(1, W / span));
      r.setAttribute("y", y(v1)); r.setAttribute("height", Math.max(0, y(v0) - y(v1)));
      r.setAttribute("fill", color);
      svg.append(r);
    };
    bar(0, p.admitted, "#2da44e");
    bar(p.admitted, total, "#cf222e");
  }
  const label = document.createElementNS(svg.namespaceURI, "text");
  label.setAttribute("x", 4); label.setAttribute("y", 12); label.setAttribute("font-size", 11);
  label.textContent = "last 15 min; peak " + max + "/s (green admitted, red denied)";
  svg.append(label);
  return svg;
}

function renderRateLimit(r) {
  if (r.error) return el("div", { class: "card" }, el("b", {}, r.name), " ", el("span", { class: "error" }, r.error));
  const keyRow = (k) => [k.key, rate(k.denied_per_s), rate(k.checks_per_s), k.remaining + " / " + k.limit,
    dur(k.reset_ms), el("button", { class: "small", onclick: () => resetKey(r.name, k.key) }, "Reset…")];
  const fleetRow = (k) => [k.key, rate(k.denied_per_s), rate(k.checks_per_s), (k.sidecars || []).join(", "), leasedBy(k)];
  return el("div", { class: "card", "data-rate-limit": r.name },
    el("header", {},
      el("b", {}, r.name),
      el("code", {}, r.quota),
      el("span", {}, "this sidecar: ", el("span", { class: "ok" }, rate(r.admitted_per_s) + " admitted/s"), ", ",
        el("span", { class: r.denied_per_s > 0 ? "bad" : "" }, rate(r.denied_per_s) + " denied/s")),
      // Only sidecars publish rates: with none reporting this limit they are unknown, not 0.
      el("span", { class: "muted fleet-rates" }, r.fleet_reporters > 0
        ? "fleet (as " + r.fleet_reporters + " sidecar(s) report it): " + rate(r.fleet_admitted_per_s) + " admitted/s, " + rate(r.fleet_denied_per_s) + " denied/s"
        : "fleet: — (not published: only sidecars report rates; checks by the CLI or the library are not seen)"),
      el("button", { class: "small", onclick: () => setQuota(r) }, "Set quota…")),
    chart(r.series, last ? last.at_unix_ms : Date.now()),
    el("div", { class: "grid" },
      el("div", { class: "limited-now" }, el("h3", {}, "Denied in the last 10 s (this sidecar)"),
        table([H("key"), H("denied/s", 1), H("checks/s", 1), H("left", 1), H("full in", 1), H("")],
          r.limited_now.map(keyRow), "no key denied in the last 10 s")),
      el("div", {}, el("h3", {}, "Near the limit"),
        table([H("key"), H("denied/s", 1), H("checks/s", 1), H("left", 1), H("full in", 1), H("")],
          r.near_limit.map(keyRow), "no key near its limit")),
      el("div", { class: "fleet-keys" }, el("h3", {}, "Denied in the last 10 s or leased now (fleet)"),
        table([H("key"), H("denied/s", 1), H("checks/s", 1), H("sidecars"), H("leased by")],
          r.fleet_limited_now.map(fleetRow), "no key denied anywhere in the last 10 s, none leased"))));
}

// "leased by 2 (340 units)", each holder and its units on hover; empty if nobody holds a lease.
function leasedBy(k) {
  const by = k.leased_by || [];
  if (!by.length) return "";
  const units = by.reduce((s, h) => s + h.units_left, 0);
  return el("span", { class: "leased", title: by.map((h) => h.holder + ": " + h.units_left + " units left").join("\n") },
    "leased by " + by.length + " (" + units + " units)");
}

function renderRls(domains) {
  if (!domains.length) return el("p", { class: "muted" }, "no Envoy requests yet (or no RLS configured)");
  return el("div", {}, domains.map((d) => el("div", {}, el("h3", {}, "domain " + d.domain),
    table([H("rule"), H("hits", 1), H("over limit", 1)], d.rules.map((x) => [x.rule, x.hits, x.over_limit]), ""))));
}

function renderFleet(members) {
  return table([H("sidecar"), H("reported", 1), H("admitted/s", 1), H("denied/s", 1), H("limits")],
    members.map((m) => {
      const a = m.limits.reduce((s, l) => s + l.admitted_per_s, 0);
      const d = m.limits.reduce((s, l) => s + l.denied_per_s, 0);
      return [m.owner, dur(Math.max(0, Date.now() - m.at_unix_ms)) + " ago", rate(a), rate(d), m.limits.map((l) => l.name).join(", ")];
    }), "no sidecar has published a summary");
}

// --- changes, each confirmed in a dialog ----------------------------------------------------
function dialog(title, body, onConfirm, okLabel) {
  $("dialog-title").textContent = title;
  $("dialog-body").replaceChildren(...[].concat(body));
  $("dialog-error").textContent = "";
  $("dialog-ok").textContent = okLabel || "Confirm";
  $("dialog-ok").disabled = false;
  $("dialog").hidden = false;
  $("dialog-ok").onclick = async () => {
    $("dialog-ok").disabled = true;
    try {
      const done = await onConfirm();
      if (done !== false) $("dialog").hidden = true;
    } catch (e) {
      $("dialog-error").textContent = e.message;
    }
    $("dialog-ok").disabled = false;
  };
}
$("dialog-cancel").addEventListener("click", () => { $("dialog").hidden = true; });

function setCapacity(s) {
  const input = el("input", { id: "capacity-input", type: "number", min: "1", value: String(s.capacity) });
  dialog("Set the capacity of " + s.name,
    [el("p", {}, "Now " + s.capacity + " (" + s.used + " used). Shrinking never revokes a permit: holders keep theirs."),
      el("label", {}, "New capacity ", input)],
    () => api("PUT", "/v1/semaphores/" + encodeURIComponent(s.name), { capacity: Number(input.value) }));
}

function setQuota(r) {
  const limit = el("input", { id: "quota-limit", type: "number", min: "1", value: String(r.limit) });
  const period = el("input", { id: "quota-period", value: dur(r.period_ms).replace(" ", "") });
  const burst = el("input", { id: "quota-burst", type: "number", min: "1", value: String(r.burst) });
  const algo = el("select", { id: "quota-algorithm" },
    ["gcra", "sliding_window", "fixed_window"].map((a) => {
      const o = el("option", { value: a }, a);
      if (a === r.algorithm.replace("-", "_")) o.selected = true;
      return o;
    }));
  const out = el("div", { id: "quota-preview" });
  let previewed = null;
  const body = () => {
    const b = { limit: Number(limit.value), period: period.value.trim(), algorithm: algo.value };
    if (algo.value === "gcra" && burst.value) b.burst = Number(burst.value);
    return b;
  };
  for (const i of [limit, period, burst, algo]) i.addEventListener("input", () => {
    previewed = null; $("dialog-ok").textContent = "Preview";
  });
  dialog("Set the quota of " + r.name,
    [el("p", {}, "Now ", el("code", {}, r.quota)),
      el("p", {}, el("label", {}, "limit ", limit), " per ", el("label", {}, period),
        " ", algo, " ", el("label", {}, "burst ", burst)),
      out],
    async () => {
      const b = body();
      const key = JSON.stringify(b);
      if (previewed !== key) {
        const p = await api("POST", "/v1/ratelimits/" + encodeURIComponent(r.name) + "/preview", b);
        const v = p.preview;
        out.replaceChildren(
          el("p", {}, "Replayed the last " + v.seconds + " s of " + v.keys + " keys (" + v.checks + " checks): ",
            el("b", { id: "preview-denied" }, v.denied_proposed + " denied"), " with ", el("code", {}, p.proposed),
            ", against " + v.denied_current + " with the current quota (" + v.denied_recorded + " recorded)."),
          table([H("key"), H("checks", 1), H("denied now", 1), H("denied after", 1)],
            v.changed.map((c) => [c.key, c.checks, c.denied_current, c.denied_proposed]), ""));
        previewed = key;
        $("dialog-ok").textContent = "Apply";
        return false; // keep the dialog open: apply is a second, informed click
      }
      await api("PUT", "/v1/ratelimits/" + encodeURIComponent(r.name), b);
    }, "Preview");
}

function resetKey(name, key) {
  dialog("Reset key " + key + " of " + name,
    el("p", {}, "The key's state is deleted: it starts full (its ban, if any, ends)."),
    () => api("DELETE", "/v1/ratelimits/" + encodeURIComponent(name) + "/keys/" + encodeURIComponent(key)));
}

$("filter").addEventListener("input", () => { if (last) render(last); });

start().catch((e) => { $("status").textContent = "cannot reach the sidecar: " + e.message; });
