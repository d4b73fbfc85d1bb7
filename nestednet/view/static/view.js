// NestedNet live view: draws the snapshots the server sends (nestednet/view/state.py).
// All figures are computed on the server; this file only draws and asks for details.
"use strict";

const CLASS_COLOURS = {
  "run, shaped": "#1565c0", "run, unshaped": "#42a5f5",
  "manual, shaped": "#6a1b9a", "manual, unshaped": "#ab47bc",
};
const view = {
  mode: "live", live: null, shown: null, selection: null, playing: null,
  renders: 0, renderTimes: [], renderMs: [], snapshots: 0, figuresAt: 0, figuresLater: null,
  nodesDrawn() { return drawnCount("nodes"); },
  select(what) { select(what); },
  linksDrawn() { return drawnCount("link ends"); },
};
window.nnView = view;
const $ = (id) => document.getElementById(id);

function drawnCount(name) {
  const el = $("scene");
  if (!el || !el.data) return 0;
  const trace = el.data.find((t) => t.name === name);
  return trace ? trace.x.length : 0;
}

function fmt(x, digits = 1) {
  if (x === null || x === undefined) return "–";
  return Number(x).toFixed(digits);
}

function esc(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function rate(bps) {
  if (bps === null || bps === undefined) return "unlimited";
  if (bps >= 1e9) return fmt(bps / 1e9, 2) + " Gbit/s";
  if (bps >= 1e6) return fmt(bps / 1e6, 2) + " Mbit/s";
  return fmt(bps / 1e3, 1) + " kbit/s";
}

function props(p) {
  if (!p) return "unshaped";
  const parts = [rate(p.rate_bps)];
  if (p.delay_us) parts.push(fmt(p.delay_us / 1000, 2) + " ms" +
                             (p.jitter_us ? " ± " + fmt(p.jitter_us / 1000, 2) : ""));
  if (p.loss_pct) parts.push(fmt(p.loss_pct, 2) + " % loss");
  return parts.join(", ");
}

// --- the 3-D scene ---------------------------------------------------------------

function globeTraces(radius) {
  const us = [], vs = [];
  for (let i = 0; i <= 36; i++) us.push((i / 36) * 2 * Math.PI);
  for (let j = 0; j <= 18; j++) vs.push((j / 18) * Math.PI);
  const x = vs.map((v) => us.map((u) => radius * Math.cos(u) * Math.sin(v)));
  const y = vs.map((v) => us.map((u) => radius * Math.sin(u) * Math.sin(v)));
  const z = vs.map((v) => us.map(() => radius * Math.cos(v)));
  const sphere = { type: "surface", name: "Earth", x, y, z, showscale: false, opacity: 0.55,
                   colorscale: [[0, "#9ec9e8"], [1, "#5f9fcf"]], hoverinfo: "skip",
                   lighting: { ambient: 0.9, diffuse: 0.3 }, showlegend: false };
  const gx = [], gy = [], gz = [];
  for (let lat = -60; lat <= 60; lat += 30) {
    for (let lon = 0; lon <= 360; lon += 10) {
      const a = (lat * Math.PI) / 180, b = (lon * Math.PI) / 180;
      gx.push(radius * Math.cos(a) * Math.cos(b)); gy.push(radius * Math.cos(a) * Math.sin(b));
      gz.push(radius * Math.sin(a));
    }
    gx.push(null); gy.push(null); gz.push(null);
  }
  for (let lon = 0; lon < 360; lon += 30) {
    for (let lat = -90; lat <= 90; lat += 10) {
      const a = (lat * Math.PI) / 180, b = (lon * Math.PI) / 180;
      gx.push(radius * Math.cos(a) * Math.cos(b)); gy.push(radius * Math.cos(a) * Math.sin(b));
      gz.push(radius * Math.sin(a));
    }
    gx.push(null); gy.push(null); gz.push(null);
  }
  const grid = { type: "scatter3d", mode: "lines", name: "graticule", x: gx, y: gy, z: gz,
                 line: { color: "rgba(255,255,255,0.6)", width: 1 }, hoverinfo: "skip",
                 showlegend: false };
  return [sphere, grid];
}

function segments(pairs, pos) {
  const x = [], y = [], z = [];
  for (const [a, b] of pairs) {
    const p = pos[a], q = pos[b];
    if (!p || !q) continue;
    x.push(p[0], q[0], null); y.push(p[1], q[1], null); z.push(p[2], q[2], null);
  }
  return { x, y, z };
}

function linkValue(link, colour) {
  if (colour === "delay") return link.delay_ms;
  if (colour === "rate") return link.rate_mbps;
  return null;
}

function colourScale(colour, values) {
  const scale = { colorscale: colour === "rate" ? "Viridis" : "Plasma",
                  cmin: Math.min(...values), cmax: Math.max(...values), showscale: true,
                  colorbar: { title: { text: colour === "rate" ? "Mbit/s" : "ms" }, len: 0.5,
                              thickness: 12, x: 0.98 } };
  if (scale.cmin === scale.cmax) { scale.cmin -= 1; scale.cmax += 1; }
  return scale;
}

function sceneTraces(snap) {
  const pos = {};
  for (const n of snap.nodes) pos[n.name] = n.position;
  const colour = $("colour").value;
  const traces = snap.globe_radius ? globeTraces(snap.globe_radius) : [];
  if ($("show-visible").checked && snap.visible.length) {
    const s = segments(snap.visible.map((v) => [v.a, v.b]), pos);
    const line = { color: "rgba(70,80,92,0.5)", width: 2.5 };
    // A scenario alone has no links: colour what it would give each visible pair.
    const vals = snap.visible.map((v) => linkValue(v, colour));
    if (!snap.links.length && colour !== "class" && vals.some((v) => v !== null)) {
      const known = vals.filter((v) => v !== null);
      Object.assign(line, colourScale(colour, known), { width: 4,
        color: vals.flatMap((v) => [v, v, null]) });
    }
    traces.push({ type: "scatter3d", mode: "lines", name: "visible pairs", ...s, line,
                  hoverinfo: "skip", showlegend: !line.colorscale });
  }
  // Links: one trace per class, or one coloured by value (and grey for those without one).
  const groups = {};
  for (const link of snap.links) {
    let key = link.class;
    if (colour !== "class") key = linkValue(link, colour) === null ? "no " + colour : colour;
    (groups[key] = groups[key] || []).push(link);
  }
  const values = snap.links.map((l) => linkValue(l, colour)).filter((v) => v !== null);
  for (const [key, links] of Object.entries(groups)) {
    const s = segments(links.map((l) => [l.a, l.b]), pos);
    const line = { width: 6 };
    if (colour !== "class" && key === colour) {
      Object.assign(line, colourScale(colour, values));
      line.color = links.flatMap((l) => [linkValue(l, colour), linkValue(l, colour), null]);
    } else {
      line.color = CLASS_COLOURS[key] || "#90a4ae";
    }
    traces.push({ type: "scatter3d", mode: "lines", name: key + " (" + links.length + ")",
                  ...s, line, hoverinfo: "skip", showlegend: key !== colour });
  }
  // Link midpoints: what a click on a link hits.
  const mid = { x: [], y: [], z: [], text: [], customdata: [] };
  for (const l of snap.links) {
    const p = pos[l.a], q = pos[l.b];
    if (!p || !q) continue;
    mid.x.push((p[0] + q[0]) / 2); mid.y.push((p[1] + q[1]) / 2); mid.z.push((p[2] + q[2]) / 2);
    mid.customdata.push("link|" + l.a + "|" + l.b);
    mid.text.push(`${l.a}:iphy${l.a_iphy} ↔ ${l.b}:iphy${l.b_iphy}<br>${l.class}` +
                  `<br>${l.a}→${l.b}: ${props(l.properties && l.properties.a_to_b)}` +
                  `<br>${l.b}→${l.a}: ${props(l.properties && l.properties.b_to_a)}`);
  }
  traces.push({ type: "scatter3d", mode: "markers", name: "link ends", ...mid,
                marker: { size: 3, color: "#37474f", symbol: "diamond" },
                hovertemplate: "%{text}<extra></extra>", showlegend: false });
  const degree = {};
  for (const l of snap.links) { degree[l.a] = (degree[l.a] || 0) + 1; degree[l.b] = (degree[l.b] || 0) + 1; }
  const few = snap.nodes.length <= 40;
  traces.push({
    type: "scatter3d", mode: few ? "markers+text" : "markers", name: "nodes",
    x: snap.nodes.map((n) => n.position[0]), y: snap.nodes.map((n) => n.position[1]),
    z: snap.nodes.map((n) => n.position[2]), text: snap.nodes.map((n) => n.name),
    customdata: snap.nodes.map((n) => "node|" + n.name), textposition: "top center",
    textfont: { size: 11, color: "#1f2933" },
    marker: { size: few ? 7 : 5, line: { width: 1, color: "#ffffff" },
              color: snap.nodes.map((n) => (degree[n.name] ? "#ef6c00" : "#90a4ae")) },
    hovertemplate: "%{text}<br>%{customdata}<extra></extra>", showlegend: false,
  });
  return traces;
}

function sceneLayout(snap) {
  const zs = snap.nodes.map((n) => n.position[2]);
  const flat = !snap.globe_radius && zs.every((z) => z === zs[0]);
  const bare = snap.globe_radius || snap.positions_from === "circle";
  const axis = { showbackground: false, showgrid: !bare, zeroline: false,
                 visible: !bare, title: { text: "" },
                 gridcolor: "#e3e8ee", tickfont: { size: 9, color: "#8a96a3" } };
  return {
    uirevision: "keep", margin: { l: 0, r: 0, t: 0, b: 0 }, paper_bgcolor: "#ffffff",
    showlegend: true, legend: { x: 0.01, y: 0.99, bgcolor: "rgba(255,255,255,0.8)",
                                font: { size: 11 } },
    scene: { xaxis: axis, yaxis: axis, zaxis: axis,
             aspectmode: flat ? "manual" : "data",
             aspectratio: flat ? { x: 1, y: 1, z: 0.25 } : undefined,
             camera: { eye: flat ? { x: 0.05, y: -0.7, z: 1.5 }
                    : snap.globe_radius ? { x: 1.15, y: 1.0, z: 0.65 } : { x: 1.7, y: 1.5, z: 1.0 } } },
  };
}

const PLOT_CONFIG = { displaylogo: false, responsive: true,
                      modeBarButtonsToRemove: ["toImage", "sendDataToCloud"] };
const FIG_CONFIG = { displayModeBar: false, responsive: true };

// --- the figures -------------------------------------------------------------------

function figLayout(title, options) {
  const { dtick, ...extra } = options || {};
  return Object.assign({
    title: { text: title, font: { size: 12 }, x: 0.02, y: 0.95 },
    margin: { l: 36, r: 10, t: 26, b: 28 }, paper_bgcolor: "#ffffff", plot_bgcolor: "#ffffff",
    xaxis: { tickfont: { size: 9 }, title: { text: "" }, dtick,
             gridcolor: "#eef1f4" },
    yaxis: { tickfont: { size: 9 }, gridcolor: "#eef1f4", rangemode: "tozero" },
    showlegend: true, legend: { orientation: "h", x: 0, y: -0.16, font: { size: 9 } },
    uirevision: "keep", bargap: 0.2,
  }, extra || {});
}

function drawFigures(s) {
  const x = s.step;
  const dtick = Math.max(1, Math.ceil(x.length / 10));
  const empty = x.length ? {} : { annotations: [{ text: "no run steps yet", showarrow: false,
    xref: "paper", yref: "paper", x: 0.5, y: 0.5, font: { color: "#8a96a3", size: 12 } }],
    xaxis: { visible: false }, yaxis: { visible: false } };
  Plotly.react("fig-links", [
    { x, y: s.links, type: "scatter", mode: "lines+markers", name: "links up",
      line: { color: "#1565c0" }, marker: { size: 4 } },
    { x, y: s.links_down, type: "bar", name: "taken down", marker: { color: "#ef9a9a" } },
  ], figLayout(`Links (${s.totals.links} now)`, { dtick, ...empty }), FIG_CONFIG);
  Plotly.react("fig-requests", [
    { x, y: s.requests, type: "bar", name: "requests", marker: { color: "#64b5f6" } },
    { x, y: s.refused, type: "bar", name: "refused", marker: { color: "#ffb74d" } },
  ], figLayout(`Requests (${s.totals.requests}, ${s.totals.refused} refused)`,
               { barmode: "overlay", dtick, ...empty }), FIG_CONFIG);
  Plotly.react("fig-latency", [
    { x, y: s.latency_p50_ms, type: "scatter", mode: "lines+markers", name: "p50",
      line: { color: "#2e7d32" }, marker: { size: 4 }, connectgaps: false },
    { x, y: s.latency_max_ms, type: "scatter", mode: "lines+markers", name: "max",
      line: { color: "#a5d6a7", dash: "dot" }, marker: { size: 3 } },
  ], figLayout(`Link-up latency, ms (p50 ${fmt(s.totals.latency_p50_ms)})`, { dtick, ...empty }), FIG_CONFIG);
  Plotly.react("fig-routes", [
    { x, y: s.route_changes, type: "bar", name: "route changes", marker: { color: "#ce93d8" } },
    { x, y: s.converged_s, type: "scatter", mode: "lines+markers", name: "converged, s",
      yaxis: "y2", line: { color: "#6a1b9a" }, marker: { size: 4 } },
  ], figLayout(`Route convergence (${s.totals.routes} changes)`, {
    yaxis2: { overlaying: "y", side: "right", tickfont: { size: 9 }, rangemode: "tozero",
              showgrid: false, visible: x.length > 0 }, dtick, ...empty,
  }), FIG_CONFIG);
}

// --- header, feed, slider ------------------------------------------------------------

function drawHeader(snap) {
  $("kind").textContent = snap.kind;
  $("title").textContent = snap.title;
  $("step").textContent = snap.step === null ? "–" : snap.step +
    (snap.steps_total ? " / " + (snap.steps_total - 1) : "");
  $("time").textContent = fmt(snap.time, 1);
  $("n-nodes").textContent = snap.nodes.length;
  $("n-links").textContent = snap.links.length;
  $("n-visible").textContent = snap.visible.length;
  $("n-events").textContent = snap.summary.totals.events;
  const mode = $("mode");
  if (view.mode === "replay") { mode.textContent = "replay"; mode.className = "badge replay"; }
  else if (snap.live) { mode.textContent = "live"; mode.className = "badge live"; }
  else { mode.textContent = "finished"; mode.className = "badge off"; }
}

function drawFeed(snap) {
  const items = snap.feed.slice().reverse().map((f) =>
    `<li class="${esc(f.event)}"><span class="t">${fmt(f.t, 1)}s</span>${esc(f.text)}</li>`);
  $("feed").innerHTML = items.join("") || '<li class="muted">no events yet</li>';
}

function drawSlider(snap) {
  const steps = snap.steps_seen || [];
  const bar = $("replay");
  bar.classList.toggle("hidden", steps.length === 0);
  const slider = $("slider");
  slider.max = Math.max(0, steps.length - 1);
  if (view.mode === "live") slider.value = slider.max;
  const i = Number(slider.value);
  const at = steps[i];
  $("slider-label").textContent = at ? `step ${at.step} · t = ${fmt(at.time, 1)} s` : "–";
}

function render(snap) {
  const began = performance.now();
  view.shown = snap;
  drawHeader(snap);
  Plotly.react("scene", sceneTraces(snap), sceneLayout(snap), PLOT_CONFIG);
  drawFeed(snap);
  drawSlider(snap);
  const now = performance.now();
  if (now - view.figuresAt > 1000 || view.mode === "replay") {
    drawFigures(snap.summary);
    view.figuresAt = now;
  } else if (!view.figuresLater) {
    // At most one figure redraw a second, but the last state always gets one.
    view.figuresLater = setTimeout(() => {
      view.figuresLater = null;
      drawFigures(view.shown.summary);
      view.figuresAt = performance.now();
    }, 1000 - (now - view.figuresAt));
  }
  view.renders += 1;
  view.renderTimes.push(now);
  view.renderMs.push(performance.now() - began);
  if (view.renderTimes.length > 5000) { view.renderTimes.shift(); view.renderMs.shift(); }
  document.body.dataset.nodes = snap.nodes.length;
  document.body.dataset.links = snap.links.length;
}

// --- details -------------------------------------------------------------------------

function table(rows, columns) {
  if (!rows || !rows.length) return '<p class="muted">none</p>';
  const head = columns.map(([, label]) => `<th>${esc(label)}</th>`).join("");
  const body = rows.map((r) => "<tr>" + columns.map(([key]) =>
    `<td>${esc(typeof key === "function" ? key(r) : (r[key] ?? "–"))}</td>`).join("") + "</tr>");
  return `<table><tr>${head}</tr>${body.join("")}</table>`;
}

function showNode(d) {
  const head = [["node", "node"], ["lab_node", "lab node"], ["node_id", "id"], ["iphys", "iPHYs"],
                ["state", "state"], ["node_address", "node address"], ["memory_mb", "memory, MB"]]
    .filter(([key]) => d[key] !== undefined && d[key] !== null);
  let html = table([d], head);
  if (d.position) html += `<p class="muted">position ${d.position.map((v) => fmt(v, 1)).join(", ")}</p>`;
  if (d.components) {
    html += "<h3>Components</h3>" + table(d.components, [["component", "component"], ["state", "state"],
      ["intra", "intra"], [(c) => c.inter || c.control || "–", "inter / control"]]);
  }
  if (d.routes) {
    const shown = d.routes.filter((r) => r.to_node_address !== false);
    html += "<h3>Routes to node addresses</h3>" + table(shown, [["dst", "destination"], ["via", "via"], ["dev", "dev"]]);
  }
  if (d.links) {
    html += "<h3>Links</h3>" + table(d.links, [[(l) => `${l.a}:iphy${l.a_iphy} ↔ ${l.b}:iphy${l.b_iphy}`, "link"],
      ["class", "class"]]);
  }
  if (d.visible_peers) html += `<h3>Visible peers</h3><p>${esc(d.visible_peers.join(", ") || "none")}</p>`;
  for (const key of ["state_error", "routes_error", "note"]) {
    if (d[key]) html += `<p class="muted">${esc(d[key])}</p>`;
  }
  return html;
}

function showLink(d) {
  if (d.up === false) return `<p class="muted">${esc(d.note)}</p>`;
  let html = "";
  if (d.directions) {
    const rows = Object.values(d.directions).map((x) => ({
      dir: `${x.from} → ${x.to}`, configured: props(x.configured), kernel: x.kernel ? props(x.kernel) : "no tree",
      measured: x.measured_bps === null || x.measured_bps === undefined ? "–" : rate(x.measured_bps),
      bytes: x.counters ? x.counters.tx_bytes : "–",
    }));
    html += table(rows, [["dir", "direction"], ["configured", "configured"], ["kernel", "kernel holds"],
                         ["measured", "measured"], ["bytes", "bytes sent"]]);
  } else {
    const c = d.configured || {};
    html += table([{ dir: `${d.a} → ${d.b}`, p: props(c.a_to_b) }, { dir: `${d.b} → ${d.a}`, p: props(c.b_to_a) }],
                  [["dir", "direction"], ["p", "configured"]]);
  }
  if (d.link) html += `<p class="muted">${esc(d.link.class)}${d.link.since !== null ? ", up since t = " + fmt(d.link.since, 1) + " s" : ""}${d.link.latency_ms !== null ? ", came up " + fmt(d.link.latency_ms, 1) + " ms after visibility" : ""}</p>`;
  for (const key of ["kernel_error", "note"]) if (d[key]) html += `<p class="muted">${esc(d[key])}</p>`;
  return html;
}

async function loadDetails() {
  const sel = view.selection;
  if (!sel) return;
  const url = sel.kind === "node" ? `/api/node?name=${encodeURIComponent(sel.name)}`
    : `/api/link?a=${encodeURIComponent(sel.a)}&b=${encodeURIComponent(sel.b)}`;
  $("details-title").textContent = sel.kind === "node" ? `Node ${sel.name}` : `Link ${sel.a} ↔ ${sel.b}`;
  try {
    const response = await fetch(url, { credentials: "same-origin" });
    const d = await response.json();
    if (view.selection !== sel) return;
    $("details").classList.remove("muted");
    $("details").innerHTML = d.error ? `<p class="error">${esc(d.error)}</p>`
      : sel.kind === "node" ? showNode(d) : showLink(d);
  } catch (err) {
    $("details").innerHTML = `<p class="error">${esc(err)}</p>`;
  }
}

function onClick(event) {
  const point = event.points && event.points[0];
  if (!point || typeof point.customdata !== "string") return;
  select(point.customdata);
}

// "node|NAME" or "link|A|B", as the scene's points carry it (also for tests).
function select(customdata) {
  const parts = customdata.split("|");
  view.selection = parts[0] === "node" ? { kind: "node", name: parts[1] }
    : { kind: "link", a: parts[1], b: parts[2] };
  $("details").innerHTML = '<p class="muted">reading…</p>';
  loadDetails();
}

// --- live stream and replay -----------------------------------------------------------

function connect() {
  const source = new EventSource("/api/stream");
  source.addEventListener("state", (message) => {
    view.snapshots += 1;
    view.live = JSON.parse(message.data);
    if (view.mode === "live") render(view.live);
    else drawSlider(Object.assign({}, view.shown, { steps_seen: view.live.steps_seen }));
  });
  source.onerror = () => {
    const mode = $("mode");
    mode.textContent = "reconnecting"; mode.className = "badge off";
  };
}

async function showStep(index) {
  const steps = (view.live && view.live.steps_seen) || [];
  if (!steps[index]) return;
  view.mode = "replay";
  const response = await fetch(`/api/state?step=${steps[index].step}`, { credentials: "same-origin" });
  render(await response.json());
}

function goLive() {
  view.mode = "live";
  if (view.playing) { clearInterval(view.playing); view.playing = null; $("play").textContent = "▶"; }
  if (view.live) render(view.live);
}

function play() {
  if (view.playing) { clearInterval(view.playing); view.playing = null; $("play").textContent = "▶"; return; }
  const slider = $("slider");
  if (view.mode === "live" || Number(slider.value) >= Number(slider.max)) slider.value = 0;
  $("play").textContent = "❚❚";
  showStep(Number(slider.value));
  view.playing = setInterval(() => {
    const next = Number(slider.value) + 1;
    if (next > Number(slider.max)) { clearInterval(view.playing); view.playing = null; $("play").textContent = "▶"; return; }
    slider.value = next;
    showStep(next);
  }, 900);
}

function start() {
  Plotly.newPlot("scene", [], sceneLayout({ nodes: [], globe_radius: null,
                                           positions_from: "circle" }), PLOT_CONFIG);
  $("scene").on("plotly_click", onClick);
  $("slider").addEventListener("input", (e) => showStep(Number(e.target.value)));
  $("go-live").addEventListener("click", goLive);
  $("play").addEventListener("click", play);
  for (const id of ["colour", "show-visible"]) {
    $(id).addEventListener("change", () => { if (view.shown) render(view.shown); });
  }
  setInterval(() => { if (view.selection && view.selection.kind === "link") loadDetails(); }, 1500);
  connect();
}

start();
