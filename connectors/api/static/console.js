// sickbay console: plain JavaScript, no dependencies, served by the API. Every view reads /api/v1.
"use strict";

const API = "/api/v1";
const CATS = ["hardware_gpu", "hardware_network", "hardware_host", "system_software", "application",
  "infrastructure", "unknown"];
const CAT_COLOURS = { hardware_gpu: "#c2410c", hardware_network: "#7c3aed", hardware_host: "#b45309",
  system_software: "#0369a1", application: "#15803d", infrastructure: "#4b5563", unknown: "#9ca3af" };
const view = document.getElementById("view");
let navSeq = 0; // bumped by every navigation: a slow page never overwrites a newer one

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) =>
    ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}
function time(iso) {
  if (!iso) return "—";
  return esc(iso.replace("T", " ").replace(/\.\d+Z$/, "Z"));
}
function secs(v) { return v == null ? "—" : `${Number(v).toFixed(2)} s`; }
function badge(kind, text) { return `<span class="badge ${esc(kind)}">${esc(text)}</span>`; }
function cat(c) { return badge(`cat-${c}`, c.replace("_", " ")); }
function st(s) { return badge(`st-${s || "pending"}`, (s || "pending").replace("_", " ")); }
function link(hash, text) { return `<a href="#/${esc(hash)}">${esc(text)}</a>`; }

function flash(message, error = false) {
  const el = document.getElementById("flash");
  el.textContent = message;
  el.className = error ? "flash error" : "flash";
  el.hidden = false;
  clearTimeout(flash.timer);
  flash.timer = setTimeout(() => { el.hidden = true; }, 8000);
}

async function api(path, options = {}) {
  const headers = { Accept: "application/json", ...(options.headers || {}) };
  const token = localStorage.getItem("sickbay.token");
  const actor = localStorage.getItem("sickbay.actor");
  if (token) headers.Authorization = `Bearer ${token}`;
  if (actor) headers["X-Sickbay-Actor"] = actor;
  if (options.body) headers["Content-Type"] = "application/json";
  const response = await fetch(API + path, { ...options, headers });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const detail = typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail ?? body);
    throw new Error(`${response.status} ${body.error || ""}: ${detail}`);
  }
  return body;
}

async function mutate(path, method, payload, done) {
  try {
    const out = await api(path, { method, body: JSON.stringify(payload) });
    flash(`Published to ${out.topic} (key ${out.key}); audit ${out.audit_id}. The adapter carries it out.`);
    if (done) done(out);
  } catch (err) {
    flash(err.message, true);
  }
}

// ---- incident timeline ---------------------------------------------------------------------------

function timelineSvg(items) {
  if (!items.length) return "";
  const w = 1200, h = 70, pad = 30;
  const ts = items.map((i) => Date.parse(i.first_signal_time));
  const lo = Math.min(...ts), hi = Math.max(...ts), span = Math.max(hi - lo, 3600e3);
  const x = (t) => pad + ((t - lo) / span) * (w - 2 * pad);
  const dots = items.map((i, k) => `<a href="#/incident/${esc(i.incident_id)}"><circle cx="${x(ts[k]).toFixed(1)}"
    cy="${28 + (k % 3) * 10}" r="6" fill="${CAT_COLOURS[i.category]}"><title>${esc(i.root_summary)} · ${esc(i.culprit_node || "")}
    </title></circle></a>`).join("");
  return `<svg viewBox="0 0 ${w} ${h}" width="100%" height="${h}" role="img" aria-label="incident timeline">
    <line x1="${pad}" y1="${h - 18}" x2="${w - pad}" y2="${h - 18}" stroke="#9ca3af"/>
    <text x="${pad}" y="${h - 4}">${time(new Date(lo).toISOString())}</text>
    <text x="${w - pad}" y="${h - 4}" text-anchor="end">${time(new Date(lo + span).toISOString())}</text>${dots}</svg>`;
}

async function incidentsView(params) {
  const seq = navSeq;
  const q = new URLSearchParams();
  for (const key of ["category", "node", "job", "status"]) if (params.get(key)) q.set(key, params.get(key));
  q.set("limit", "200");
  const page = await api(`/incidents?${q}`);
  const opts = (list, sel) => ["", ...list].map((v) =>
    `<option value="${v}" ${v === (sel || "") ? "selected" : ""}>${v || "any"}</option>`).join("");
  const rows = page.items.map((i) => `<tr class="clickable" data-href="#/incident/${esc(i.incident_id)}">
      <td>${time(i.first_signal_time)}</td><td>${cat(i.category)}</td>
      <td><a href="#/incident/${esc(i.incident_id)}">${esc(i.root_summary)}</a></td>
      <td>${i.culprit_node ? link(`node/${i.culprit_node}`, i.culprit_node) : "—"}</td>
      <td>${link(`job/${i.job_id}`, i.job_id)} <span class="muted">#${i.attempt}</span></td>
      <td>${st(i.status)}</td><td>${(i.confidence * 100).toFixed(0)}%</td></tr>`).join("");
  if (seq !== navSeq) return; // the user moved on while this page loaded
  view.innerHTML = `<h1>Incident timeline</h1>
    <form class="filters" id="filters">
      <select name="category">${opts(CATS, params.get("category"))}</select>
      <input name="node" placeholder="node" value="${esc(params.get("node") || "")}">
      <input name="job" placeholder="job" value="${esc(params.get("job") || "")}">
      <select name="status">${opts(["open", "closed"], params.get("status"))}</select>
      <button type="submit">Filter</button></form>
    <div class="card">${timelineSvg(page.items) || '<p class="muted">No incidents.</p>'}</div>
    <h2>${page.items.length} incident(s)</h2>
    <table id="incidents"><thead><tr><th>first signal</th><th>category</th><th>root cause</th><th>culprit</th>
      <th>job</th><th>status</th><th>confidence</th></tr></thead><tbody>${rows}</tbody></table>`;
  document.getElementById("filters").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new URLSearchParams();
    for (const [k, v] of new FormData(ev.target)) if (v) f.set(k, v);
    location.hash = `#/incidents?${f}`;
  });
}

// ---- incident page -------------------------------------------------------------------------------

function actionsTable(actions, withApprove) {
  if (!actions.length) return '<p class="muted">No actions.</p>';
  const rows = actions.map((a) => `<tr data-action="${esc(a.action_id)}">
      <td>${esc(a.kind.replace("_", " "))}</td>
      <td>${a.node ? link(`node/${a.node}`, a.node) : link(`job/${a.job_id}`, a.job_id)}
        ${a.exclude_nodes.length ? `<span class="muted">excluding ${esc(a.exclude_nodes.join(", "))}</span>` : ""}</td>
      <td>${badge(`st-${a.mode}`, a.dry_run ? "advice (dry run)" : a.mode)}</td>
      <td>${st(a.status)}</td><td class="mono">${esc(a.detail || "")}</td><td>${time(a.finished_at || a.created_at)}</td>
      <td>${withApprove && a.dry_run ? `<button class="primary approve" data-id="${esc(a.action_id)}">Approve</button>` : ""}
      </td></tr>`).join("");
  return `<table class="actions"><thead><tr><th>action</th><th>target</th><th>mode</th><th>result</th><th>detail</th>
    <th>when</th><th></th></tr></thead><tbody>${rows}</tbody></table>`;
}

function bindApprove(after) {
  for (const b of view.querySelectorAll("button.approve")) {
    b.addEventListener("click", () => {
      if (!confirm(`Approve ${b.dataset.id}? It is published again in act mode.`)) return;
      mutate(`/actions/${encodeURIComponent(b.dataset.id)}/approve`, "POST", { reason: "approved in the console" }, after);
    });
  }
}

async function incidentView(id) {
  const seq = navSeq;
  const i = await api(`/incidents/${encodeURIComponent(id)}`);
  const r = i.root_cause;
  const symptoms = i.supporting.map((s) => `<tr><td>${esc(s.summary)}</td><td>${s.count}</td>
      <td>${s.nodes.map((n) => link(`node/${n}`, n)).join(", ")}</td><td>${esc(s.ranks.join(", "))}</td>
      <td>${time(s.first_seen)}</td></tr>`).join("");
  const evidence = i.evidence.map((e) => `<div class="${e.rule === r.rule ? "root-ev" : ""}">` +
      `<span class="t">${time(e.event_time)}</span> <span class="n">${esc(e.node || "?")}</span>` +
      `${e.rank != null ? ` <span class="r">rank ${e.rank}</span>` : ""} [${esc(e.rule)}] ${esc(e.text)}</div>`).join("");
  const audit = i.audit.map((a) => `<tr><td>${time(a.time)}</td><td>${esc(a.actor)}</td><td>${esc(a.event)}</td>
      <td class="mono">${esc(a.details.detail || a.details.reason || a.details.kind || "")}</td></tr>`).join("");
  if (seq !== navSeq) return; // the user moved on while this page loaded
  view.innerHTML = `<p class="muted">${link("incidents", "← incidents")}</p>
    <h1 id="incident-title">${esc(r.summary)}</h1>
    <p>${cat(i.category)} ${st(i.status)} <span class="muted">${esc(i.incident_id)} · revision ${i.revision} ·
      confidence ${(i.confidence * 100).toFixed(0)}% · job ${link(`job/${i.job_id}`, i.job_id)} attempt ${i.attempt}
      on ${esc(i.job_nodes.join(", "))}</span></p>
    <div class="grid g2">
      <div class="card root" id="root-cause"><h2>Root cause</h2>
        <dl class="kv"><dt>rule</dt><dd class="mono">${esc(r.rule)}${r.code != null ? ` (code ${r.code})` : ""}</dd>
        <dt>culprit</dt><dd>${i.culprit_node ? link(`node/${i.culprit_node}`, i.culprit_node) : "—"}
          ${i.culprit_gpu ? `<span class="muted">GPU ${esc(i.culprit_gpu)}</span>` : ""}</dd>
        <dt>isolate</dt><dd>${esc(i.isolate.join(", ") || "nothing")}</dd>
        <dt>restartable</dt><dd>${i.restartable ? "yes" : "no"}</dd></dl>
        <div class="line mono">${esc(r.text)}</div></div>
      <div class="card"><h2>Timing</h2><dl class="kv">
        <dt>first signal</dt><dd>${time(i.first_signal_time)}</dd>
        <dt>detected after</dt><dd>${secs(i.latency.detect_s)}</dd>
        <dt>first action after</dt><dd>${secs(i.latency.act_s)}</dd>
        <dt>GPU-hours lost</dt><dd>${i.latency.gpu_hours_lost ?? "—"}
          <span class="muted">${esc(i.latency.recovered_by ? `(until ${i.latency.recovered_by.replace("_", " ")})` : "")}</span></dd>
        <dt>coverage</dt><dd>${esc(i.coverage.join(", "))}</dd></dl></div>
    </div>
    <h2>Cascade (supporting symptoms)</h2>
    ${symptoms ? `<table id="cascade"><thead><tr><th>symptom</th><th>count</th><th>nodes</th><th>ranks</th><th>first seen</th>
      </tr></thead><tbody>${symptoms}</tbody></table>` : '<p class="muted">No cascade.</p>'}
    <h2>Evidence</h2><div class="evidence mono" id="evidence">${evidence}</div>
    <h2>Actions</h2><div id="actions">${actionsTable(i.actions, true)}</div>
    <h2>Audit</h2><table id="audit"><thead><tr><th>time</th><th>actor</th><th>event</th><th>detail</th></tr></thead>
      <tbody>${audit}</tbody></table>`;
  bindApprove(route);
}

// ---- quarantine board ----------------------------------------------------------------------------

async function nodesView() {
  const seq = navSeq;
  const nodes = await api("/nodes");
  const columns = [
    ["Isolated", ["isolated", "isolation_failed"]],
    ["In progress", ["isolating", "restoring", "restore_failed"]],
    ["Advised (dry run)", ["advised"]],
    ["In service", ["ok"]],
  ];
  const card = (n) => `<div class="node" data-node="${esc(n.node)}">
      <div><span class="name">${link(`node/${n.node}`, n.node)}</span> ${st(n.state)}</div>
      <div class="muted">${esc(n.gpu_model || "unknown GPU")} · ${esc(n.driver_version || "driver ?")}</div>
      <div>${n.incidents} incident(s)${n.last_root_cause ? `: <span class="muted">${esc(n.last_root_cause)}</span>` : ""}</div>
      <div style="margin-top:6px">${["isolated", "isolating"].includes(n.state)
        ? `<button class="restore" data-node="${esc(n.node)}">Restore</button>`
        : `<button class="danger isolate" data-node="${esc(n.node)}">Isolate</button>`}</div></div>`;
  if (seq !== navSeq) return; // the user moved on while this page loaded
  view.innerHTML = `<h1>Node quarantine board</h1>
    <p class="muted">State from sickbay's drain/resume actions and their results. Isolate/restore publish an
      intent; the Slurm adapter drains or resumes the node.</p>
    <div class="board">${columns.map(([title, states]) => {
      const here = nodes.filter((n) => states.includes(n.state));
      return `<div class="col"><h3>${title} (${here.length})</h3>${here.map(card).join("")}</div>`;
    }).join("")}</div>`;
  for (const b of view.querySelectorAll("button.isolate, button.restore")) {
    b.addEventListener("click", () => {
      const verb = b.classList.contains("isolate") ? "isolate" : "restore";
      const reason = prompt(`Why ${verb} ${b.dataset.node}?`);
      if (reason) mutate(`/nodes/${encodeURIComponent(b.dataset.node)}/${verb}`, "POST", { reason }, route);
    });
  }
}

async function nodeView(name) {
  const seq = navSeq;
  const n = await api(`/nodes/${encodeURIComponent(name)}`);
  const events = n.health.map((h) => `<tr><td>${time(h.time)}</td><td>${esc(h.event.replace("_", " "))}</td>
      <td>${h.incident_id ? link(`incident/${h.incident_id}`, h.incident_id) : ""}</td><td>${esc(h.detail)}</td></tr>`).join("");
  if (seq !== navSeq) return; // the user moved on while this page loaded
  view.innerHTML = `<p class="muted">${link("nodes", "← quarantine board")}</p>
    <h1>${esc(n.node)} ${st(n.state)}</h1>
    <p class="muted">${esc(n.gpu_model || "unknown GPU")} × ${n.gpus ?? "?"} · driver ${esc(n.driver_version || "?")} ·
      partition ${esc(n.partition || "?")} · cluster ${esc(n.cluster)}</p>
    <h2>Health events</h2><table><thead><tr><th>time</th><th>event</th><th>incident</th><th>detail</th></tr></thead>
      <tbody>${events}</tbody></table>
    <h2>Actions</h2>${actionsTable(n.actions, true)}`;
  bindApprove(route);
}

// ---- jobs ----------------------------------------------------------------------------------------

async function jobsView() {
  const seq = navSeq;
  const jobs = await api("/jobs");
  if (seq !== navSeq) return; // the user moved on while this page loaded
  view.innerHTML = `<h1>Jobs</h1><table><thead><tr><th>job</th><th>cluster</th><th>attempts</th><th>nodes</th>
    <th>last start</th><th>incidents</th><th>GPU-hours lost</th></tr></thead><tbody>${jobs.map((j) =>
      `<tr class="clickable" data-href="#/job/${esc(j.job_id)}"><td>${link(`job/${j.job_id}`, j.job_id)}</td>
      <td>${esc(j.cluster)}</td><td>${j.attempts}</td><td>${j.job_size}</td><td>${time(j.last_start)}</td>
      <td>${j.incidents}</td><td>${j.gpu_hours_lost}</td></tr>`).join("")}</tbody></table>`;
}

function attemptsSvg(attempts) {
  const starts = attempts.filter((a) => a.started_at).map((a) => Date.parse(a.started_at));
  if (!starts.length) return "";
  const ends = attempts.map((a) => Date.parse(a.ended_at || new Date().toISOString()));
  const lo = Math.min(...starts), hi = Math.max(...ends, ...starts) , span = Math.max(hi - lo, 60e3);
  const w = 1200, row = 26, pad = 90;
  const x = (t) => pad + ((t - lo) / span) * (w - pad - 20);
  const bars = attempts.map((a, k) => {
    if (!a.started_at) return "";
    const s = Date.parse(a.started_at), e = Date.parse(a.ended_at || new Date().toISOString());
    const marks = a.incidents.map((i) => `<circle cx="${x(Date.parse(i.first_signal_time)).toFixed(1)}" cy="${k * row + 13}"
      r="6" fill="${CAT_COLOURS[i.category]}" stroke="#fff"><title>${esc(i.root_summary)}</title></circle>`).join("");
    return `<text x="4" y="${k * row + 17}">attempt ${a.attempt}</text><rect x="${x(s).toFixed(1)}" y="${k * row + 5}"
      width="${Math.max(2, x(e) - x(s)).toFixed(1)}" height="16" rx="3" fill="${a.ended_at ? "#9ca3af" : "#60a5fa"}">
      <title>${esc(a.nodes.join(", "))}</title></rect>${marks}`;
  }).join("");
  return `<svg viewBox="0 0 ${w} ${attempts.length * row + 8}" width="100%" role="img" aria-label="attempts">${bars}</svg>`;
}

async function jobView(id) {
  const seq = navSeq;
  const j = await api(`/jobs/${encodeURIComponent(id)}`);
  const attempts = j.attempts.map((a) => `<tr><td>#${a.attempt}</td><td>${esc(a.nodes.join(", "))}</td>
      <td>${time(a.started_at)}</td><td>${time(a.ended_at)}</td><td>${a.run_h}</td>
      <td>${a.incidents.map((i) => `${cat(i.category)} ${link(`incident/${i.incident_id}`, i.root_summary)}`).join("<br>")}</td>
      </tr>`).join("");
  if (seq !== navSeq) return; // the user moved on while this page loaded
  view.innerHTML = `<p class="muted">${link("jobs", "← jobs")}</p><h1>Job ${esc(j.job_id)}</h1>
    <p class="muted">cluster ${esc(j.cluster)} · ${j.attempts.length} attempt(s) · ${j.gpu_hours_lost} GPU-hours lost</p>
    <h2>Recovery history</h2><div class="card">${attemptsSvg(j.attempts)}</div>
    <table id="attempts"><thead><tr><th>attempt</th><th>nodes</th><th>started</th><th>ended</th><th>hours</th>
      <th>incidents</th></tr></thead><tbody>${attempts}</tbody></table>
    <h2>Actions</h2>${actionsTable(j.actions, true)}`;
  bindApprove(route);
}

// ---- fleet charts --------------------------------------------------------------------------------

function stackedDays(rows) {
  const days = [...new Set(rows.map((r) => r.day))].sort();
  if (!days.length) return '<p class="muted">No failures.</p>';
  const totals = days.map((d) => rows.filter((r) => r.day === d).reduce((s, r) => s + r.incidents, 0));
  const top = Math.max(...totals), w = 560, h = 200, pad = 28, bw = Math.min(40, (w - pad) / days.length - 6);
  const bars = days.map((d, k) => {
    let y = h - 20;
    return rows.filter((r) => r.day === d).map((r) => {
      const bh = (r.incidents / top) * (h - 40);
      y -= bh;
      return `<rect x="${pad + k * (bw + 6)}" y="${y.toFixed(1)}" width="${bw}" height="${bh.toFixed(1)}"
        fill="${CAT_COLOURS[r.category]}"><title>${esc(d)} ${esc(r.category)}: ${r.incidents}</title></rect>`;
    }).join("") + `<text x="${pad + k * (bw + 6)}" y="${h - 6}">${esc(d.slice(5))}</text>`;
  }).join("");
  return `<svg viewBox="0 0 ${w} ${h}" width="100%" role="img" aria-label="failures per day">
    <text x="0" y="14">${top}</text>${bars}</svg>`;
}

function hbars(rows, label, value, colour) {
  if (!rows.length) return '<p class="muted">Nothing yet.</p>';
  const top = Math.max(...rows.map(value)), w = 560, row = 24;
  return `<svg viewBox="0 0 ${w} ${rows.length * row}" width="100%" role="img">${rows.map((r, k) => {
    const bw = (value(r) / top) * (w - 260);
    return `<text x="0" y="${k * row + 15}">${esc(label(r))}</text><rect x="180" y="${k * row + 4}"
      width="${Math.max(bw, 2).toFixed(1)}" height="15" rx="2" fill="${colour(r)}"/>
      <text x="${186 + bw}" y="${k * row + 15}">${value(r)}</text>`;
  }).join("")}</svg>`;
}

async function fleetView() {
  const seq = navSeq;
  const f = await api("/fleet?days=30");
  const q = (x) => `p50 ${secs(x.p50)} · p90 ${secs(x.p90)} · p99 ${secs(x.p99)} <span class="muted">(${x.count})</span>`;
  if (seq !== navSeq) return; // the user moved on while this page loaded
  view.innerHTML = `<h1>Fleet</h1>
    <div class="grid g4">
      <div class="card"><div class="muted">incidents</div><div class="stat">${f.failure_mix.reduce((s, r) => s + r.count, 0)}</div></div>
      <div class="card"><div class="muted">GPU-hours lost</div><div class="stat">${f.gpu_hours_lost}</div></div>
      <div class="card"><div class="muted">time to detect</div><div>${q(f.latency.detect_s)}</div></div>
      <div class="card"><div class="muted">time to first action</div><div>${q(f.latency.act_s)}</div></div>
    </div>
    <div class="grid g2" style="margin-top:14px">
      <div class="card"><h2>Failures per day</h2>${stackedDays(f.failures_daily)}
        <div class="legend">${CATS.map((c) => `<span><i style="background:${CAT_COLOURS[c]}"></i>${c}</span>`).join("")}</div></div>
      <div class="card"><h2>Failure mix</h2>${hbars(f.failure_mix, (r) => r.key, (r) => r.count, (r) => CAT_COLOURS[r.key])}</div>
      <div class="card"><h2>Top failing nodes</h2>${hbars(f.top_nodes, (r) => `${r.node} (MTBF ${r.mtbf_h ?? "—"} h)`,
        (r) => r.incidents, () => "#b91c1c")}</div>
      <div class="card"><h2>By GPU model and driver</h2>${hbars(f.by_gpu, (r) => `${r.gpu_model.replace("NVIDIA ", "")} ${r.driver_version}`,
        (r) => r.incidents, () => "#c2410c")}</div>
      <div class="card"><h2>Action outcomes</h2>${hbars(f.action_outcomes, (r) => r.key, (r) => r.count, () => "#1d4ed8")}</div>
    </div>`;
}

// ---- modes ---------------------------------------------------------------------------------------

async function modesView() {
  const seq = navSeq;
  const modes = await api("/modes");
  if (seq !== navSeq) return; // the user moved on while this page loaded
  view.innerHTML = `<h1>Modes</h1>
    <p class="muted">observe: actions are recorded as advice (dry runs) · act: the adapters change the scheduler.
      A change is published on the modes topic; the decide step applies it.</p>
    <table id="modes"><thead><tr><th>scope</th><th>mode</th><th>set by</th><th>reason</th><th>since</th></tr></thead>
    <tbody>${modes.map((x) => `<tr><td class="mono">${esc(x.scope)}</td><td>${badge(`st-${x.mode}`, x.mode)}</td>
      <td>${esc(x.actor)}</td><td>${esc(x.reason)}</td><td>${time(x.time)}</td></tr>`).join("")}</tbody></table>
    <h2>Switch</h2>
    <form id="mode-form" class="filters">
      <input name="cluster" placeholder="cluster (default: this one)">
      <input name="partition" placeholder="partition (any)">
      <select name="category">${["", ...CATS].map((c) => `<option value="${c}">${c || "any category"}</option>`).join("")}</select>
      <select name="mode"><option>observe</option><option>act</option></select>
      <input name="reason" placeholder="reason" required>
      <button class="primary" type="submit">Publish</button></form>`;
  document.getElementById("mode-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const body = {};
    for (const [k, v] of new FormData(ev.target)) if (v) body[k] = v;
    mutate("/modes", "PUT", body, route);
  });
}

// ---- router --------------------------------------------------------------------------------------

async function route() {
  navSeq += 1;
  const seq = navSeq;
  const [path, query] = (location.hash.slice(2) || "incidents").split("?");
  const [page, ...rest] = path.split("/");
  const arg = decodeURIComponent(rest.join("/"));
  for (const a of document.querySelectorAll("[data-nav]")) {
    const group = { incident: "incidents", node: "nodes", job: "jobs" }[page] || page;
    a.classList.toggle("active", a.dataset.nav === group);
  }
  try {
    if (page === "incident") await incidentView(arg);
    else if (page === "nodes") await nodesView();
    else if (page === "node") await nodeView(arg);
    else if (page === "jobs") await jobsView();
    else if (page === "job") await jobView(arg);
    else if (page === "fleet") await fleetView();
    else if (page === "modes") await modesView();
    else await incidentsView(new URLSearchParams(query || ""));
    document.body.dataset.view = page;
  } catch (err) {
    if (seq !== navSeq) return; // the user moved on while this page loaded
    view.innerHTML = `<h1>Could not load this page</h1><p class="mono">${esc(err.message)}</p>
      <p class="muted">A 401 means the API wants a token: enter it at the top right.</p>`;
  }
}

document.getElementById("auth").addEventListener("submit", (ev) => {
  ev.preventDefault();
  localStorage.setItem("sickbay.token", document.getElementById("token").value);
  localStorage.setItem("sickbay.actor", document.getElementById("actor").value);
  flash("Saved in this browser.");
  route();
});
document.getElementById("actor").value = localStorage.getItem("sickbay.actor") || "";
view.addEventListener("click", (ev) => {
  const row = ev.target.closest("tr[data-href]");
  if (row && !ev.target.closest("a, button")) location.hash = row.dataset.href;
});
window.addEventListener("hashchange", route);
route();
