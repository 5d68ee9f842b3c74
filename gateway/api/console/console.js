// kvgate's operator console: plain JavaScript, no build step, no third-party code.
// Reads only the admin API and /metrics. The admin key lives in this tab's sessionStorage and is
// sent as "Authorization: Bearer" on every call; never in a URL or a cookie. Every value from the
// gateway is put in the page as text (textContent), never as HTML.
"use strict";

(() => {
  const KEY = "kvgate.adminKey";
  const POLL_MS = 5000;
  const VIEWS = ["endpoints", "traffic", "requests", "keys", "workers"];
  const samples = []; // {t, m: parsed /metrics}, the last 15 minutes
  let current = "endpoints";
  let timer = null;
  let recent = []; // the last /admin/requests answer's records
  let openExplain = null;

  // ---- DOM helpers -------------------------------------------------------------------------
  const $ = (id) => document.getElementById(id);
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
      else el.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }
  const fmt = {
    num: (v, d = 0) => (v === null || v === undefined || Number.isNaN(v) ? "–" : Number(v).toFixed(d)),
    pct: (v) => (v === null || v === undefined || Number.isNaN(v) ? "–" : (100 * v).toFixed(1) + " %"),
    ms: (v) => (v === null || v === undefined ? "–" : (1000 * v).toFixed(v < 0.01 ? 2 : 0) + " ms"),
    usd: (v) => (v === null || v === undefined ? "–" : "$" + Number(v).toFixed(v && v < 0.01 ? 6 : 4)),
    time: (unix) => new Date(unix * 1000).toLocaleTimeString(),
  };
  function table(headers, rows, attrs) {
    return h("table", attrs || {},
      h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))),
      h("tbody", {}, rows));
  }
  function replace(el, ...children) { el.replaceChildren(...children.flat()); }
  function badge(text, kind) { return h("span", { class: "badge " + (kind || "") }, text); }

  // ---- the admin API -------------------------------------------------------------------------
  class Unauthorized extends Error {}
  class NotFound extends Error {}

  async function api(path, options = {}) {
    const headers = { Accept: "application/json", ...(options.headers || {}) };
    const key = sessionStorage.getItem(KEY);
    if (key) headers.Authorization = "Bearer " + key;
    if (options.body !== undefined) headers["Content-Type"] = "application/json";
    const reply = await fetch(path, {
      method: options.method || "GET", headers, credentials: "omit", cache: "no-store",
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
    });
    if (reply.status === 401) throw new Unauthorized(path);
    const text = await reply.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (_) { body = text; }
    if (reply.status === 404 && options.allow404) throw new NotFound(path);
    if (!reply.ok) {
      const message = body && body.error ? body.error.message : reply.status + " " + reply.statusText;
      throw new Error(`${options.method || "GET"} ${path}: ${message}`);
    }
    if (body && body.replica) showReplica(body.replica);
    return body;
  }
  function showReplica(replica) {
    $("replica").textContent = "answered by replica " + replica.id;
  }
  function banner(text, kind) {
    const el = $("banner");
    el.textContent = text || "";
    el.className = "banner " + (kind || "");
    el.hidden = !text;
  }

  // ---- sign-in -------------------------------------------------------------------------------
  function signedOut(message) {
    stopPolling();
    $("app").hidden = true;
    $("signin").hidden = false;
    $("signout").hidden = true;
    if (message) banner(message, "error");
    $("admin-key").focus();
  }
  async function probeWithoutKey() {
    // The data calls need the admin key: show what the API answers without it.
    try {
      await api("/admin/endpoints");
      return true;
    } catch (error) {
      if (error instanceof Unauthorized) {
        signedOut("Not signed in: the admin API answered 401 Unauthorized. Enter the admin key to see the gateway.");
        return false;
      }
      signedOut("The admin API did not answer: " + error.message);
      return false;
    }
  }
  async function signIn(event) {
    event.preventDefault();
    const key = $("admin-key").value.trim();
    if (!key) return;
    sessionStorage.setItem(KEY, key);
    $("admin-key").value = "";
    try {
      await api("/admin/endpoints");
    } catch (error) {
      sessionStorage.removeItem(KEY);
      const message = error instanceof Unauthorized
        ? "401 Unauthorized: that is not the admin key." : error.message;
      $("signin-error").textContent = message;
      $("signin-error").hidden = false;
      return;
    }
    $("signin-error").hidden = true;
    started();
  }
  function started() {
    banner("");
    $("signin").hidden = true;
    $("app").hidden = false;
    $("signout").hidden = false;
    show(location.hash.slice(1));
    startPolling();
  }

  // ---- views and polling ---------------------------------------------------------------------
  function show(view) {
    current = VIEWS.includes(view) ? view : "endpoints";
    for (const name of VIEWS) $("view-" + name).hidden = name !== current;
    for (const a of document.querySelectorAll("#tabs a")) a.classList.toggle("active", a.dataset.view === current);
    refresh();
  }
  function startPolling() {
    stopPolling();
    timer = setInterval(refresh, POLL_MS);
  }
  function stopPolling() {
    if (timer !== null) clearInterval(timer);
    timer = null;
  }
  async function refresh() {
    if (!sessionStorage.getItem(KEY)) return;
    try {
      await sample();
      if (editing()) return; // never redraw under an operator typing a weight or a filter
      await RENDER[current]();
      if (!$("banner").classList.contains("info")) banner("");
      document.body.dataset.loaded = current;
    } catch (error) {
      if (error instanceof Unauthorized) {
        sessionStorage.removeItem(KEY);
        signedOut("The admin API answered 401 Unauthorized: the admin key was refused. Sign in again.");
      } else {
        banner(error.message, "error");
      }
    }
  }

  function editing() {
    const el = document.activeElement;
    return el !== null && el.matches("#clusters input") && el.value !== el.defaultValue;
  }

  // ---- /metrics: sampled every poll, 15 minutes kept (charts.js parses and draws) -------------
  const C = window.KvgateCharts;
  async function sample() {
    const now = Date.now();
    if (samples.length && now - samples[samples.length - 1].t < POLL_MS / 2) return;
    const reply = await fetch("/metrics", { credentials: "omit", cache: "no-store" });
    if (!reply.ok) return; // metrics may be disabled: the charts stay empty
    samples.push({ t: now, m: C.parseMetrics(await reply.text()) });
    while (samples.length && now - samples[0].t > C.HISTORY_MS) samples.shift();
  }
  const series = (fn) => C.series(samples, fn);
  const chart = (title, lines, unit) => C.chart(samples, title, lines, unit);
  const { rate, total, units } = C;
  const q = C.quantileOf;

  // ---- Endpoints -----------------------------------------------------------------------------
  async function renderEndpoints() {
    const [endpoints, clusters, workers, requests] = await Promise.all([
      api("/admin/endpoints"), api("/admin/clusters"), workerList(), api("/admin/requests?limit=1000"),
    ]);
    recent = requests.data;
    const dtype = new Map(workers.map((w) => [w.name, w.kv_cache_dtype]));
    const byCluster = new Map(clusters.data.map((c) => [c.name, []]));
    for (const e of endpoints.data) {
      if (!byCluster.has(e.cluster)) byCluster.set(e.cluster, []);
      byCluster.get(e.cluster).push(e);
    }
    const reported = new Map(), predicted = new Map(), prompt = new Map();
    for (const r of recent) {
      if (!r.endpoint || r.outcome !== "success" || !r.prompt_tokens) continue;
      prompt.set(r.endpoint, (prompt.get(r.endpoint) || 0) + r.prompt_tokens);
      reported.set(r.endpoint, (reported.get(r.endpoint) || 0) + (r.cached_tokens || 0));
      if (r.predicted_cached_tokens !== null) predicted.set(r.endpoint, (predicted.get(r.endpoint) || 0) + r.predicted_cached_tokens);
    }
    const ratio = (m, name) => (prompt.get(name) ? (m.get(name) || 0) / prompt.get(name) : null);
    const cards = [];
    for (const cluster of clusters.data) {
      const rows = (byCluster.get(cluster.name) || []).map((e) => endpointRow(e, dtype.get(e.name),
        ratio(reported, e.name), ratio(predicted, e.name)));
      cards.push(h("div", { class: "card cluster", "data-cluster": cluster.name },
        h("h3", {}, cluster.name, " ", h("span", { class: "muted small" },
          `${cluster.healthy}/${cluster.endpoints.length} routable · ${cluster.in_flight} in flight · ` +
          `$${cluster.price.input_per_mtok}/$${cluster.price.output_per_mtok} per 1M in/out`)),
        table(["endpoint", "source", "health", "circuit", "draining", "in flight", "queue (waiting/running)",
          "KV usage", "prefix hit: engine", "reported", "predicted", "dtype", "last error", ""], rows)));
    }
    replace($("clusters"), cards);
  }
  function endpointRow(e, dtype, reported, predicted) {
    const engine = e.engine || {};
    const kv = engine.kv_usage;
    const weight = h("input", { type: "number", min: "0.01", max: "1000", step: "any", value: e.weight,
      class: "weight", "aria-label": "weight of " + e.name });
    const act = (label, fn, cls) => h("button", { type: "button", class: cls || "", onclick: async () => {
      try { await fn(); await refresh(); } catch (error) { banner(error.message, "error"); }
    } }, label);
    const path = "/admin/endpoints/" + encodeURIComponent(e.name);
    return h("tr", { "data-endpoint": e.name },
      h("td", {}, h("strong", {}, e.name), h("div", { class: "muted small" }, e.url)),
      h("td", {}, e.source),
      h("td", {}, badge(e.health, e.health === "healthy" ? "ok" : "bad")),
      h("td", {}, badge(e.circuit, e.circuit === "closed" ? "ok" : "warn")),
      h("td", { class: "draining" }, e.draining ? badge("draining", "warn") : "no"),
      h("td", {}, e.in_flight),
      h("td", {}, e.engine ? `${fmt.num(engine.waiting)} / ${fmt.num(engine.running)}` : "–"),
      h("td", { class: "nowrap" }, kv === null || kv === undefined ? "–" : [h("meter", { min: 0, max: 1, low: 0.7, high: 0.9, optimum: 0, value: kv }), " ", fmt.pct(kv)]),
      h("td", { class: "hit-engine" }, fmt.pct(engine.prefix_hit_rate)),
      h("td", { class: "hit-reported" }, fmt.pct(reported)),
      h("td", { class: "hit-predicted" }, fmt.pct(predicted)),
      h("td", {}, dtype || "–"),
      h("td", { class: "small" }, e.last_error || ""),
      h("td", { class: "actions" },
        e.draining ? act("Undrain", () => api(path + "/undrain", { method: "POST" }), "undrain")
          : act("Drain", () => api(path + "/drain", { method: "POST" }), "drain"),
        weight,
        act("Set weight", () => api(path, { method: "PATCH", body: { weight: parseFloat(weight.value) } }), "set-weight")));
  }
  async function workerList() {
    try { return (await api("/admin/workers", { allow404: true })).data; } catch (error) {
      if (error instanceof NotFound) return [];
      throw error;
    }
  }

  // ---- Traffic -------------------------------------------------------------------------------
  async function renderTraffic() {
    await api("/admin/requests?limit=1"); // says which replica answered
    const requests = "kvgate_requests_total";
    const ok = (l) => l.outcome === "success";
    const charts = [
      chart("Requests per second", [
        { name: "all", points: series(rate(requests)) },
        { name: "errors", points: series(rate(requests, (l) => l.outcome === "client_error" || l.outcome === "upstream_error")) },
      ], units.rps),
      chart("TTFT (streams)", [
        { name: "p50", points: series(q("kvgate_time_to_first_token_seconds", 0.5)) },
        { name: "p99", points: series(q("kvgate_time_to_first_token_seconds", 0.99)) },
      ], units.s),
      chart("E2E latency", [
        { name: "p50", points: series(q("kvgate_request_duration_seconds", 0.5)) },
        { name: "p99", points: series(q("kvgate_request_duration_seconds", 0.99)) },
      ], units.s),
      chart("Failovers, retries, continuations per second", [
        { name: "failovers", points: series(rate("kvgate_failovers_total")) },
        { name: "retries", points: series(rate("kvgate_retries_total")) },
        { name: "continuations", points: series(rate("kvgate_stream_continuations_total")) },
      ], units.rps),
      chart("Answered per second, by cluster", clusterLines(requests, ok), units.rps),
    ];
    replace($("charts"), charts);
    const first = samples.length ? samples[0].m : new Map(), last = samples.length ? samples[samples.length - 1].m : new Map();
    const delta = (name, by) => {
      const a = total(first, name, by), b = total(last, name, by);
      return [...b.entries()].map(([k, v]) => [k, v - (a.get(k) || 0), v]);
    };
    const errors = delta("kvgate_request_errors_total", (l) => `${l.error_type}|${l.cluster}`);
    const windowName = "while open (≤ 15 min)";
    replace($("errors-table"), errors.length ? table(["class", "cluster", windowName, "since start"],
      errors.map(([k, d, t]) => { const [cls, cl] = k.split("|"); return h("tr", {}, h("td", {}, cls), h("td", {}, cl || "–"), h("td", {}, d), h("td", {}, t)); }))
      : h("p", { class: "muted" }, "No errors counted."));
    const routes = delta("kvgate_route_selections_total", (l) => `${l.model}|${l.cluster}|${l.reason}`);
    replace($("routes-table"), routes.length ? table(["model", "cluster", "reason", windowName, "since start"],
      routes.sort((a, b) => b[2] - a[2]).map(([k, d, t]) => { const [m, c, r] = k.split("|"); return h("tr", {}, h("td", {}, m), h("td", {}, c), h("td", {}, r), h("td", {}, d), h("td", {}, t)); }))
      : h("p", { class: "muted" }, "No route selections yet."));
  }
  function clusterLines(name, filter) {
    const last = samples.length ? samples[samples.length - 1].m : new Map();
    const clusters = [...new Set((last.get(name) || []).map((r) => r.labels.cluster).filter(Boolean))];
    return clusters.map((c) => ({ name: c, points: series(rate(name, (l) => l.cluster === c && filter(l))) }));
  }

  // ---- Requests ------------------------------------------------------------------------------
  async function renderRequests() {
    const answer = await api("/admin/requests?limit=500");
    recent = answer.data;
    $("requests-note").textContent = `this replica's last ${answer.held} of at most ${answer.size} (replica ${answer.replica.id})`;
    const clusterSelect = $("filter-cluster");
    const known = new Set([...clusterSelect.options].map((o) => o.value));
    for (const r of recent) if (r.cluster && !known.has(r.cluster)) { known.add(r.cluster); clusterSelect.append(h("option", { value: r.cluster }, r.cluster)); }
    drawRequests();
  }
  function drawRequests() {
    const text = $("filter-text").value.trim().toLowerCase();
    const outcome = $("filter-outcome").value, cluster = $("filter-cluster").value;
    const rows = recent.filter((r) => (!outcome || r.outcome === outcome) && (!cluster || r.cluster === cluster) &&
      (!text || [r.id, r.key, r.model, r.route, r.reason, r.cluster, r.endpoint, r.error].some((v) => v && String(v).toLowerCase().includes(text))));
    replace($("requests-table"), rows.length ? table(
      ["time", "id", "key", "model", "route / reason", "cluster", "endpoint", "attempts", "cached / prompt", "out", "cost", "TTFT", "E2E", "status"],
      rows.map((r) => h("tr", { class: "clickable " + (r.outcome === "success" ? "" : "failed"), "data-request-id": r.id,
        title: "Show the scheduling explanation", onclick: () => explain(r.id) },
        h("td", {}, fmt.time(r.at)), h("td", { class: "mono" }, r.id), h("td", {}, r.key || "–"), h("td", {}, r.model),
        h("td", {}, r.route || "–", h("div", { class: "muted small" }, r.reason || "")), h("td", {}, r.cluster || "–"),
        h("td", {}, r.endpoint || "–"), h("td", {}, r.attempts), h("td", {}, `${fmt.num(r.cached_tokens)} / ${fmt.num(r.prompt_tokens)}`),
        h("td", {}, fmt.num(r.completion_tokens)), h("td", {}, fmt.usd(r.cost_usd)), h("td", {}, fmt.ms(r.ttft_s)),
        h("td", {}, fmt.ms(r.e2e_s)), h("td", {}, badge(`${r.status} ${r.outcome}`, r.outcome === "success" ? "ok" : "bad")))),
      { id: "requests" }) : h("p", { class: "muted" }, recent.length ? "No request matches the filter." : "No requests recorded by this replica yet."));
  }
  async function explain(id) {
    openExplain = id;
    let r;
    try { r = await api("/admin/requests/" + encodeURIComponent(id)); } catch (error) {
      if (error instanceof Unauthorized) throw error;
      banner(error.message, "error");
      return;
    }
    $("explain").hidden = false;
    $("explain-title").textContent = `Request ${r.id}`;
    const parts = [h("p", {}, `${r.model} → route ${r.route || "–"} → cluster ${r.cluster || "–"} → endpoint ${r.endpoint || "–"} ` +
      `· ${r.attempts} attempt(s) · ${r.status} ${r.outcome}${r.error ? " (" + r.error + ")" : ""} · TTFT ${fmt.ms(r.ttft_s)} · E2E ${fmt.ms(r.e2e_s)}`)];
    const sel = r.route_selection;
    if (sel) parts.push(h("p", {}, h("strong", {}, "Route selection: "), `clusters ${sel.clusters.join(" → ")}, reason ${sel.reason}` +
      (sel.need ? `, needs ${sel.need} (${sel.need_source})` : "") + (sel.thinking_off ? ", thinking switched off" : "")));
    const x = r.explanation;
    if (!x) parts.push(h("p", { class: "muted" }, "No scheduling decision: the request ended before an endpoint was chosen."));
    else {
      parts.push(h("p", {}, h("strong", {}, "Scheduling: "), x.profile ? `profile ${x.profile}, ` : "",
        x.prompt ? `prompt ${x.prompt.bytes} B in ${x.prompt.blocks} blocks of ${x.prompt.block_bytes} B` : "",
        x.scored === false ? " · the only routable endpoint: chosen without scoring" : ""));
      const scorers = [...new Set(x.endpoints.flatMap((e) => Object.keys(e.scores || {})))];
      parts.push(table(["rank", "endpoint", ...scorers, "total", "filtered", "matched blocks", "predicted cached", "in flight", "queue", "KV"],
        x.endpoints.map((e, i) => h("tr", { class: e.name === r.endpoint ? "chosen" : "" },
          h("td", {}, i + 1), h("td", {}, e.name),
          scorers.map((sc) => h("td", { class: "score nowrap" }, e.scores && sc in e.scores ? scoreCell(e.scores[sc]) : "–")),
          h("td", {}, fmt.num(e.total, 3)), h("td", {}, e.filtered ? "yes" : ""), h("td", {}, fmt.num(e.matched_blocks)),
          h("td", {}, fmt.num(e.predicted_cached_tokens)), h("td", {}, fmt.num(e.in_flight)), h("td", {}, fmt.num(e.waiting)),
          h("td", {}, fmt.pct(e.kv_usage)))), { id: "explain-table" }));
    }
    replace($("explain-body"), parts);
  }
  function scoreCell(v) {
    return [h("meter", { min: 0, max: 1, value: v }), " ", v.toFixed(3)];
  }

  // ---- Keys ----------------------------------------------------------------------------------
  async function renderKeys() {
    await api("/admin/requests?limit=1");
    const keys = (await api("/admin/keys")).data;
    const details = await Promise.all(keys.map(async (k) => {
      const [one, usage] = await Promise.all([api("/admin/keys/" + k.id), api(`/admin/keys/${k.id}/usage?days=1`)]);
      const today = usage.data.reduce((acc, row) => {
        for (const f of ["requests", "errors", "input_tokens", "cached_tokens", "output_tokens", "cost_usd"]) acc[f] = (acc[f] || 0) + row[f];
        return acc;
      }, {});
      return { k, spent: one.spent_usd_this_period, today };
    }));
    replace($("keys-table"), keys.length ? table(
      ["name", "id / prefix", "source", "models", "RPM", "TPM", "budget", "spent this period", "today: requests", "errors", "tokens in (cached) / out", "cost today"],
      details.map(({ k, spent, today }) => {
        const l = k.limits;
        return h("tr", { class: k.revoked ? "failed" : "" },
          h("td", {}, k.name, k.revoked ? " (revoked)" : ""), h("td", { class: "mono small" }, k.id, h("div", {}, k.prefix)),
          h("td", {}, k.source), h("td", {}, l.models ? l.models.join(", ") : "all"),
          h("td", {}, l.rpm || "–"), h("td", {}, l.tpm || "–"),
          h("td", {}, l.budget_usd ? `$${l.budget_usd} / ${l.budget_period}` : "–"),
          h("td", { class: "nowrap" }, fmt.usd(spent), l.budget_usd ? [" ", h("meter", { min: 0, max: l.budget_usd, high: 0.8 * l.budget_usd, value: spent })] : ""),
          h("td", {}, today.requests || 0), h("td", {}, today.errors || 0),
          h("td", {}, `${today.input_tokens || 0} (${today.cached_tokens || 0}) / ${today.output_tokens || 0}`),
          h("td", {}, fmt.usd(today.cost_usd || 0)));
      })) : h("p", { class: "muted" }, "No API keys: the gateway accepts any client (auth is off)."));
  }

  // ---- Workers -------------------------------------------------------------------------------
  async function renderWorkers() {
    await api("/admin/requests?limit=1");
    let workers;
    try { workers = (await api("/admin/workers", { allow404: true })).data; } catch (error) {
      if (!(error instanceof NotFound)) throw error;
      replace($("workers-table"), h("p", { class: "muted" },
        "This gateway supervises no workers (kvgate serve). `kvgate up` runs managed vLLM workers and shows them here."));
      return;
    }
    replace($("workers-table"), table(
      ["worker", "phase", "goal", "pid", "restarts", "since", "KV dtype", "KV tokens planned / reported", "endpoint", "last error", ""],
      workers.map((w) => h("tr", { "data-worker": w.name },
        h("td", {}, h("strong", {}, w.name), h("div", { class: "muted small" }, w.url)),
        h("td", {}, badge(w.phase, w.phase === "ready" ? "ok" : w.phase === "failed" ? "bad" : "warn")),
        h("td", {}, w.goal), h("td", {}, w.pid || "–"), h("td", {}, w.restarts), h("td", {}, fmt.time(w.since_unix)),
        h("td", {}, w.kv_cache_dtype || "–"),
        h("td", {}, w.kv_capacity ? `${fmt.num(w.kv_capacity.planned_tokens)} / ${fmt.num(w.kv_capacity.reported_tokens)}` : "–"),
        h("td", {}, w.endpoint ? `${w.endpoint.health}${w.endpoint.draining ? ", draining" : ""}, ${w.endpoint.in_flight} in flight` : "–"),
        h("td", { class: "small" }, lastLine(w.last_error)),
        h("td", {}, h("button", { type: "button", onclick: () => workerLog(w.name) }, "Log tail"))))));
  }
  function lastLine(text) {
    if (!text) return "";
    const lines = String(text).trim().split("\n");
    return lines[lines.length - 1];
  }
  async function workerLog(name) {
    const log = await api(`/admin/workers/${encodeURIComponent(name)}/log?lines=80`);
    $("worker-log").hidden = false;
    $("worker-log-title").textContent = `Log of ${name} (${log.path || "no file"})`;
    $("worker-log-body").textContent = log.lines.join("\n");
  }

  const RENDER = { endpoints: renderEndpoints, traffic: renderTraffic, requests: renderRequests, keys: renderKeys, workers: renderWorkers };

  // ---- start ---------------------------------------------------------------------------------
  document.addEventListener("DOMContentLoaded", async () => {
    $("signin-form").addEventListener("submit", signIn);
    $("signout").addEventListener("click", () => { sessionStorage.removeItem(KEY); signedOut("Signed out."); });
    window.addEventListener("hashchange", () => show(location.hash.slice(1)));
    for (const id of ["filter-text", "filter-outcome", "filter-cluster"]) $(id).addEventListener("input", drawRequests);
    $("explain-close").addEventListener("click", () => { $("explain").hidden = true; openExplain = null; });
    $("worker-log-close").addEventListener("click", () => { $("worker-log").hidden = true; });
    if (sessionStorage.getItem(KEY)) started();
    else await probeWithoutKey();
  });
})();
