// overtime UI: trace search, the waterfall of one trace against its budget,
// incident reports. Vanilla JS, no dependencies; talks to the docs/interfaces.md API
// (same origin, the sign-in cookie rides along) and to
// /api/traces/{id}/events for stream chunks and DNS/connect phases. The
// root-cause kinds (menu, labels, chart colours) are the server's rules',
// from /api/kinds: no list of them here.
'use strict';
(() => {
  const OUTCOMES = ['gateway_timeout', 'service_timeout', 'error', 'ok'];
  const CALL_STAGES = new Set(['llm', 'judge', 'tool', 'memory', 'network', 'queue']);
  const STAGES = ['gateway', 'service', 'llm', 'judge', 'tool', 'memory', 'network', 'queue', 'other'];
  const PHASES = ['queue', 'prefill', 'decode', 'io'];
  const STREAM_EVENTS = new Set(['chunk', 'heartbeat']);
  const MAX_EVENT_TICKS = 400;

  // ---------- small helpers
  const $ = (sel, root = document) => root.querySelector(sel);
  const main = () => document.getElementById('main');
  const enc = encodeURIComponent;
  const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
  const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ESC[c]);
  const num = (x) => typeof x === 'number' && isFinite(x);
  function dur(ms) {
    if (!num(ms)) return '—';
    const a = Math.abs(ms);
    if (a === 0) return '0 ms';
    if (a < 10) return ms.toFixed(1) + ' ms';
    if (a < 1000) return Math.round(ms) + ' ms';
    return (ms / 1000).toFixed(1) + ' s';
  }
  // `1 incident`, `3 incidents`.
  const count = (n, one, many = one + 's') => `${esc(n)} ${Number(n) === 1 ? one : many}`;
  const pct = (x) => (num(x) ? Math.round(x * 100) + ' %' : '—');
  const when = (iso) => (iso ? String(iso).replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '—');
  const outcomeBadge = (o) => `<span class="badge o-${esc(o)}">${esc(o)}</span>`;
  // Very long text (a finding that lists hundreds of calls) folds away.
  const clamp = (t, n = 320) => {
    const text = String(t ?? '');
    return text.length <= n ? esc(text)
      : `<details class="long"><summary>${esc(text.slice(0, n))}… <span class="muted">(${text.length} characters; show all)</span></summary>${esc(text)}</details>`;
  };

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }
  async function api(path) {
    const r = await fetch(path, { credentials: 'same-origin', headers: { accept: 'application/json' } });
    if (r.status === 401) throw new ApiError(401, 'signed out');
    // "Sign out" only for a browser signed in with the server's token.
    if (r.headers.get('x-overtime-session') === 'cookie') document.getElementById('logout-form').hidden = false;
    let body = null;
    try { body = await r.json(); } catch (_) { /* not JSON */ }
    if (!r.ok) throw new ApiError(r.status, (body && body.error) || `${r.status} ${r.statusText}`);
    return body;
  }
  // The root-cause kinds as the server's rules describe them (GET /api/kinds):
  // [{name, label, description, color, enabled}], in rule order. Asked once;
  // asked again after a failure.
  let kindsAsked = null;
  function kinds() {
    if (!kindsAsked) kindsAsked = api('/api/kinds').then((d) => d.kinds).catch((e) => { kindsAsked = null; throw e; });
    return kindsAsked;
  }
  function showError(e) {
    main().innerHTML = e.status === 401
      ? '<p class="error" role="alert">This server wants its API token. <a href="/">Sign in</a>.</p>'
      : `<p class="error" role="alert">${esc(e.message || e)}</p>`;
  }

  // ---------- routing: #/?search, #/trace/<id>, #/incidents, #/incidents/<id>, #/overview, #/advice
  let generation = 0;
  const visited = [];
  let wantSearchFocus = false;
  let lastOpened = null;
  function parseHash() {
    const h = location.hash.replace(/^#/, '') || '/';
    const q = h.indexOf('?');
    const path = q < 0 ? h : h.slice(0, q);
    const parts = path.split('/').filter(Boolean).map((p) => { try { return decodeURIComponent(p); } catch (_) { return p; } });
    return { parts, params: new URLSearchParams(q < 0 ? '' : h.slice(q + 1)) };
  }
  async function route() {
    const here = location.hash || '#/';
    if (visited.length > 1 && visited[visited.length - 2] === here) visited.pop();
    else if (visited[visited.length - 1] !== here) visited.push(here);
    closeDetail(false);
    const { parts, params } = parseHash();
    const gen = ++generation;
    for (const a of document.querySelectorAll('.top nav a')) a.classList.remove('on');
    const nav = { incidents: '#nav-incidents', advice: '#nav-advice', overview: '#nav-overview' };
    $(nav[parts[0]] || '#nav-search').classList.add('on');
    try {
      if (parts[0] === 'trace' && parts[1]) await viewTrace(parts[1], gen);
      else if (parts[0] === 'incidents' && parts[1]) await viewIncident(parts.slice(1).join('/'), gen);
      else if (parts[0] === 'incidents') await viewIncidents(gen);
      else if (parts[0] === 'advice') window.overtimeAdvice.view(gen, () => gen === generation);
      else if (parts[0] === 'overview') await window.overtimeCharts.view(gen, () => gen === generation);
      else await viewSearch(params, gen);
    } catch (e) {
      if (gen === generation) showError(e);
    }
  }
  function goBack() {
    if (visited.length > 1) { history.back(); return; }
    const { parts } = parseHash();
    location.hash = parts[0] === 'incidents' && parts[1] ? '#/incidents' : '#/';
  }

  // ---------- search
  const SEARCH_FIELDS = ['trace_id', 'request_id', 'outcome', 'kind', 'from', 'to'];
  function searchForm(params, kindList) {
    const v = (k) => esc(params.get(k) || '');
    const opts = (list, sel, any) => `<option value="">${any}</option>` +
      list.map((o) => `<option value="${o}"${o === sel ? ' selected' : ''}>${o}</option>`).join('');
    const kindOpts = (sel) => '<option value="">any</option>' + kindList.map((k) =>
      `<option value="${esc(k.name)}" title="${esc(k.name)}: ${esc(k.description)}"${k.name === sel ? ' selected' : ''}>${esc(k.label)}</option>`).join('');
    return `<h1>Traces</h1>
<form class="search card" id="search" role="search" autocomplete="off">
  <label>Trace id or prefix<input id="q-trace" name="trace_id" value="${v('trace_id')}" spellcheck="false" placeholder="32 hex"></label>
  <label>Request id or prefix<input id="q-request" name="request_id" value="${v('request_id')}" spellcheck="false"></label>
  <label>Outcome<select id="q-outcome" name="outcome">${opts(OUTCOMES, params.get('outcome'), 'any')}</select></label>
  <label>Root cause<select id="q-kind" name="kind">${kindOpts(params.get('kind'))}</select></label>
  <label>From (UTC)<input id="q-from" name="from" type="datetime-local" step="1" value="${v('from')}"></label>
  <label>To (UTC)<input id="q-to" name="to" type="datetime-local" step="1" value="${v('to')}"></label>
  <button class="primary" id="q-go" type="submit">Search</button>
</form>
<div id="results" aria-live="polite"></div>`;
  }
  function toApiTime(v) {
    const t = Date.parse(/Z|[+-]\d\d:?\d\d$/.test(v) ? v : v + 'Z');
    return Number.isNaN(t) ? v : String(t);
  }
  async function viewSearch(params, gen) {
    if (!$('#search')) {
      const kindList = await kinds();
      if (gen !== generation) return;
      main().innerHTML = searchForm(params, kindList);
      $('#search').addEventListener('submit', (e) => {
        e.preventDefault();
        const q = new URLSearchParams();
        for (const el of $('#search').elements) if (el.name && el.value.trim()) q.set(el.name, el.value.trim());
        const next = '#/?' + q.toString();
        if (location.hash === next) route(); else location.hash = next;
      });
      $('#q-trace').addEventListener('keydown', (e) => {
        if (e.key === 'ArrowDown') { const r = $('#results tr.row'); if (r) { e.preventDefault(); r.focus(); } }
      });
    } else {
      for (const k of SEARCH_FIELDS) {
        const el = $('#search').elements[k];
        if (el) el.value = params.get(k) || '';
      }
    }
    if (wantSearchFocus) { wantSearchFocus = false; $('#q-trace').focus(); }
    const q = new URLSearchParams({ limit: '200' });
    for (const k of SEARCH_FIELDS) {
      const val = params.get(k);
      if (val) q.set(k, k === 'from' || k === 'to' ? toApiTime(val) : val);
    }
    const res = $('#results');
    res.innerHTML = '<p class="muted">Searching…</p>';
    const data = await api('/api/traces?' + q.toString());
    if (gen !== generation) return;
    const rows = data.traces.map((t) => `<tr class="row" tabindex="0" data-href="#/trace/${enc(t.trace_id)}" data-id="${esc(t.trace_id)}" title="${esc(t.summary)}">
<td>${esc(when(t.started_at))}</td><td class="id">${esc(t.trace_id)}</td>
<td class="id" title="${esc(t.request_id)}">${esc((t.request_id || '—').slice(0, 14))}</td>
<td>${outcomeBadge(t.outcome)}</td><td class="num">${esc(t.gateway_status ?? '—')}</td>
<td class="kind">${esc(t.kind)}</td><td>${esc(t.component)}</td><td class="num">${pct(t.share)}</td>
<td class="num">${dur(t.elapsed_ms)}</td></tr>`).join('');
    const id = (params.get('trace_id') || '').toLowerCase();
    const open = !data.traces.length && /^[0-9a-f]{32}$/.test(id)
      ? `<p>No verdict for this id among the live ones. <a href="#/trace/${id}" id="open-from-store">Diagnose trace ${id} from the store</a>.</p>` : '';
    res.innerHTML = `<p class="summary-line" id="result-count">${data.traces.length} of ${count(data.total, 'trace')}, newest first</p>${open}
<table class="list" id="results-table"><thead><tr><th>started</th><th>trace id</th><th>request id</th><th>outcome</th>
<th class="num">status</th><th>root cause</th><th>component</th><th class="num">share</th><th class="num">elapsed</th></tr></thead>
<tbody>${rows}</tbody></table>`;
    listKeys($('#results-table'));
    if (lastOpened) {
      const r = res.querySelector(`tr.row[data-id="${CSS.escape(lastOpened)}"]`);
      lastOpened = null;
      if (r) r.focus();
    }
  }
  // Enter/click opens a row; arrows move between rows.
  function listKeys(table) {
    if (!table) return;
    const open = (tr) => { lastOpened = tr.dataset.id || null; location.hash = tr.dataset.href; };
    table.addEventListener('click', (e) => { const tr = e.target.closest('tr.row'); if (tr && !e.target.closest('a')) open(tr); });
    table.addEventListener('keydown', (e) => {
      const tr = e.target.closest('tr.row');
      if (!tr) return;
      if (e.key === 'Enter') { e.preventDefault(); open(tr); }
      else if (e.key === 'ArrowDown' && tr.nextElementSibling) { e.preventDefault(); tr.nextElementSibling.focus(); }
      else if (e.key === 'ArrowUp') {
        e.preventDefault();
        if (tr.previousElementSibling) tr.previousElementSibling.focus(); else { const s = $('#q-trace'); if (s) s.focus(); }
      }
    });
  }

  // ---------- the waterfall model (pure: verdict + events in, rows out)
  function buildRows(v, events) {
    const spans = v.timeline || [];
    const byId = new Map(spans.map((s) => [s.span_id, s]));
    const kids = new Map();
    const roots = [];
    for (const s of spans) {
      const p = s.parent_span_id;
      if (p && p !== s.span_id && byId.has(p)) {
        if (!kids.has(p)) kids.set(p, []);
        kids.get(p).push(s);
      } else roots.push(s);
    }
    const children = (s) => kids.get(s.span_id) || [];
    // Post-order facts: a call below? the smallest timeout below?
    const below = new Map();
    const order = [];
    const seen = new Set();
    const stack = roots.map((s) => [s, false]);
    while (stack.length) {
      const [s, done] = stack.pop();
      if (done) { order.push(s); continue; }
      if (seen.has(s.span_id)) continue;
      seen.add(s.span_id);
      stack.push([s, true]);
      for (const c of children(s)) stack.push([c, false]);
    }
    for (const s of spans) if (!seen.has(s.span_id)) { roots.push(s); seen.add(s.span_id); order.push(s); } // cycles
    for (const s of order) {
      let call = false;
      let timeout = null;
      for (const c of children(s)) {
        const b = below.get(c.span_id) || { call: false, timeout: null };
        call = call || b.call || isCallStage(c, b.call);
        for (const t of [c.timeout_ms, b.timeout]) if (num(t)) timeout = timeout == null ? t : Math.min(timeout, t);
      }
      below.set(s.span_id, { call, timeout });
    }
    function isCallStage(s, callBelow) {
      return CALL_STAGES.has(s.stage) && !(s.stage === 'network' && callBelow);
    }
    const rows = [];
    if (v.gateway) rows.push({ type: 'gw', g: v.gateway });
    const ev = (events && events.spans) || {};
    const emitted = new Set();
    const emit = (s, depth, inCall, attemptOf) => {
      if (emitted.has(s.span_id)) return; // a parent cycle in bad data
      emitted.add(s.span_id);
      const b = below.get(s.span_id) || { call: false, timeout: null };
      const isCall = !inCall && isCallStage(s, b.call);
      const callTimeout = num(s.timeout_ms) ? s.timeout_ms : b.timeout;
      rows.push({ type: 'span', s, depth, isCall, noTimeout: isCall && callTimeout == null, attemptOf, ev: ev[s.span_id] || null });
      const cs = children(s).slice().sort((a, b2) => a.start_offset_ms - b2.start_offset_ms);
      for (const unit of retryUnits(cs)) {
        if (unit.length === 1) { emit(unit[0], depth + 1, inCall || isCall, 0); continue; }
        const start = Math.min(...unit.map((m) => m.start_offset_ms));
        const end = Math.max(...unit.map((m) => m.start_offset_ms + m.duration_ms));
        rows.push({ type: 'grp', depth: depth + 1, members: unit, start, end, s: unit[0] });
        unit.forEach((m) => emit(m, depth + 2, inCall || isCall, unit.length));
      }
    };
    roots.sort((a, b) => a.start_offset_ms - b.start_offset_ms).forEach((r) => emit(r, 0, false, 0));
    return rows;
  }
  // Retries of one call: same stage and target under one parent; a new
  // call starts at each attempt 0.
  function retryUnits(siblings) {
    const units = [];
    const open = new Map();
    for (const s of siblings) {
      const key = s.stage + '\u0000' + s.component;
      const u = open.get(key);
      if (u && s.attempt > 0) { u.push(s); continue; }
      const nu = [s];
      units.push(nu);
      open.set(key, nu);
    }
    return units;
  }
  // Gaps between stream chunks/heartbeats, and from the last one to the end.
  function streamGaps(s, e) {
    if (!e || !e.events) return { ticks: [], gaps: [] };
    const ticks = e.events.filter((x) => STREAM_EVENTS.has(x.name)).map((x) => x.offset_ms).sort((a, b) => a - b);
    if (!ticks.length) return { ticks, gaps: [] };
    const gaps = [];
    for (let i = 1; i <= ticks.length; i++) {
      const from = ticks[i - 1];
      const to = i < ticks.length ? ticks[i] : s.duration_ms;
      if (to > from) gaps.push({ from, to, ms: to - from, tail: i === ticks.length });
    }
    return { ticks, gaps };
  }
  // DNS then connect from the span's start: the fields, else the events (a
  // duration when they carry one, else the event marks the phase's end).
  function dnsConnect(e) {
    if (!e) return { dns: null, connect: null };
    const find = (n) => (e.events || []).find((x) => x.name === n);
    const d = find('dns');
    const c = find('connect');
    const dns = num(e.dns_ms) ? e.dns_ms : d ? (num(d.duration_ms) ? d.duration_ms : Math.max(0, d.offset_ms)) : null;
    const connect = num(e.connect_ms) ? e.connect_ms
      : c ? (num(c.duration_ms) ? c.duration_ms : Math.max(0, c.offset_ms - (dns || 0))) : null;
    return { dns, connect };
  }

  // ---------- waterfall rendering
  function niceStep(span) {
    const raw = span / 8;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    return [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw) || raw;
  }
  function renderWaterfall(v, rows) {
    const g = v.gateway || {};
    const elapsed = v.budget.consumed_ms || 1;
    let maxT = Math.max(elapsed, g.request_time_ms || 0, v.budget.total_ms || 0, g.timeout_ms || 0);
    for (const r of rows) if (r.type === 'span') maxT = Math.max(maxT, r.s.start_offset_ms + r.s.duration_ms);
    maxT = maxT * 1.03 || 1;
    const X = (ms) => Math.max(0, Math.min(100, (ms / maxT) * 100)).toFixed(3);
    const W = (ms) => Math.max(0, Math.min(100, (ms / maxT) * 100)).toFixed(3);
    const gwTimeout = num(g.timeout_ms) ? g.timeout_ms : null;
    const marks = [];
    if (num(v.budget.total_ms)) marks.push({ cls: 'budget', at: v.budget.total_ms, text: `deadline ${dur(v.budget.total_ms)}`, title: `budget (${v.budget.source || '?'}) ${dur(v.budget.total_ms)}` });
    const cut = v.outcome === 'gateway_timeout' && num(g.request_time_ms);
    if (cut) marks.push({ cls: 'cut', at: g.request_time_ms, text: `gateway cut ${dur(g.request_time_ms)}`, title: `the gateway gave up after ${dur(g.request_time_ms)}` });
    if (gwTimeout != null && !marks.some((m) => Math.abs(m.at - gwTimeout) < maxT * 0.01)) {
      marks.push({ cls: 'gwto', at: gwTimeout, text: `read timeout ${dur(gwTimeout)}`, title: 'the gateway read timeout' });
    }
    marks.sort((a, b) => a.at - b.at);
    // Marks at (about) the same time are one label: "deadline · gateway cut 60.0 s".
    for (let i = marks.length - 1; i > 0; i--) {
      const [a, b] = [marks[i - 1], marks[i]];
      if (Math.abs(b.at - a.at) < maxT * 0.01) {
        a.text = `${a.text.replace(/ \S+ \S+$/, '')} · ${b.text}`;
        a.title = `${a.title}; ${b.title}`;
        marks.splice(i, 1);
      }
    }
    const step = niceStep(maxT);
    const axis = [];
    for (let t = 0; t <= maxT; t += step) axis.push(`<span class="t" style="left:${X(t)}%">${t === 0 ? '0' : dur(t)}</span>`);
    // Two lanes of labels above the time ticks: each label goes to the
    // first lane where it does not run into the one before it (extents
    // estimated from the text at 11 px bold, in % of the track).
    const trackPx = Math.max(200, (main().clientWidth || 1200) - (innerWidth < 900 ? 280 + 3 * 54 : 360 + 3 * 62) - 14);
    const laneEnd = [-Infinity, -Infinity];
    marks.forEach((m) => {
      const at = (m.at / maxT) * 100;
      const edge = at > 80 ? ' end' : at < 10 ? ' start' : '';
      const w = ((m.text.length * 6.6 + 10) / trackPx) * 100;
      const [from, to] = edge === ' end' ? [at - w, at] : edge === ' start' ? [at, at + w] : [at - w / 2, at + w / 2];
      const lane = laneEnd[0] <= from ? 0 : laneEnd[1] <= from ? 1 : laneEnd[0] <= laneEnd[1] ? 0 : 1;
      laneEnd[lane] = to;
      axis.push(`<span class="mark ${m.cls}${edge}${lane ? ' lane2' : ''}" style="left:${X(m.at)}%" title="${esc(m.title)}">${esc(m.text)}</span>`);
    });
    const lines = marks.map((m) => `<div class="vline ${m.cls}" style="left:${X(m.at)}%" data-ms="${m.at}" title="${esc(m.title)}"></div>`).join('');
    const hotMs = elapsed * 0.05;
    const out = new Array(rows.length);
    for (let i = 0; i < rows.length; i++) {
      const r = rows[i];
      let label, tip, track, d = '', c = '', left = '', cls = '';
      if (r.type === 'gw') {
        const conn = num(g.upstream_connect_ms) ? g.upstream_connect_ms : 0;
        const hdr = num(g.upstream_header_ms) ? g.upstream_header_ms : null;
        const resp = num(g.upstream_response_ms) ? g.upstream_response_ms : (g.request_time_ms || 0);
        const seg = (cl, a, b, t) => (b > a || cl === 'gw-connect') ? `<div class="gw-seg ${cl}" style="left:${X(a)}%;width:${W(Math.max(b - a, 0))}%" title="${esc(t)}"></div>` : '';
        track = seg('gw-connect', 0, conn, `upstream connect ${dur(conn)}`) +
          (hdr != null
            ? seg('gw-wait', conn, hdr, `waiting for the response header: header at ${dur(hdr)}`) + seg('gw-resp', hdr, resp, `response body until ${dur(resp)}`)
            : seg('gw-nohdr', conn, Math.max(resp, g.request_time_ms || 0), `no response header within ${dur(resp)}`));
        if (gwTimeout != null) track += tick(gwTimeout, maxT, X, `gateway read timeout ${dur(gwTimeout)}`);
        // Short enough for the label column; the full breakdown is in the
        // tooltip and in the segments' own titles.
        label = `<span class="stage" style="background:var(--gateway)">gateway</span><span class="nm">${esc(g.source || 'gateway')} · ${esc(g.status ?? '—')}` +
          ` <span class="comp">${hdr != null ? `header ${dur(hdr)}` : 'no header'}</span></span>`;
        tip = `gateway ${g.source || ''} ${g.status ?? ''}: connect ${dur(g.upstream_connect_ms)}, header ${dur(g.upstream_header_ms)}, response ${dur(g.upstream_response_ms)}`;
        d = dur(g.request_time_ms);
        left = dur(v.budget.total_ms);
      } else if (r.type === 'grp') {
        const n = r.members.length;
        label = `${indent(r.depth)}<span class="nm">↻ ${esc(r.s.component)} · ${n} attempts · ${dur(r.members.reduce((a, m) => a + m.duration_ms, 0))} in all</span>`;
        track = `<div class="grp-span" style="left:${X(r.start)}%;width:${W(r.end - r.start)}%" title="${n} attempts of one call"></div>`;
        d = dur(r.end - r.start);
        c = dur(r.members.reduce((a, m) => a + m.critical_ms, 0));
        cls = 'grp';
        tip = `${r.s.component}: ${n} attempts of one call`;
      } else {
        const s = r.s;
        const crit = s.critical_ms > 0;
        cls = crit ? '' : 'off';
        const flags = (r.noTimeout ? '<span class="flag" title="this call ran with no timeout">no timeout</span>' : '') +
          (s.attempt > 0 ? `<span class="flag retry">retry ${s.attempt}</span>` : '') +
          (['timeout', 'error', 'cancelled'].includes(s.status) ? `<span class="flag status">${esc(s.status)}</span>` : '');
        label = `${indent(r.depth)}<span class="stage" style="background:var(--${STAGES.includes(s.stage) ? s.stage : 'other'})">${esc(s.stage)}</span>` +
          `<span class="nm">${esc(s.name)}${s.component !== s.name ? `<span class="comp">${esc(s.component)}</span>` : ''}</span>${flags}`;
        tip = `${s.stage} · ${s.name} · ${s.component}${r.noTimeout ? ' · no timeout' : ''}${s.attempt > 0 ? ` · retry ${s.attempt}` : ''} · ${s.status}`;
        track = spanTrack(r, X, W, gwTimeout, maxT, hotMs);
        d = dur(s.duration_ms);
        c = crit ? dur(s.critical_ms) : '';
        left = budgetLeft(v, r);
      }
      out[i] = `<div class="wf-row ${cls}" data-i="${i}"><div class="wf-label" title="${esc(tip)}">${label}</div><div class="wf-track">${track}</div>` +
        `<div class="wf-num">${d}</div><div class="wf-num">${c}</div><div class="wf-num">${left}</div></div>`;
    }
    return `<div class="wf-row wf-head" aria-hidden="true"><div class="wf-label">span · stage · component</div>` +
      `<div class="wf-track"><div class="axis">${axis.join('')}</div></div><div class="wf-num">duration</div>` +
      `<div class="wf-num">critical</div><div class="wf-num">budget left</div></div>` +
      `<div class="wf-body"><div class="lines">${lines}</div>${out.join('')}</div>`;
  }
  const indent = (d) => (d ? `<span class="ind" style="width:${Math.min(d, 12) * 12}px"></span>` : '');
  function tick(at, maxT, X, title) {
    const out = at > maxT;
    return `<div class="tick${out ? ' out' : ''}" style="left:${X(at)}%" title="${esc(title)}"></div>`;
  }
  function spanTrack(r, X, W, gwTimeout, maxT, hotMs) {
    const s = r.s;
    const start = s.start_offset_ms;
    const duration = Math.max(s.duration_ms, 0);
    let inner = '';
    const own = s.phases && Object.keys(s.phases).length;
    const ph = own ? s.phases : callPhaseMap(s.llm_phases);
    const inferredBar = !own && s.llm_phases && s.llm_phases.inferred ? ' inferred' : '';
    const names = PHASES.filter((p) => num(ph[p])).concat(Object.keys(ph).filter((p) => !PHASES.includes(p) && num(ph[p])));
    const total = names.reduce((a, p) => a + ph[p], 0);
    if (total > 0 && duration > 0) {
      const k = total > duration ? duration / total : 1;
      let acc = 0;
      for (const p of names) {
        const w = ph[p] * k;
        inner += `<div class="ph ph-${PHASES.includes(p) ? p : 'other'}${inferredBar}" style="left:${(acc / duration * 100).toFixed(2)}%;width:${(w / duration * 100).toFixed(2)}%" title="${esc(p)} ${dur(ph[p])}${own ? '' : ` (${esc(phaseSource(s.llm_phases))})`}"></div>`;
        acc += w;
      }
    }
    const dc = dnsConnect(r.ev);
    if (duration > 0 && (num(dc.dns) || num(dc.connect))) {
      const a = Math.min(dc.dns || 0, duration);
      const b = Math.min(a + (dc.connect || 0), duration);
      inner += `<div class="dns" style="left:0;width:${(b / duration * 100).toFixed(2)}%" title="DNS ${dur(dc.dns)}, connect ${dur(dc.connect)}"></div>`;
    }
    const hot = s.critical_ms >= hotMs && s.critical_ms > 0;
    let t = `<div class="bar${s.critical_ms > 0 ? ' crit' : ''}${hot ? ' hot' : ''}" style="left:${X(start)}%;width:${W(duration)}%;background:var(--${STAGES.includes(s.stage) ? s.stage : 'other'})"` +
      ` title="${esc(s.name)}: ${dur(duration)}, ${dur(s.critical_ms)} on the critical path">${inner}</div>`;
    if (num(s.timeout_ms)) t += tick(start + s.timeout_ms, maxT, X, `timeout ${dur(s.timeout_ms)}`);
    if (r.noTimeout) t += `<div class="noto" style="left:calc(${X(start + duration)}% + 2px)" title="no timeout">∞</div>`;
    const { ticks, gaps } = streamGaps(s, r.ev);
    for (const x of ticks.slice(0, MAX_EVENT_TICKS)) t += `<div class="ev" style="left:${X(start + x)}%"></div>`;
    const minGap = Math.max(1000, maxT * 0.02);
    for (const gp of gaps) {
      const over = gwTimeout != null && gp.ms >= gwTimeout;
      if (!over && gp.ms < minGap) continue;
      const what = gp.tail ? 'no chunk or heartbeat until the span ended' : 'no chunk or heartbeat';
      t += `<div class="gap${over ? ' over' : ''}" style="left:${X(start + gp.from)}%;width:${W(gp.ms)}%" data-gap-ms="${gp.ms.toFixed(1)}"` +
        ` title="${esc(`${what}: ${dur(gp.ms)}${gwTimeout != null ? ` (gateway read timeout ${dur(gwTimeout)})` : ''}`)}"></div>`;
    }
    return t;
  }
  // An LLM call's phases (timeline `llm_phases`) as a phase → ms map.
  function callPhaseMap(cp) {
    const m = {};
    if (!cp) return m;
    for (const p of ['queue', 'prefill', 'decode']) if (num(cp[p + '_ms'])) m[p] = cp[p + '_ms'];
    return m;
  }
  // Where a call's phases came from, in a few words: the source the
  // evidence names, or the finished calls they were inferred from.
  function phaseSource(cp) {
    const n = cp.inferred;
    if (!n) return cp.source;
    const model = (cp.source.match(/finished calls of (\S+)/) || [])[1] || 'the model';
    return `inferred from ${count(n.calls, 'finished call')} of ${model}`;
  }
  function neighboursText(n) {
    const metered = n.metered === n.calls ? ', all counted by the model server\'s metrics'
      : n.metered ? `, ${n.metered} of them counted by the model server's metrics` : '';
    return `${count(n.calls, 'finished call')} within ±${n.window_min} min${metered}: on average queue ${dur(n.queue_ms)}, prefill ${dur(n.prefill_ms)}, decode ${dur(n.decode_ms)}`;
  }
  function phasesCard(v) {
    const calls = (v.timeline || []).filter((s) => s.llm_phases);
    if (!calls.length) return '';
    const li = calls.map((s) => {
      const cp = s.llm_phases;
      const split = ['queue', 'prefill', 'decode'].filter((p) => num(cp[p + '_ms'])).map((p) => `${p} ${dur(cp[p + '_ms'])}`).join(', ');
      const nb = cp.inferred ? `<div class="muted neighbours">neighbours: ${esc(neighboursText(cp.inferred))}</div>` : '';
      return `<li data-span="${esc(s.span_id)}"><b>${esc(s.component)}</b> ${esc(split)} · <span class="phase-source">${esc(phaseSource(cp))}</span>${nb}</li>`;
    }).join('');
    return `<section class="card" id="llm-phases" aria-label="Model phases"><h2>Model phases</h2><ul>${li}</ul></section>`;
  }
  function budgetLeft(v, r) {
    const s = r.s;
    let leftMs = s.remaining_budget_ms;
    let approx = false;
    if (!num(leftMs)) {
      if (!r.isCall || !num(v.budget.total_ms)) return '';
      leftMs = v.budget.total_ms - s.start_offset_ms;
      approx = true;
    }
    const short = leftMs < s.duration_ms ? ' style="color:var(--bad);font-weight:600"' : '';
    return `<span${short} title="${approx ? 'derived: budget − start' : 'reported by the span'}">${approx ? '≈' : ''}${dur(leftMs)}</span>`;
  }

  // ---------- trace view
  let current = null; // { v, rows, sel }
  async function viewTrace(id, gen) {
    main().innerHTML = '<p class="muted">Loading trace…</p>';
    const t0 = performance.now();
    const [v, events] = await Promise.all([
      api('/api/traces/' + enc(id)),
      api('/api/traces/' + enc(id) + '/events').catch(() => null),
    ]);
    if (gen !== generation) return;
    const t1 = performance.now();
    const rows = buildRows(v, events);
    const spanCount = (v.timeline || []).length;
    main().innerHTML = traceHeader(v, spanCount) + verdictCard(v) + phasesCard(v) + legend() +
      `<div class="wf" id="waterfall" tabindex="0" role="listbox" aria-label="Waterfall: arrows move, Enter shows details">${renderWaterfall(v, rows)}</div>` +
      '<p class="perf" id="perf"></p>';
    const wf = $('#waterfall');
    void wf.offsetHeight; // lay out before stopping the clock
    const t2 = performance.now();
    current = { v, rows, sel: -1 };
    wf.dataset.trace = v.trace_id;
    wf.dataset.spans = String(spanCount);
    wf.dataset.renderMs = (t2 - t1).toFixed(1);
    $('#perf').textContent = `${count(spanCount, 'span')}: data ${Math.round(t1 - t0)} ms, drawn in ${Math.round(t2 - t1)} ms`;
    wf.addEventListener('keydown', waterfallKeys);
    wf.addEventListener('click', (e) => {
      const row = e.target.closest('.wf-body .wf-row');
      if (row) { select(Number(row.dataset.i)); openDetail(); }
    });
    $('#crit-only').addEventListener('change', (e) => wf.classList.toggle('crit-only', e.target.checked));
    wf.focus({ preventScroll: true });
  }
  function traceHeader(v, n) {
    const g = v.gateway;
    return `<div class="trace-head"><h1>Trace <span class="mono" id="trace-id">${esc(v.trace_id)}</span></h1>${outcomeBadge(v.outcome)}</div>
<div class="facts"><span>request <b class="mono">${esc(v.request_id || '—')}</b></span><span>started <b>${esc(when(v.started_at))}</b></span>
<span>gateway <b>${g ? `${esc(g.source)} ${esc(g.status ?? '—')} after ${dur(g.request_time_ms)}` : 'no record'}</b></span>
<span>budget <b id="budget-total">${dur(v.budget.total_ms)}</b> (${esc(v.budget.source || 'unknown')}), used <b>${dur(v.budget.consumed_ms)}</b></span>
<span><b>${n}</b> spans</span></div>`;
  }
  function verdictCard(v) {
    const rc = v.root_cause;
    const li = (xs, f) => (xs && xs.length ? `<ul>${xs.map((x) => `<li>${f(x)}</li>`).join('')}</ul>` : '<p class="muted">none</p>');
    return `<section class="card verdict" id="verdict" aria-label="Verdict"><div>
<div class="rc-kind k-${esc(rc.kind)}" id="rc-kind">${esc(rc.kind)}</div>
<div>on <b id="rc-component">${esc(rc.component)}</b> · <span class="sharebar"><i style="width:${Math.round((rc.share || 0) * 100)}%"></i></span>${pct(rc.share)} of the request's time on the critical path</div>
<p class="rc-summary" id="rc-summary">${esc(rc.summary)}</p>
<h2>Evidence</h2><div id="evidence">${li(rc.evidence, (x) => clamp(x))}</div></div>
<div><h2>Contributing</h2><div id="contributing">${li(v.contributing, (c) => `<span class="kind">${esc(c.kind)}</span> on ${esc(c.component)} · ${pct(c.share)}`)}</div>
<h2>Findings</h2><div id="findings">${li(v.findings, (f) => `<span class="kind">${esc(f.kind)}</span> ${clamp(f.summary)}`)}</div></div></section>`;
  }
  function legend() {
    const sw = (c, t) => `<span><i style="background:${c}"></i>${t}</span>`;
    return `<div class="legend">${['service', 'llm', 'tool', 'memory', 'network', 'judge', 'queue'].map((s) => sw(`var(--${s})`, s)).join('')}
<span>LLM phases:</span>${PHASES.map((p) => sw(`var(--${p === 'queue' ? 'queue-ph' : p})`, p)).join('')}<span><i class="ph inferred" style="position:static;display:inline-block;background-color:var(--queue-ph)"></i>inferred</span>
<span><i style="border-left:2px dashed var(--bad);width:2px"></i>deadline</span><span><i style="border-left:2px solid var(--warn);width:2px"></i>gateway cut</span>
<span><i style="background:#111;width:3px"></i>timeout</span><span class="flag">no timeout</span>
<span><i class="gap over" style="position:static;display:inline-block"></i>stream gap</span><span><i style="box-shadow:0 0 0 2px #111 inset;background:#fff"></i>critical path</span>
<label><input type="checkbox" id="crit-only"> critical path only (<kbd>c</kbd>)</label></div>`;
  }
  function select(i) {
    const wf = $('#waterfall');
    if (!current || !wf) return;
    const rows = wf.querySelectorAll('.wf-body .wf-row');
    const visible = [...rows].filter((r) => r.offsetParent !== null);
    if (!visible.length) return;
    const prev = wf.querySelector('.wf-row.sel');
    if (prev) prev.classList.remove('sel');
    const target = rows[i] && rows[i].offsetParent !== null ? rows[i] : visible[0];
    target.classList.add('sel');
    current.sel = Number(target.dataset.i);
    target.scrollIntoView({ block: 'nearest' });
  }
  function waterfallKeys(e) {
    const wf = $('#waterfall');
    const rows = [...wf.querySelectorAll('.wf-body .wf-row')].filter((r) => r.offsetParent !== null);
    const pos = rows.findIndex((r) => r.classList.contains('sel'));
    const go = (p) => { e.preventDefault(); const r = rows[Math.max(0, Math.min(rows.length - 1, p))]; if (r) select(Number(r.dataset.i)); };
    switch (e.key) {
      case 'ArrowDown': go(pos + 1); break;
      case 'ArrowUp': go(pos - 1); break;
      case 'PageDown': go(pos + 20); break;
      case 'PageUp': go(pos - 20); break;
      case 'Home': go(0); break;
      case 'End': go(rows.length - 1); break;
      case 'Enter': e.preventDefault(); if (pos < 0) go(0); openDetail(); break;
      case 'c': { const cb = $('#crit-only'); cb.checked = !cb.checked; wf.classList.toggle('crit-only', cb.checked); break; }
      default:
    }
  }
  function openDetail() {
    if (!current || current.sel < 0) return;
    const r = current.rows[current.sel];
    const kv = [];
    if (r.type === 'gw') {
      for (const [k, val] of Object.entries(r.g)) kv.push([k, val]);
    } else {
      const s = r.s;
      for (const k of ['name', 'service', 'stage', 'component', 'status', 'attempt', 'span_id', 'parent_span_id']) kv.push([k, s[k]]);
      for (const k of ['start_offset_ms', 'duration_ms', 'critical_ms', 'timeout_ms', 'remaining_budget_ms']) kv.push([k, dur(s[k])]);
      if (r.type === 'grp') kv.push(['attempts', r.members.length]);
      if (r.type === 'span' && r.isCall) kv.push(['timeout of the call', r.noTimeout ? 'none (no timeout anywhere in this call)' : 'set']);
      for (const [p, ms] of Object.entries(s.phases || {})) kv.push([`phase ${p}`, dur(ms)]);
      if (s.llm_phases) {
        kv.push(['phase source', phaseSource(s.llm_phases)]);
        if (!Object.keys(s.phases || {}).length) {
          for (const [p, ms] of Object.entries(callPhaseMap(s.llm_phases))) kv.push([`phase ${p}`, dur(ms)]);
        }
        if (s.llm_phases.inferred) kv.push(['neighbours', neighboursText(s.llm_phases.inferred)]);
      }
      const { ticks, gaps } = streamGaps(s, r.ev);
      if (ticks.length) {
        kv.push(['stream events', ticks.length]);
        kv.push(['longest silence', dur(Math.max(...gaps.map((gp) => gp.ms)))]);
      }
      const dc = dnsConnect(r.ev);
      if (num(dc.dns)) kv.push(['DNS', dur(dc.dns)]);
      if (num(dc.connect)) kv.push(['connect', dur(dc.connect)]);
    }
    let d = $('#detail');
    if (!d) {
      d = document.createElement('aside');
      d.id = 'detail';
      d.className = 'detail';
      d.setAttribute('role', 'dialog');
      d.setAttribute('aria-label', 'Span details');
      document.body.appendChild(d);
    }
    const title = r.type === 'gw' ? 'gateway' : r.s.name;
    d.innerHTML = `<h2>${esc(title)}</h2><table>${kv.map(([k, val]) => `<tr><td>${esc(k)}</td><td>${esc(val ?? '—')}</td></tr>`).join('')}</table>
<p class="muted"><kbd>Esc</kbd> closes</p><button type="button" id="detail-close">Close</button>`;
    $('#detail-close').addEventListener('click', () => closeDetail(true));
  }
  function closeDetail(refocus) {
    const d = $('#detail');
    if (!d) return false;
    d.remove();
    if (refocus && $('#waterfall')) $('#waterfall').focus({ preventScroll: true });
    return true;
  }

  // ---------- incidents
  async function viewIncidents(gen) {
    main().innerHTML = '<h1>Incidents</h1><p class="muted">Loading…</p>';
    const data = await api('/api/incidents');
    if (gen !== generation) return;
    const rows = data.incidents.map((i) => `<tr class="row" tabindex="0" data-href="#/incidents/${enc(i.id)}" data-id="${esc(i.id)}">
<td>${esc(i.status)}</td><td class="wrap">${esc(i.headline)}</td><td class="kind">${esc(i.kind)}</td><td>${esc(i.component)}</td>
<td>${esc(when(i.window && i.window.start))} → ${esc(when(i.window && i.window.end))}</td><td class="num">${esc(i.trace_count)}</td></tr>`).join('');
    main().innerHTML = `<h1>Incidents</h1><p class="summary-line">${count(data.incidents.length, 'incident')} (failing traces grouped by root cause and component)</p>
<table class="list" id="incidents-table"><thead><tr><th>status</th><th>headline</th><th>root cause</th><th>component</th><th>window</th><th class="num">traces</th></tr></thead><tbody>${rows}</tbody></table>`;
    listKeys($('#incidents-table'));
    main().focus({ preventScroll: true });
  }
  function statText(key, val) {
    const ms = /_ms$/.test(key);
    const f = (x) => (x == null ? 'none' : num(x) ? (ms ? dur(x) : String(Math.round(x * 100) / 100)) : esc(JSON.stringify(x)));
    if (val && typeof val === 'object' && !Array.isArray(val)) {
      const rank = (k) => { const i = ['n', 'p50', 'p90', 'p99', 'max']; return i.includes(k) ? i.indexOf(k) : i.length; };
      return Object.entries(val).sort((a, b) => rank(a[0]) - rank(b[0])).map(([k, x]) => `${esc(k)} ${k === 'n' ? esc(x) : f(x)}`).join(' · ');
    }
    return f(val);
  }
  async function viewIncident(id, gen) {
    main().innerHTML = '<p class="muted">Loading incident…</p>';
    const r = await api('/api/incidents/' + enc(id));
    if (gen !== generation) return;
    const t = r.totals || {};
    const box = (n, label) => `<div><b>${esc(n)}</b><span>${label}</span></div>`;
    const causes = (r.causes || []).map((c) => `<tr><td class="kind">${esc(c.kind)}</td><td>${esc(c.component)}</td><td class="num">${esc(c.count)}</td>
<td><span class="sharebar"><i style="width:${Math.round(c.share * 100)}%"></i></span>${pct(c.share)}</td></tr>`).join('');
    const stats = Object.entries(r.cause_stats || {}).map(([k, val]) => `<tr><td>${esc(k)}</td><td>${statText(k, val)}</td></tr>`).join('');
    const llm = (r.llm_latency_by_input_tokens || []).map((b) => `<tr><td>${esc(b.bucket)}</td><td class="num">${esc(b.calls)}</td>
<td class="num">${dur(b.p50_ms)}</td><td class="num">${dur(b.p90_ms)}</td><td class="num">${dur(b.p99_ms)}</td><td class="num">${dur(b.max_ms)}</td><td class="num">${pct(b.share_504)}</td></tr>`).join('');
    const findings = (r.findings || []).map((f) => `<li><span class="kind">${esc(f.kind)}</span> ${clamp(f.summary)} <span class="muted">(${count(f.traces, 'trace')})</span></li>`).join('');
    const examples = (r.example_trace_ids || []).map((x) => `<li><a class="mono" href="#/trace/${enc(x)}">${esc(x)}</a></li>`).join('');
    main().innerHTML = `<p class="muted"><a href="#/incidents">Incidents</a> / <span class="mono">${esc(r.id)}</span></p>
<h1 class="headline" id="incident-headline">${esc(r.headline)}</h1>
<div class="facts"><span>status <b>${esc(r.status)}</b></span><span>window <b>${esc(when(r.window.start))} → ${esc(when(r.window.end))}</b></span>
<span>fingerprint <b class="mono">${esc(r.fingerprint)}</b></span><span><a href="/api/incidents/${enc(r.id)}?format=markdown">Markdown report</a></span></div>
<div id="incident-charts" class="charts"><p class="muted">Loading the charts…</p></div>
<h2>Totals</h2><div class="totals" id="totals">${box(t.requests, 'requests')}${box(t.failures, 'failures')}${box(t.gateway_504, 'gateway 504')}${box(t.gateway_503, 'gateway 503')}${box(t.timeouts, 'timeouts')}</div>
<div class="two"><div><h2>Causes</h2><table class="list" id="causes"><thead><tr><th>root cause</th><th>component</th><th class="num">traces</th><th>share of failures</th></tr></thead><tbody>${causes}</tbody></table></div>
<div><h2>What explains it</h2><table class="list" id="cause-stats"><tbody>${stats || '<tr><td class="muted">no statistics</td></tr>'}</tbody></table></div></div>
<h2>LLM latency by input tokens</h2><table class="list" id="llm-latency"><thead><tr><th>input tokens</th><th class="num">calls</th><th class="num">P50</th><th class="num">P90</th><th class="num">P99</th><th class="num">max</th><th class="num">ended in 504</th></tr></thead><tbody>${llm}</tbody></table>
<h2>Findings</h2>${findings ? `<ul id="incident-findings">${findings}</ul>` : '<p class="muted">none</p>'}
<h2>Example traces</h2><ul id="examples">${examples}</ul>`;
    main().focus({ preventScroll: true });
    window.overtimeCharts.incident(r.id, () => gen === generation);
  }

  // ---------- global keys
  document.addEventListener('keydown', (e) => {
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey) return;
    const typing = e.target.matches && e.target.matches('input, select, textarea');
    const keys = $('#keys');
    if (e.key === 'Escape') {
      e.preventDefault();
      if (!keys.hidden) keys.hidden = true;
      else if (closeDetail(true)) { /* closed */ } else if (typing) e.target.blur();
      else goBack();
    } else if (e.key === '/' && !typing) {
      e.preventDefault();
      const s = $('#q-trace');
      if (s && parseHash().parts.length === 0) s.focus();
      else { wantSearchFocus = true; location.hash = '#/'; }
    } else if (e.key === '?' && !typing) {
      keys.hidden = !keys.hidden;
    }
  });
  window.addEventListener('hashchange', route);
  window.addEventListener('DOMContentLoaded', () => {
    main().innerHTML = '';
    route();
  });
  // For tests and the curious: the pure parts.
  window.overtimeUi = { buildRows, retryUnits, streamGaps, dur };
  // The helpers advice.js (the #/advice page) renders with.
  window.overtime = { api, esc, dur, pct, main, kinds };
})();
