// trainctl serve: the pages' behaviour. Everything comes from this server (the API under /api, the live stream);
// charts are uPlot (vendored). No framework, no build step.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
const page = document.body.dataset.page;
const COLORS = ["#2f6fdf", "#d9480f", "#2b8a3e", "#862e9c", "#c2255c", "#1098ad", "#e67700", "#495057"];

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

async function api(path, options = {}) {
  const res = await fetch(path, { credentials: "same-origin", ...options });
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = { error: text }; }
  if (!res.ok) {
    const err = new Error((data && (data.error || data.detail && JSON.stringify(data.detail))) || res.statusText);
    err.status = res.status; err.data = data;
    throw err;
  }
  return data;
}

function post(path, body = {}) {
  return api(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
}

function fmt(v) {
  if (v === null || v === undefined || typeof v !== "number") return v === null || v === undefined ? "-" : String(v);
  if (v !== 0 && (Math.abs(v) >= 1e5 || Math.abs(v) < 1e-3)) return v.toExponential(3);
  return String(Number(v.toPrecision(4)));
}

function duration(s) {
  if (s === null || s === undefined) return "-";
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  const mm = String(m).padStart(h ? 2 : 1, "0"), ss = String(sec).padStart(2, "0");
  return h ? `${h}:${mm}:${ss}` : `${m}:${ss}`;
}

function errorText(e) {
  const d = e.data || {};
  return [e.message, ...(d.details || []), d.hint ? "Hint: " + d.hint : ""].filter(Boolean).join("\n");
}

// -- charts ----------------------------------------------------------------------------------------------------------

function chartOptions(title, series, width) {
  return {
    width: width, height: 220, title: undefined,
    scales: { x: { time: false } },
    axes: [
      { label: "step", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6] },
      { size: 64, values: (u, vals) => vals.map(fmt) },
    ],
    legend: { show: series.length > 1 },
    cursor: { drag: { x: true, y: false } },
    series: [{ label: "step" }, ...series.map((s, i) => ({
      label: s, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true,
      points: { show: true, size: 4 },
    }))],
  };
}

class Chart {
  constructor(container, name, label) {
    this.name = name;
    this.x = []; this.y = [];
    this.box = el("div", { class: "chart", "data-metric": name },
      el("h3", {}, label ? label + " " : "", el("small", { text: name })));
    container.append(this.box);
    const width = Math.max(300, this.box.clientWidth - 14);
    this.plot = new uPlot(chartOptions(name, [name], width), [[], []], this.box);
  }
  add(steps, values) {
    for (let i = 0; i < steps.length; i++) {
      const v = values[i];
      if (v === null || v === undefined) continue;
      const at = this.x.length && steps[i] <= this.x[this.x.length - 1] ? this.x.indexOf(steps[i]) : -1;
      if (at >= 0) { this.y[at] = v; continue; }  // a step logged again (a resumed attempt's steps win)
      this.x.push(steps[i]); this.y.push(v);
    }
    this.plot.setData([this.x, this.y]);
  }
}

// -- runs table -------------------------------------------------------------------------------------------------------

function initRuns() {
  const table = $("#runs");
  let sortKey = null, sortDir = 1;
  const cellValue = (tr, idx) => {
    const td = tr.children[idx];
    if (!td) return "";
    const s = td.dataset.sort;
    if (s !== undefined) return parseFloat(s);
    return td.textContent.trim().toLowerCase();
  };
  $$("th[data-key]", table).forEach((th, idx) => {
    if (th.dataset.key === "select") return;
    th.addEventListener("click", () => {
      sortDir = sortKey === idx ? -sortDir : 1;
      sortKey = idx;
      $$("th", table).forEach((h) => h.classList.remove("asc", "desc"));
      th.classList.add(sortDir > 0 ? "asc" : "desc");
      applySort();
    });
  });
  function applySort() {
    if (sortKey === null) return;
    const rows = $$("tbody tr:not(.empty)", table);
    rows.sort((a, b) => {
      const x = cellValue(a, sortKey), y = cellValue(b, sortKey);
      return (x > y ? 1 : x < y ? -1 : 0) * sortDir;
    });
    rows.forEach((r) => table.tBodies[0].append(r));
  }
  const filter = $("#filter");
  function applyFilter() {
    const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
    $$("tbody tr:not(.empty)", table).forEach((tr) => {
      const text = tr.textContent.toLowerCase();
      tr.hidden = !words.every((w) => text.includes(w));
    });
  }
  filter.addEventListener("input", applyFilter);
  const compareBtn = $("#compare-selected");
  table.addEventListener("change", () => {
    compareBtn.disabled = $$(".pick:checked", table).length < 2;
  });
  compareBtn.addEventListener("click", () => {
    const ids = $$(".pick:checked", table).map((c) => c.value);
    location.href = "/compare?runs=" + ids.join(",");
  });
  // live: the table is read again every 5 s (statuses, steps, metrics), keeping the sort, filter and selection
  setInterval(async () => {
    let rows;
    try { rows = await api("/api/jobs"); } catch (e) { return; }
    const picked = new Set($$(".pick:checked", table).map((c) => c.value));
    const body = table.tBodies[0];
    body.replaceChildren(...rows.map((r) => runRow(r, picked)));
    if (!rows.length) body.append(el("tr", { class: "empty" }, el("td", { colspan: 10, text: "No runs yet." })));
    applySort(); applyFilter();
    compareBtn.disabled = picked.size < 2;
  }, 5000);
}

function runRow(r, picked) {
  const steps = (r.steps_done || "-") + (r.steps_total ? "/" + r.steps_total : "");
  const head = r.headline ? `${r.headline.name}=${fmt(r.headline.value)}` : "-";
  const when = (r.started || r.created || "-").slice(0, 16).replace("T", " ");
  return el("tr", { "data-uuid": r.uuid, "data-status": r.status },
    el("td", {}, r.pending ? "" : el("input", { type: "checkbox", class: "pick", value: r.uuid, checked: picked.has(r.uuid) })),
    el("td", {}, r.pending ? r.name : el("a", { href: "/runs/" + encodeURIComponent(r.folder), text: r.name })),
    el("td", { text: r.algorithm || "-" }), el("td", { text: r.model || "-" }), el("td", { text: r.data || "-" }),
    el("td", {}, el("span", { class: "status s-" + r.status, text: r.status }),
      r.detail && r.status !== "done" ? el("span", { class: "muted", text: " " + r.detail }) : null),
    el("td", { class: "num", "data-sort": r.steps_done || 0, text: steps }),
    el("td", { text: head }),
    el("td", { class: "num", "data-sort": r.seconds || 0, text: duration(r.seconds) }),
    el("td", { text: when }));
}

// -- a run ------------------------------------------------------------------------------------------------------------

async function initRun() {
  const uuid = document.body.dataset.uuid;
  const keys = JSON.parse($("#keys").textContent);
  const charts = new Map();
  const container = $("#charts");
  const logBox = $("#log");
  const more = $("#more-metric");
  const known = new Set();
  const history = { steps: [], metrics: {} };

  function remember(cols) {
    for (const name of Object.keys(cols.metrics)) {
      if (!known.has(name)) {
        known.add(name);
        more.append(el("option", { value: name, text: name }));
      }
    }
  }
  function addChart(name, label) {
    if (charts.has(name)) return;
    const c = new Chart(container, name, label);
    charts.set(name, c);
    if (history.metrics[name]) c.add(history.steps, history.metrics[name]);
  }
  const charted = new Set();  // the key metrics with a chart, by label
  function addKeyCharts(present) {
    // names with a part of the run's own (an environment's tasks: env/TASK/reward, ...): each part's charts together
    const patterns = keys.filter((k) => k.pattern);
    const found = [];
    for (const n of present) {
      patterns.forEach((k, i) => {
        const m = n.match(new RegExp(k.pattern));
        if (m) found.push([m[1], i, n, k.label.replace("{}", m[1])]);
      });
    }
    found.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] - b[1]));
    for (const k of keys) {
      if (k.pattern) continue;
      if (charted.has(k.label)) continue;
      const name = k.names.find((n) => present.includes(n));
      if (name) { charted.add(k.label); addChart(name, k.label); }
    }
    for (const [, , name, label] of found) addChart(name, label);
  }
  more.addEventListener("change", () => { if (more.value) addChart(more.value, ""); more.value = ""; });

  let cursor = null;
  try {
    const cols = await api(`/api/jobs/${uuid}/metrics?format=columns`);
    cursor = cols.cursor;
    history.steps = cols.steps; history.metrics = cols.metrics;
    remember(cols);
    addKeyCharts(Object.keys(cols.metrics));
    if (!charts.size) {  // a family trainctl does not know: the first few metrics
      Object.keys(cols.metrics).slice(0, 4).forEach((n) => addChart(n, ""));
    }
  } catch (e) {
    showMessage("Metrics could not be read: " + errorText(e));
  }
  if (!charts.size) $("#live").textContent = "no metrics logged yet";
  refreshDetail(uuid);
  loadConfig(uuid);

  function onMetrics(cols) {
    remember(cols);
    for (const [name, values] of Object.entries(cols.metrics)) {
      (history.metrics[name] ||= new Array(history.steps.length).fill(null)).push(...values);
    }
    history.steps.push(...cols.steps);
    for (const name of Object.keys(history.metrics)) {
      if (history.metrics[name].length < history.steps.length) {
        history.metrics[name].push(...new Array(history.steps.length - history.metrics[name].length).fill(null));
      }
    }
    addKeyCharts(Object.keys(history.metrics));  // key metrics that appear only now (a first step, a validation)
    if (charts.size) $("#live").textContent = "live";
    // a chart made just now from the history has these steps already: add() replaces a step it has
    for (const [name, c] of charts) if (cols.metrics[name]) c.add(cols.steps, cols.metrics[name]);
    $("#steps").textContent = String(history.steps[history.steps.length - 1] ?? 0) + ($("#steps").textContent.includes("/") ? "/" + $("#steps").textContent.split("/")[1] : "");
  }

  const es = new EventSource(`/api/jobs/${uuid}/events` + (cursor ? "?cursor=" + encodeURIComponent(cursor) : ""));
  window.trainctlStream = es;
  es.addEventListener("open", () => { $("#live").textContent = "live"; });
  es.addEventListener("error", () => { $("#live").textContent = es.readyState === 2 ? "stream closed" : "reconnecting…"; });
  es.addEventListener("metrics", (ev) => onMetrics(JSON.parse(ev.data)));
  es.addEventListener("log", (ev) => {
    const d = JSON.parse(ev.data);
    const atBottom = logBox.scrollTop + logBox.clientHeight >= logBox.scrollHeight - 4;
    const lines = (logBox.textContent ? logBox.textContent.split("\n") : []).concat(d.lines).slice(-1000);
    logBox.textContent = lines.join("\n");
    if (atBottom || d.tail) logBox.scrollTop = logBox.scrollHeight;
  });
  es.addEventListener("status", (ev) => {
    const d = JSON.parse(ev.data);
    const badge = $("#status");
    badge.textContent = d.status; badge.className = "status s-" + d.status;
    $("#detail").textContent = d.status !== "done" ? (d.detail || "") : "";
    const alive = d.status === "running" || d.status === "queued";
    if ($("#stop")) $("#stop").hidden = !alive;
    if ($("#resume")) $("#resume").hidden = alive;
    refreshDetail(uuid);
  });
  es.addEventListener("progress", (ev) => {
    const d = JSON.parse(ev.data);
    $("#steps").textContent = (d.steps_done || 0) + (d.steps_total ? "/" + d.steps_total : "");
    $("#eta").textContent = d.eta_seconds === null || d.eta_seconds === undefined ? "-" : duration(d.eta_seconds);
    $("#speed").textContent = d.seconds_per_step ? d.seconds_per_step.toFixed(2) + " s" : "-";
  });
  es.addEventListener("alert", (ev) => addAlert(JSON.parse(ev.data)));
  es.addEventListener("attempt", (ev) => {
    const d = JSON.parse(ev.data);
    logBox.textContent += `\n--- attempt ${d.n} started ${d.started || ""} ---`;
    refreshDetail(uuid);
  });
  es.addEventListener("gone", (ev) => {
    showMessage(JSON.parse(ev.data).message + ": what is shown is what was read before.");
    es.close();
    $("#live").textContent = "stream closed";
  });

  const stop = $("#stop"), resume = $("#resume");
  if (stop) stop.addEventListener("click", async () => {
    if (!confirm("Stop this run? (as Ctrl-C in its terminal; it can be resumed)")) return;
    stop.disabled = true;
    try { const r = await post(`/api/jobs/${uuid}/stop`, {}); showMessage(r.message); }
    catch (e) { showMessage(errorText(e)); }
    stop.disabled = false;
  });
  if (resume) resume.addEventListener("click", async () => {
    if (!confirm("Resume this run from its last checkpoint? (trainctl train --resume)")) return;
    resume.disabled = true;
    showMessage("Starting: trainctl train --resume … (it plans again: a few seconds)");
    try { const r = await post(`/api/jobs/${uuid}/resume`, { overrides: [] }); showMessage("Started: " + r.command); }
    catch (e) { showMessage(errorText(e)); }
    resume.disabled = false;
  });
}

function showMessage(text) {
  const box = $("#message");
  if (!box) return;
  box.hidden = false; box.textContent = text;
}

const seenAlerts = new Set();
function addAlert(a) {
  const key = a.kind + "|" + a.message;
  if (seenAlerts.has(key)) return;
  seenAlerts.add(key);
  $("#alerts").append(el("li", {}, el("b", { text: a.message }), " ", el("span", { class: "hint", text: "Hint: " + a.hint })));
}

async function refreshDetail(uuid) {
  let d;
  try { d = await api(`/api/jobs/${uuid}`); } catch (e) { if (e.status === 404) showMessage("This run is gone."); return; }
  $("#duration").textContent = duration(d.seconds);
  if (d.eta_seconds !== null && d.eta_seconds !== undefined) $("#eta").textContent = duration(d.eta_seconds);
  if (d.seconds_per_step) $("#speed").textContent = d.seconds_per_step.toFixed(2) + " s";
  (d.alerts || []).forEach(addAlert);
  const body = $("#attempts tbody");
  body.replaceChildren(...(d.attempts || []).map((a) => el("tr", {},
    el("td", { text: a.n }), el("td", { text: (a.started || "").replace("T", " ").slice(0, 19) }),
    el("td", { text: (a.ended || "").replace("T", " ").slice(0, 19) }),
    // a failed attempt's verdict (what died, or what the log says), its next step on hover
    el("td", { text: a.state ? a.state + (a.exit_code ? ` (exit ${a.exit_code})` : "") + (a.verdict ? `: ${a.verdict}` : a.reason ? `: ${a.reason}` : "") : "running", title: a.hint || "" }),
    el("td", { text: a.launcher || "local" }))));
  const last = (d.attempts || []).slice(-1)[0];
  if (last) $("#log-name").textContent = last.log || "";
  const l = d.lineage || {};
  const dl = $("#lineage");
  const row = (k, v) => [el("dt", { text: k }), el("dd", {}, v)];
  const model = l.model || {};
  dl.replaceChildren(
    ...row("model", `${model.name || "-"}${model.path ? " · " + model.path : ""}`),
    ...(model.from ? row("trained from", model.from.run
      ? el("a", { href: "/runs/" + model.from.run.uuid, text: model.from.describe })
      : model.from.describe) : []),
    ...row("data", `${(l.data || {}).name || "-"}${(l.data || {}).train_files ? " · " + l.data.train_files : ""}`),
    ...row("started by", l.created_by || "-"),
    ...(d.description ? row("description", d.description) : []),
    ...row("attempts", String((l.attempts || []).length) + ((l.attempts || []).length > 1 ? " (resumed)" : "")),
    ...row("merged", (l.merged || []).join(", ") || "-"),
    ...row("evaluated", l.evaluated ? el("a", { href: `/runs/${d.folder}/checkpoints`, text: "yes: eval/ (see checkpoints)" }) : "no"),
    ...row("runs from it", (l.children || []).length ? el("span", {}, ...(l.children.map((c) => el("a", { href: "/runs/" + c.uuid, text: `${c.name} (step ${c.step ?? "?"}) ` })))) : "-"),
    ...(d.links && d.links.ray_dashboard ? row("Ray dashboard", el("a", { href: d.links.ray_dashboard, text: d.links.ray_dashboard })) : []),
  );
}

async function loadConfig(uuid) {
  try {
    const c = await api(`/api/jobs/${uuid}/config`);
    $("#cfg-trainctl").textContent = c.trainctl || "(none)";
    $("#cfg-backend").textContent = c.backend || "(none)";
    $("#cfg-backend-name").textContent = c.backend_file || "backend config";
    $("#cfg-command").textContent = c.command || "(none)";
  } catch (e) { /* a half-written folder: the rest of the page stands */ }
}

// -- compare ----------------------------------------------------------------------------------------------------------

async function initCompare() {
  const form = $("#compare-form");
  form.addEventListener("submit", () => {
    $("#compare-runs").value = $$("#compare-pick option:checked").map((o) => o.value).join(",");
  });
  const dataEl = $("#compare-data");
  if (!dataEl) return;
  const runs = JSON.parse(dataEl.textContent);
  const all = await Promise.all(runs.map((r) => api(`/api/jobs/${r.uuid}/metrics?format=columns`).catch(() => ({ steps: [], metrics: {} }))));
  const names = [...new Set(all.flatMap((c) => Object.keys(c.metrics)))].sort();
  const select = $("#compare-metric");
  names.forEach((n) => select.append(el("option", { value: n, text: n })));
  const preferred = ["critic/score/mean", "train/loss", "actor/pg_loss"].find((n) => names.includes(n)) || names[0];
  if (preferred) select.value = preferred;
  const box = $("#compare-chart");
  let plot = null;
  function draw() {
    const name = select.value;
    const steps = [...new Set(all.flatMap((c) => c.steps))].sort((a, b) => a - b);
    const series = all.map((c) => {
      const at = new Map(c.steps.map((s, i) => [s, (c.metrics[name] || [])[i]]));
      return steps.map((s) => (at.has(s) && at.get(s) !== undefined ? at.get(s) : null));
    });
    if (plot) plot.destroy();
    plot = new uPlot(chartOptions(name, runs.map((r) => r.name), Math.max(400, box.clientWidth - 14)), [steps, ...series], box);
  }
  select.addEventListener("change", draw);
  if (names.length) draw();
}

// -- GPUs -------------------------------------------------------------------------------------------------------------

function initGpus() {
  const gib = (b) => (b / 2 ** 30).toFixed(1);
  async function refresh() {
    let d;
    try { d = await api("/api/gpus"); } catch (e) { return; }
    $("#gpu-reason").hidden = d.available;
    if (!d.available) $("#gpu-reason").textContent = `No GPU statistics: ${d.reason}.`;
    $("#gpus").hidden = !d.available;
    $("#gpus tbody").replaceChildren(...d.gpus.map((g) => el("tr", {},
      el("td", { text: g.index }), el("td", { text: g.name }), el("td", { class: "num", text: g.utilization + "%" }),
      el("td", { class: "num", text: `${gib(g.memory_used)}/${gib(g.memory_total)} GiB` }),
      el("td", { class: "num", text: g.temperature === null ? "-" : g.temperature + " °C" }),
      el("td", { class: "num", text: g.power_watts === null ? "-" : g.power_watts.toFixed(0) + " W" }))));
  }
  refresh();
  setInterval(refresh, 2000);
}

// -- checkpoints ------------------------------------------------------------------------------------------------------

function initCheckpoints() {
  const uuid = document.body.dataset.uuid;
  const out = $("#actions-out");
  function watch(action) {
    const box = el("div", { class: "traj" }, el("div", { class: "head" }, el("b", { text: action.kind }), el("code", { text: action.command }), el("span", { class: "state", text: action.state })), el("pre", { class: "log" }));
    if (out.classList.contains("muted")) { out.replaceChildren(); out.classList.remove("muted"); }
    out.prepend(box);
    const timer = setInterval(async () => {
      let a;
      try { a = await api(`/api/actions/${action.id}`); } catch (e) { clearInterval(timer); return; }
      $(".state", box).textContent = a.state + (a.exit_code ? ` (exit ${a.exit_code})` : "") + (a.reason ? `: ${a.reason}` : "");
      $("pre", box).textContent = a.output.join("\n");
      if (a.state !== "running") { clearInterval(timer); if (a.state === "done" && a.kind === "eval") setTimeout(() => location.reload(), 1500); }
    }, 2000);
  }
  // the merges and evals started before this page (by this server or an earlier one), oldest first: newest on top
  api(`/api/jobs/${uuid}/actions`).then((list) => list.reverse().forEach(watch)).catch(() => {});
  $$("button.merge").forEach((b) => b.addEventListener("click", async () => {
    const dtype = $(".dtype", b.closest("tr")).value;
    try { watch(await post(`/api/jobs/${uuid}/checkpoints/merge`, { step: +b.dataset.step, dtype })); }
    catch (e) { alert(errorText(e)); }
  }));
  $$("button.eval").forEach((b) => b.addEventListener("click", async () => {
    const split = $(".split", b.closest("tr")).value;
    try { watch(await post(`/api/jobs/${uuid}/checkpoints/eval`, { step: +b.dataset.step, split })); }
    catch (e) { alert(errorText(e)); }
  }));
  const preview = $("#prune-preview");
  if (preview) preview.addEventListener("click", async () => {
    const body = { keep_last: +$("#keep-last").value, keep_best: $("#keep-best").value || null };
    const box = $("#prune-plan");
    let plan;
    try { plan = await post(`/api/jobs/${uuid}/checkpoints/prune`, body); }
    catch (e) { box.replaceChildren(el("p", { class: "bad", text: errorText(e) })); return; }
    const list = el("ul", {}, ...plan.keep.map((k) => el("li", {}, "keep ", el("code", { text: k.path }), ` (${k.why})`)),
      ...plan.delete.map((d) => el("li", { class: "bad" }, "delete ", el("code", { text: d.path }), ` (${(d.size / 2 ** 20).toFixed(1)} MiB)`)));
    box.replaceChildren(list);
    if (!plan.delete.length) { box.append(el("p", { text: "Nothing to delete." })); return; }
    const confirmBtn = el("button", { class: "danger", id: "prune-confirm", text: `Delete these ${plan.delete.length} (frees ${(plan.freed / 2 ** 20).toFixed(1)} MiB)` });
    confirmBtn.addEventListener("click", async () => {
      if (!confirm(`Delete ${plan.delete.length} checkpoint(s)? This cannot be undone.`)) return;
      try {
        await post(`/api/jobs/${uuid}/checkpoints/prune`, { ...body, confirm: plan.delete.map((d) => d.path) });
        location.reload();
      } catch (e) { box.append(el("p", { class: "bad", text: errorText(e) })); }
    });
    box.append(confirmBtn);
  });
}

// -- trajectories -----------------------------------------------------------------------------------------------------

function initTrajectories() {
  const uuid = document.body.dataset.uuid;
  const list = $("#trajectories");
  if (!list) return;
  const stepSel = $("#step");
  function renderTurn(t) {
    const box = el("div", { class: `turn ${t.role}${t.error ? " error" : ""}` }, el("div", { class: "role", text: t.role + (t.error ? " · error" : "") }));
    if (t.text) box.append(el("div", { text: t.text }));
    for (const c of t.tool_calls || []) {
      box.append(el("div", { class: "call" + (c.malformed ? " malformed" : "") },
        c.malformed ? "malformed call: " + c.arguments : `${c.name}(${JSON.stringify(c.arguments)})`));
    }
    return box;
  }
  function render(items, label) {
    $("#traj-count").textContent = `${items.length} trajectories ${label}`;
    list.replaceChildren(...items.map((t) => el("div", { class: "traj", "data-reward": t.reward },
      el("div", { class: "head" }, el("b", { text: `step ${t.step ?? "?"} · #${t.index}` }),
        el("span", { text: "reward " + fmt(t.reward) }),
        t.ground_truth !== null && t.ground_truth !== undefined ? el("span", { class: "muted", text: "ground truth " + JSON.stringify(t.ground_truth) }) : null,
        el("span", { class: "muted", text: `${t.tool_calls} tool call(s), ${t.tool_errors} error(s)` }),
        el("a", { href: "#", class: "same-prompt", "data-key": t.prompt_key, text: "same prompt, every step" })),
      el("div", { class: "turn user" }, el("div", { class: "role", text: "prompt" }), el("div", { text: t.prompt })),
      ...t.turns.map(renderTurn))));
  }
  async function load() {
    const q = new URLSearchParams();
    if ($("#min-reward").value !== "") q.set("min_reward", $("#min-reward").value);
    if ($("#max-reward").value !== "") q.set("max_reward", $("#max-reward").value);
    if ($("#errors").value) q.set("errors", $("#errors").value);
    try { render(await api(`/api/jobs/${uuid}/rollouts/${stepSel.value}?${q}`), `at step ${stepSel.value}`); }
    catch (e) { list.replaceChildren(el("p", { class: "bad", text: errorText(e) })); }
    $("#all-steps").hidden = true;
  }
  ["#step", "#min-reward", "#max-reward", "#errors"].forEach((s) => $(s).addEventListener("change", load));
  $$(".pick-step").forEach((a) => a.addEventListener("click", (e) => { e.preventDefault(); stepSel.value = a.dataset.step; load(); }));
  list.addEventListener("click", async (e) => {
    const a = e.target.closest(".same-prompt");
    if (!a) return;
    e.preventDefault();
    render(await api(`/api/jobs/${uuid}/prompts/${a.dataset.key}`), "of this prompt, every step");
    $("#all-steps").hidden = false;
  });
  $("#all-steps").addEventListener("click", load);
  load();
}

// -- launch -----------------------------------------------------------------------------------------------------------

function initLaunch() {
  const form = $("#launch-form");
  if (!form) return;
  const state = $("#launch-state"), startBtn = $("#start"), planBox = $("#plan-text"), problems = $("#problems");
  let job = null;
  function spec() {
    const f = new FormData(form);
    const s = { overrides: [] };
    for (const [k, v] of f.entries()) {
      if (v === "" || k === "overrides") continue;
      const group = form.querySelector(`[name="${k}"]`).dataset.group;
      if (group === "recipe") s.recipe = v;
      else if (group === "algorithm") s.algorithm = v;
      else if (group === "model") s.model_path = v;
      else if (group) s.overrides.push(`${group}=${v}`);
      else if (["learning_rate", "kl_coef"].includes(k)) s[k] = parseFloat(v);
      else if (["batch_size", "num_epochs", "rollout_n"].includes(k)) s[k] = parseInt(v, 10);
      else s[k] = v;
    }
    s.overrides.push(...String(f.get("overrides") || "").split("\n").map((l) => l.trim()).filter(Boolean));
    return s;
  }
  function showProblems(list, cls) {
    for (const p of list) {
      problems.append(el("div", { class: "problem " + cls }, el("b", { text: (cls === "warning" ? "Warning: " : "") + p.message }),
        ...(p.details || []).map((d) => el("div", { text: d })), p.hint ? el("div", { class: "muted", text: "Hint: " + p.hint }) : null));
    }
  }
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    startBtn.disabled = true; problems.replaceChildren(); planBox.hidden = true;
    state.textContent = "Planning (composes and asks verl or TRL to validate: a few seconds)…";
    try { job = await post("/api/jobs", spec()); }
    catch (err) { state.textContent = ""; problems.append(el("div", { class: "problem", text: errorText(err) })); return; }
    showProblems(job.problems, "");
    showProblems(job.warnings, "warning");
    planBox.hidden = !job.plan; planBox.textContent = job.plan;
    state.textContent = job.problems.length ? `${job.problems.length} problem(s): fix them and plan again.` : `Ready: ${job.command}`;
    startBtn.disabled = job.problems.length > 0;
  });
  startBtn.addEventListener("click", async () => {
    if (!job) return;
    startBtn.disabled = true;
    state.textContent = "Starting (the detached trainctl plans again, then starts the trainer)…";
    try {
      await post(`/api/jobs/${job.uuid}/start`, {});
      location.href = "/runs/" + encodeURIComponent(job.name);
    } catch (err) { state.textContent = ""; problems.append(el("div", { class: "problem", text: errorText(err) })); startBtn.disabled = false; }
  });
}

({ runs: initRuns, run: initRun, compare: initCompare, gpus: initGpus, checkpoints: initCheckpoints,
   trajectories: initTrajectories, launch: initLaunch }[page] || (() => {}))();
