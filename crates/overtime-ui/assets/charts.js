// overtime UI: charts over time, drawn as SVG by the page itself (no
// library). The incident page's two charts — failures per minute stacked
// by root cause over the hour before the incident, its window and after,
// with the window marked; the dominant call's P50/P99 over the same
// minutes — and the overview page (#/overview): requests and failures per
// minute, chain health per minute, the early warnings and alerts that
// fired marked on both. Talks to GET /api/incidents/{id}/timeline and
// GET /api/overview; uses app.js's helpers (window.overtime), and its
// kinds (GET /api/kinds) for the colours of the causes.
//
// Every drawn mark carries what it shows in data attributes (data-t: the
// minute, epoch ms; data-n / data-v: the value; data-cause, data-series),
// and every chart its scale (data-ymax, data-plot-height), so a test (or
// a person with devtools) reads the values back from the drawing.
'use strict';
(() => {
  const W = 1100;
  const M = { l: 52, r: 14, t: 16, b: 26 };
  // A kind's colour is its rule's (GET /api/kinds, through app.js); a kind
  // the server did not list (a peer's newer rule) gets one of these.
  const EXTRA = ['#2b8a3e', '#862e9c', '#1864ab', '#e67700'];
  const colorOf = (colors) => (k, i) => colors[k] || EXTRA[i % EXTRA.length];
  const pad2 = (n) => String(n).padStart(2, '0');
  const hhmm = (ms) => { const d = new Date(ms); return `${pad2(d.getUTCHours())}:${pad2(d.getUTCMinutes())}`; };
  const num = (x) => typeof x === 'number' && isFinite(x);

  // The axis of values up to `v`: a step of 1, 2, 2.5 or 5 × 10^k giving
  // at most 5 intervals, and the top at a whole number of steps.
  function axis(v) {
    const raw = (v > 0 ? v : 1) / 4;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * p).find((m) => m >= raw);
    return { max: Math.max(step, Math.ceil(v / step) * step), step };
  }
  // The frame of one chart over [t0, t1): scales, axes, grid.
  function frame(t0, t1, ax, h, yfmt) {
    const ymax = ax.max;
    const ph = h - M.t - M.b;
    const x = (t) => M.l + ((t - t0) / (t1 - t0)) * (W - M.l - M.r);
    const y = (v) => M.t + ph - (v / ymax) * ph;
    let g = '';
    for (let k = 0; k * ax.step <= ymax + 1e-9; k++) {
      const v = k * ax.step;
      g += `<line class="grid" x1="${M.l}" x2="${W - M.r}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}"/>` +
        `<text class="ylab" x="${M.l - 6}" y="${(y(v) + 4).toFixed(1)}">${yfmt(v)}</text>`;
    }
    const span = t1 - t0;
    const step = [60e3, 5 * 60e3, 10 * 60e3, 15 * 60e3, 30 * 60e3, 3600e3, 3 * 3600e3].find((s) => span / s <= 12) || 6 * 3600e3;
    for (let t = Math.ceil(t0 / step) * step; t < t1; t += step) {
      g += `<line class="tick" x1="${x(t).toFixed(1)}" x2="${x(t).toFixed(1)}" y1="${M.t + ph}" y2="${M.t + ph + 4}"/>` +
        `<text class="xlab" x="${x(t).toFixed(1)}" y="${M.t + ph + 16}">${hhmm(t)}</text>`;
    }
    g += `<line class="axis" x1="${M.l}" x2="${W - M.r}" y1="${M.t + ph}" y2="${M.t + ph}"/>`;
    return { x, y, ph, grid: g };
  }
  function svg(id, h, f, ymax, body, label) {
    // (the ymax and plot geometry are there to read the drawing back)
    return `<svg id="${id}" class="chart" viewBox="0 0 ${W} ${h}" role="img" aria-label="${window.overtime.esc(label)}"` +
      ` data-ymax="${ymax}" data-plot-height="${f.ph}" data-plot-top="${M.t}">${f.grid}${body}</svg>`;
  }
  // A marked span of time: the incident window, an alert.
  // A mark's label: after its start, or before its end near the right edge.
  function label(x0, x1, y, text) {
    const right = x0 > W * 0.7;
    const x = right ? Math.min(x1, W - M.r) - 3 : x0 + 3;
    return `<text x="${x.toFixed(1)}" y="${y}"${right ? ' text-anchor="end"' : ''}>${window.overtime.esc(text)}</text>`;
  }
  // Labels of marks that start together go on lines of their own (row).
  function band(f, a, b, cls, text, attrs, row = 0) {
    const x0 = f.x(a);
    const x1 = Math.max(f.x(b), x0 + 2);
    return `<g class="${cls}" ${attrs}><rect x="${x0.toFixed(1)}" y="${M.t}" width="${(x1 - x0).toFixed(1)}" height="${f.ph}"/>` +
      (text ? label(x0, x1, M.t + 11 + (row % 8) * 12, text) : '') + '</g>';
  }
  // Stacked bars: series [{key, values}], one bar per bucket.
  function bars(id, label, t, step, series, marks, h = 220) {
    const { esc } = window.overtime;
    const t0 = t[0];
    const t1 = t[t.length - 1] + step;
    const totals = t.map((_, i) => series.reduce((a, s) => a + (s.values[i] || 0), 0));
    const ax = axis(Math.max(1, ...totals));
    const ymax = ax.max;
    const f = frame(t0, t1, ax, h, (v) => String(Math.round(v * 10) / 10));
    let body = marks(f);
    const bw = Math.max(1, f.x(t0 + step) - f.x(t0) - 1);
    t.forEach((tm, i) => {
      let acc = 0;
      series.forEach((s, k) => {
        const n = s.values[i] || 0;
        if (!n) return;
        const y1 = f.y(acc);
        const y0 = f.y(acc + n);
        body += `<rect class="cbar" x="${f.x(tm).toFixed(1)}" y="${y0.toFixed(2)}" width="${bw.toFixed(1)}" height="${(y1 - y0).toFixed(2)}"` +
          ` fill="${s.color || EXTRA[k % EXTRA.length]}" data-t="${tm}" data-cause="${esc(s.key)}" data-n="${n}"><title>${hhmm(tm)} UTC · ${esc(s.key)}: ${n}</title></rect>`;
        acc += n;
      });
    });
    return svg(id, h, f, ymax, body, label);
  }
  // Lines with gaps where a value is missing: series [{key, values, color}].
  function lines(id, label, t, step, series, marks, opts = {}) {
    const { esc } = window.overtime;
    const h = opts.h || 200;
    const t0 = opts.t0 ?? t[0];
    const t1 = opts.t1 ?? t[t.length - 1] + step;
    const all = series.flatMap((s) => s.values.filter(num));
    const ax = opts.ymax ? { max: opts.ymax, step: opts.ymax / 4 } : axis(Math.max(...all, 0) * 1.05 || 1);
    const ymax = ax.max;
    const f = frame(t0, t1, ax, h, opts.yfmt || ((v) => String(v)));
    let body = marks(f);
    if (opts.threshold != null) {
      body += `<line class="threshold" x1="${M.l}" x2="${W - M.r}" y1="${f.y(opts.threshold).toFixed(1)}" y2="${f.y(opts.threshold).toFixed(1)}"/>` +
        `<text class="thlab" x="${W - M.r - 4}" y="${(f.y(opts.threshold) - 4).toFixed(1)}">${esc(opts.thresholdLabel || '')}</text>`;
    }
    const mid = opts.points ? 0 : step / 2;
    for (const s of series) {
      let d = '';
      let pen = false;
      let pts = '';
      s.values.forEach((v, i) => {
        const tm = opts.points ? s.t[i] : t[i];
        if (!num(v)) { pen = false; return; }
        const px = f.x(tm + mid).toFixed(1);
        const py = f.y(Math.min(v, ymax)).toFixed(2);
        d += `${pen ? 'L' : 'M'}${px},${py}`;
        pen = true;
        pts += `<circle class="pt" cx="${px}" cy="${py}" r="2.2" fill="${s.color}" data-series="${esc(s.key)}" data-t="${tm}" data-v="${v}"><title>${hhmm(tm)} UTC · ${esc(s.key)} ${esc(opts.vfmt ? opts.vfmt(v) : v)}</title></circle>`;
      });
      body += `<path class="line" d="${d}" stroke="${s.color}" data-series="${esc(s.key)}"/>${pts}`;
    }
    return svg(id, h, f, ymax, body, label);
  }
  const legend = (items) => `<div class="chart-legend">${items.map((i) => `<span><i style="background:${i.color}"></i>${window.overtime.esc(i.text)}</span>`).join('')}</div>`;

  // What the failure series says about the incident's course.
  function course(t, step, causes, win) {
    const total = t.map((_, i) => causes.reduce((a, c) => a + (c.failures[i] || 0), 0));
    const first = total.findIndex((n) => n > 0);
    let last = -1;
    total.forEach((n, i) => { if (n > 0) last = i; });
    if (first < 0) return 'No failures in this range.';
    const end = t[t.length - 1] + step;
    const quiet = Math.round((end - (t[last] + step)) / 60000);
    const since = quiet > 0 ? `no failure in the ${quiet} minute${quiet === 1 ? '' : 's'} of data after it` : 'still failing in the last minute of data';
    const before = total.slice(0, Math.max(0, (win.start_ms - t[0]) / step | 0)).reduce((a, n) => a + n, 0);
    return `First failure ${hhmm(t[first])} UTC, last ${hhmm(t[last])} UTC: ${since}; ${before} in the hour before the window.`;
  }

  // The incident page's charts into #incident-charts.
  async function incident(id, live) {
    const { api, esc, dur } = window.overtime;
    const box = document.getElementById('incident-charts');
    if (!box) return;
    let d;
    try {
      d = await api(`/api/incidents/${encodeURIComponent(id)}/timeline`);
    } catch (e) {
      if (live()) box.innerHTML = `<p class="error">Charts unavailable: ${esc(e.message)}</p>`;
      return;
    }
    const known = await window.overtime.kinds().catch(() => []);
    if (!live()) return;
    const color = colorOf(Object.fromEntries(known.map((k) => [k.name, k.color])));
    const { t_ms: t, step_ms: step, window: win } = d;
    const windowBand = (f) => band(f, win.start_ms, win.end_ms + step, 'window', 'incident window',
      `data-start="${win.start_ms}" data-end="${win.end_ms}"`);
    const series = d.causes.map((c, i) => ({ key: c.kind, values: c.failures, color: color(c.kind, i) }));
    const dom = d.dominant;
    const lat = [{ key: 'p50', values: dom.p50_ms, color: '#3f7be8' }, { key: 'p99', values: dom.p99_ms, color: '#b3261e' }];
    const totals = d.causes.map((c) => c.failures.reduce((a, n) => a + n, 0));
    box.innerHTML = `<h2>Failures per minute, by root cause</h2>
<p class="chart-note" id="incident-course">${esc(course(t, step, d.causes, win))}</p>
<div class="chart-box">${bars('chart-failures', 'Failures per minute by root cause', t, step, series, windowBand)}</div>
${legend(series.map((s, i) => ({ color: s.color, text: `${s.key} (${totals[i]})` })))}
<h2>${esc(dom.component)}: P50 and P99 per minute</h2>
<div class="chart-box">${lines('chart-latency', `${dom.component} latency per minute`, t, step, lat, windowBand, { yfmt: dur, vfmt: dur })}</div>
${legend([{ color: '#3f7be8', text: 'P50' }, { color: '#b3261e', text: 'P99' }, { color: 'rgba(179,38,30,.15)', text: 'incident window' }])}
<p class="muted">${dom.matched_by ? `${dom.calls.reduce((a, n) => a + n, 0)} calls of ${esc(dom.component)} (matched by ${esc(dom.matched_by)}) in the store` : `no call of ${esc(dom.component)} in the store for this range`}.</p>`;
    box.dataset.ready = 'true';
  }

  // The overview page (#/overview).
  async function view(gen, live) {
    const { api, esc, main } = window.overtime;
    const params = new URLSearchParams(location.hash.split('?')[1] || '');
    const hours = params.get('hours') || '3';
    const to = params.get('to') ? `&to=${encodeURIComponent(params.get('to'))}` : '';
    main().innerHTML = `<h1>Overview</h1>
<form class="search card overview-form" id="overview-form"><label>Last<select id="o-hours">${['1', '2', '3', '6', '12', '24'].map((h) => `<option value="${h}"${h === hours ? ' selected' : ''}>${h} h</option>`).join('')}</select></label>
<span class="muted" id="o-range"></span></form><div id="overview" aria-live="polite"><p class="muted">Loading…</p></div>`;
    document.getElementById('o-hours').addEventListener('change', (e) => { location.hash = `#/overview?hours=${e.target.value}`; });
    const d = await api(`/api/overview?hours=${encodeURIComponent(hours)}${to}`);
    if (!live()) return;
    const { t_ms: t, step_ms: step } = d;
    document.getElementById('o-range').textContent = `${new Date(d.from_ms).toISOString().slice(0, 16).replace('T', ' ')} → ${new Date(d.to_ms).toISOString().slice(0, 16).replace('T', ' ')} UTC, per ${step / 60000} min; requests from ${d.requests_from}`;
    const marks = (f) => d.alerts.map((a, i) => band(f, Math.max(a.start_ms, d.from_ms), Math.min(a.end_ms ?? d.to_ms, d.to_ms),
      a.early_warning ? 'alert early' : 'alert', a.name.replace(/^Overtime/, ''),
      `data-alert="${esc(a.name)}" data-early="${a.early_warning}" data-start="${a.start_ms}" data-end="${a.end_ms ?? ''}"`, i)).join('');
    const ok = d.requests.map((n, i) => n - d.failed[i]);
    const req = [{ key: 'ok', values: ok, color: '#9aa3b2' }, { key: 'failed', values: d.failed, color: '#b3261e' }];
    const health = [{ key: 'chain health', values: d.chain_health.map((h) => h.value), t: d.chain_health.map((h) => h.t_ms), color: '#1b7f3b' }];
    const rows = d.alerts.map((a) => `<tr data-alert="${esc(a.name)}"><td>${a.early_warning ? '<span class="badge early">early warning</span>' : `<span class="badge sev">${esc(a.severity)}</span>`}</td>
<td class="kind">${esc(a.name)}</td><td>${hhmm(a.start_ms)} → ${a.end_ms ? hhmm(a.end_ms) : 'firing'}</td><td class="wrap">${esc(a.summary)}</td></tr>`).join('');
    document.getElementById('overview').innerHTML = `<h2>Requests per minute</h2>
<div class="chart-box">${bars('chart-requests', 'Requests and failures per minute', t, step, req, marks)}</div>
${legend([{ color: '#9aa3b2', text: 'ok' }, { color: '#b3261e', text: 'failed (5xx)' }, { color: 'rgba(184,110,0,.25)', text: 'early warning' }, { color: 'rgba(179,38,30,.15)', text: 'alert' }])}
<h2>Chain health per minute</h2>
<div class="chart-box">${d.chain_health.length ? lines('chart-health', 'Chain health per minute', t, step, health, marks,
    { points: true, t0: d.from_ms, t1: d.to_ms, ymax: 1, threshold: 0.8, thresholdLabel: 'alert below 0.8', yfmt: (v) => v.toFixed(2), vfmt: (v) => v.toFixed(3) })
    : '<p class="muted" id="no-health">No chain health yet: the SLO engine keeps the minutes it has seen since this collector started.</p>'}</div>
<h2>Alerts that fired</h2>${rows ? `<table class="list" id="overview-alerts"><tbody>${rows}</tbody></table>` : '<p class="muted" id="overview-alerts">none in this range</p>'}`;
    document.getElementById('overview').dataset.ready = 'true';
  }

  window.overtimeCharts = { incident, view, axis };
})();
