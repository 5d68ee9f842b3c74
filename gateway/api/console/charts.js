// kvgate console: Prometheus text parsing, rates and quantiles over sampled /metrics, and small
// inline-SVG line charts. Pure functions over the samples the page keeps ({t: ms, m: parsed}).
// Loaded before console.js; exposes window.KvgateCharts.
"use strict";

window.KvgateCharts = (() => {
  const SVG = "http://www.w3.org/2000/svg";
  const HISTORY_MS = 15 * 60 * 1000;

  function parseMetrics(text) {
    const out = new Map(); // name -> [{labels, value}]
    for (const line of text.split("\n")) {
      if (!line || line[0] === "#") continue;
      const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
      if (!match) continue;
      const labels = {};
      if (match[3]) {
        for (const pair of match[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]] = pair[2];
      }
      if (!out.has(match[1])) out.set(match[1], []);
      out.get(match[1]).push({ labels, value: parseFloat(match[4]) });
    }
    return out;
  }
  function total(m, name, by) {
    // sum of a family's samples, optionally grouped by a label (or a function of the labels) -> Map
    const rows = m.get(name) || [];
    if (!by) return rows.reduce((acc, r) => acc + r.value, 0);
    const groups = new Map();
    for (const r of rows) {
      const k = typeof by === "function" ? by(r.labels) : r.labels[by];
      groups.set(k, (groups.get(k) || 0) + r.value);
    }
    return groups;
  }
  function sum(m, name, filter) {
    return (m.get(name) || []).filter((r) => !filter || filter(r.labels)).reduce((acc, r) => acc + r.value, 0);
  }
  function buckets(m, name) {
    const byLe = total(m, name + "_bucket", "le");
    return [...byLe.entries()].map(([le, c]) => [le === "+Inf" ? Infinity : parseFloat(le), c]).sort((a, b) => a[0] - b[0]);
  }
  function quantile(q, before, after) {
    // Prometheus' histogram_quantile over the bucket increase between two samples
    const inc = after.map(([le, c], i) => [le, c - (before[i] ? before[i][1] : 0)]);
    const count = inc.length ? inc[inc.length - 1][1] : 0;
    if (count <= 0) return null;
    const rank = q * count;
    let lower = 0, prev = 0;
    for (const [le, c] of inc) {
      if (c >= rank) {
        if (le === Infinity) return lower;
        return lower + (le - lower) * ((rank - prev) / Math.max(c - prev, 1e-12));
      }
      lower = le; prev = c;
    }
    return lower;
  }
  function series(samples, fn, windowMs = 60000) {
    // one point per sample: fn(earlier sample, this sample, seconds between) over a sliding window
    const points = [];
    for (let i = 1; i < samples.length; i++) {
      let j = i - 1;
      while (j > 0 && samples[i].t - samples[j - 1].t <= windowMs) j--;
      const v = fn(samples[j].m, samples[i].m, (samples[i].t - samples[j].t) / 1000);
      if (v !== null && v !== undefined && !Number.isNaN(v)) points.push([samples[i].t, v]);
    }
    return points;
  }
  const rate = (name, filter) => (a, b, dt) => (sum(b, name, filter) - sum(a, name, filter)) / dt;
  const quantileOf = (name, p) => (a, b) => quantile(p, buckets(a, name), buckets(b, name));

  function s(tag, attrs) {
    const el = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs || {})) el.setAttribute(name, String(value));
    return el;
  }
  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function chart(samples, title, lines, unit) {
    // a card with a line chart of `lines` ([{name, points: [[t, v]]}]) and a legend of the last values
    const W = 340, H = 120, L = 44, B = 18;
    const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": title });
    // the x axis spans the samples held: from the page's first sample (at most 15 minutes ago) to now
    const now = Date.now(), t0 = Math.min(now - 30000, Math.max(now - HISTORY_MS, samples.length ? samples[0].t : now));
    const span = now - t0;
    const all = lines.flatMap((l) => l.points.map((p) => p[1]));
    const max = Math.max(1e-9, ...all) * 1.1;
    const x = (t) => L + ((t - t0) / span) * (W - L - 4);
    const y = (v) => H - B - (v / max) * (H - B - 6);
    svg.append(s("line", { x1: L, y1: H - B, x2: W - 4, y2: H - B, class: "axis" }));
    svg.append(s("line", { x1: L, y1: 6, x2: L, y2: H - B, class: "axis" }));
    const label = (text, xx, yy, anchor) => {
      const t = s("text", { x: xx, y: yy, "text-anchor": anchor || "start", class: "tick" });
      t.textContent = text;
      return t;
    };
    svg.append(label(unit(max / 1.1), L - 3, 12, "end"), label(unit(0), L - 3, H - B, "end"),
      label(span >= 60000 ? `-${Math.round(span / 60000)} min` : `-${Math.round(span / 1000)} s`, L, H - 4),
      label("now", W - 4, H - 4, "end"));
    lines.forEach((line, i) => {
      if (line.points.length === 0) return;
      const d = line.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
      svg.append(s("polyline", { points: d, class: "line s" + (i % 6) }));
      if (line.points.length < 3) {
        for (const p of line.points) svg.append(s("circle", { cx: x(p[0]).toFixed(1), cy: y(p[1]).toFixed(1), r: 2, class: "dot s" + (i % 6) }));
      }
    });
    const legend = el("div", "legend");
    lines.forEach((line, i) => {
      const last = line.points.length ? line.points[line.points.length - 1][1] : null;
      legend.append(el("span", "key s" + (i % 6), `${line.name}: ${last === null ? "–" : unit(last)}`));
    });
    const card = el("div", "card chart-card");
    card.append(el("h3", "", title), svg, legend);
    return card;
  }
  const units = {
    rps: (v) => v.toFixed(v < 10 ? 2 : 0) + "/s",
    s: (v) => (v < 1 ? (1000 * v).toFixed(0) + " ms" : v.toFixed(2) + " s"),
    n: (v) => v.toFixed(v < 10 ? 2 : 0),
  };

  return { HISTORY_MS, parseMetrics, total, series, rate, quantileOf, chart, units };
})();
