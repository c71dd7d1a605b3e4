// overtime UI: the advice page (#/advice) — timeouts per model and input
// tokens, per tool, per gateway layer, current vs recommended, with the
// calls cut by a timeout shown as censored — and the what-if form, whose
// result links to every trace that changes. Uses app.js's helpers
// (window.overtime); talks to GET /api/advice and POST /api/whatif.
'use strict';
(() => {
  const FATES = { ok: 'ok', fallback: 'fallback', fast_503: 'fast 503', gateway_timeout: '504', error: 'error' };
  const fate = (f) => `<span class="badge f-${f}">${FATES[f] || f}</span>`;

  function view(gen, live) {
    const { esc, dur, pct, main } = window.overtime;
    const form = `<h1>Timeout advice</h1>
<form class="search card" id="advice-form" autocomplete="off">
  <label>From (UTC)<input id="a-from" name="from" type="datetime-local" step="1"></label>
  <label>To (UTC)<input id="a-to" name="to" type="datetime-local" step="1"></label>
  <label>Cover<select id="a-target" name="target"><option value="0.99" selected>99 %</option><option value="0.999">99.9 %</option><option value="0.95">95 %</option></select></label>
  <button class="primary" id="a-go" type="submit">Advise</button>
</form>
<div id="advice" aria-live="polite"><p class="muted">Loading the advice over the last 24 hours…</p></div>
<h2 id="whatif-title">What if…</h2>
<form class="card whatif" id="whatif-form">
  <label for="w-set">Proposed values, one <code>KEY=VALUE</code> a line (<code>llm.&lt;model&gt;.timeout</code>, <code>llm.&lt;model&gt;.bucket.gt500.timeout</code>, <code>tool.&lt;name&gt;.timeout</code>, <code>service.budget</code>, <code>gateway.&lt;layer&gt;.read_timeout</code>, <code>retries=off</code>)</label>
  <textarea id="w-set" rows="5" spellcheck="false"></textarea>
  <button class="primary" id="w-go" type="submit">Replay every trace</button>
</form>
<div id="whatif" aria-live="polite"></div>`;
    main().innerHTML = form;
    const utc = (v) => (v ? String(Date.parse(/Z$/.test(v) ? v : v + 'Z')) : '');
    const window_ = () => ({ from: utc(document.getElementById('a-from').value), to: utc(document.getElementById('a-to').value) });
    async function load() {
      const w = window_();
      const q = new URLSearchParams({ target: document.getElementById('a-target').value });
      if (w.from) q.set('from', w.from);
      if (w.to) q.set('to', w.to);
      const box = document.getElementById('advice');
      box.innerHTML = '<p class="muted">Fitting…</p>';
      try {
        const a = await window.overtime.api('/api/advice?' + q);
        if (!live()) return;
        box.innerHTML = render(a, esc, dur, pct);
        const set = document.getElementById('w-set');
        if (!set.value) set.value = suggestion(a).join('\n');
      } catch (e) {
        if (live()) box.innerHTML = `<p class="error" role="alert">${esc(e.message || e)}</p>`;
      }
    }
    document.getElementById('advice-form').addEventListener('submit', (e) => { e.preventDefault(); load(); });
    document.getElementById('whatif-form').addEventListener('submit', async (e) => {
      e.preventDefault();
      const lines = document.getElementById('w-set').value.split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
      const out = document.getElementById('whatif');
      out.innerHTML = '<p class="muted">Replaying…</p>';
      const body = { set: lines };
      const w = window_();
      if (w.from) body.from = w.from;
      if (w.to) body.to = w.to;
      try {
        const r = await fetch('/api/whatif', {
          method: 'POST', credentials: 'same-origin',
          headers: { 'content-type': 'application/json', accept: 'application/json' },
          body: JSON.stringify(body),
        });
        const doc = await r.json().catch(() => null);
        if (!r.ok) throw new Error((doc && doc.error) || `${r.status} ${r.statusText}`);
        if (live()) out.innerHTML = renderWhatif(doc, esc, dur);
      } catch (err) {
        if (live()) out.innerHTML = `<p class="error" role="alert">${esc(err.message || err)}</p>`;
      }
    });
    load();
  }

  // The recommended values as what-if lines: per model bucket, per tool, the gateway.
  function suggestion(a) {
    const out = [];
    for (const g of a.llm || []) {
      if (g.recommended_ms == null || !g.bucket || g.bucket === 'unknown tokens' || g.change === 'keep') continue;
      const b = { '<50': 'lt50', '>500': 'gt500' }[g.bucket] || g.bucket;
      out.push(`llm.${g.name}.bucket.${b}.timeout=${Math.ceil(g.recommended_ms / 100) / 10}s`);
    }
    for (const g of a.tools || []) {
      if (g.recommended_ms != null && (g.change === 'set' || g.change === 'raise')) out.push(`tool.${g.name}.timeout=${Math.ceil(g.recommended_ms / 100) / 10}s`);
    }
    return out.slice(0, 12);
  }

  function inForce(t, dur) {
    if (!t) return '<span class="muted">none</span>';
    const range = t.range_ms ? ` ${dur(t.range_ms[0])}–${dur(t.range_ms[1])}` : '';
    return `${dur(t.ms)} <span class="muted">${t.source}${range}</span>`;
  }
  // A bar: the share of calls cut (censored), in the table's own cell.
  function censored(g, pct) {
    const c = g.timed_out + g.cut;
    const share = g.count ? c / g.count : 0;
    return `<span class="sharebar cut" title="${c} of ${g.count} cut by a timeout or with their request: censored, counted only as lasting at least that long"><i style="width:${Math.round(share * 100)}%"></i></span>${c} (${pct(share)})`;
  }
  function groupRows(groups, withBucket, esc, dur, pct) {
    return groups.map((g) => {
      const km = g.survival_ms && g.survival_ms.p99 != null ? dur(g.survival_ms.p99) : '<span class="muted" title="more calls were cut than finished beyond this point">beyond the cuts</span>';
      const rec = g.recommended_ms == null ? '—' : `<b>${dur(g.recommended_ms)}</b> <span class="badge c-${esc(g.change)}">${esc(g.change)}</span>`;
      return `<tr data-name="${esc(g.name)}"${g.bucket ? ` data-bucket="${esc(g.bucket)}"` : ''}><td>${esc(g.name)}</td>${withBucket ? `<td>${esc(g.bucket)}</td>` : ''}
<td class="num">${g.count}</td><td>${censored(g, pct)}</td><td class="num">${dur(g.finished_ms.p50)}</td><td class="num">${dur(g.finished_ms.p90)}</td>
<td class="num">${dur(g.finished_ms.p99)}</td><td class="num">${km}</td><td>${inForce(g.timeout, dur)}</td><td class="num">${pct(g.share_timed_out)}</td>
<td class="num">${pct(g.share_504)}</td><td class="rec">${rec}</td><td class="muted">${esc((g.method || '').replace(/_/g, ' '))}</td></tr>`;
    }).join('');
  }
  const HEAD = '<th class="num">calls</th><th>censored</th><th class="num">P50</th><th class="num">P90</th><th class="num">P99</th><th class="num">P99 (Kaplan–Meier)</th><th>timeout now</th><th class="num">timed out</th><th class="num">504</th><th>recommended</th><th>method</th>';

  function render(a, esc, dur, pct) {
    if (!a.traces) return '<p class="muted" id="advice-empty">No requests in this window.</p>';
    const cover = `${Math.round(a.target * 1000) / 10} %`;
    let h = `<p class="summary-line">${a.traces} requests${a.window ? `, ${esc(a.window[0])} → ${esc(a.window[1])}` : ''}; recommended timeouts cover ${cover} of calls. P50–P99 are over calls that finished; calls cut by a timeout are censored.</p>`;
    if ((a.llm || []).length) {
      h += `<h2>LLM calls by model and input tokens</h2><table class="list" id="advice-llm"><thead><tr><th>model</th><th>input tokens</th>${HEAD}</tr></thead><tbody>${groupRows(a.llm, true, esc, dur, pct)}</tbody></table>`;
    }
    if ((a.models || []).length) {
      const rows = a.models.map((m) => `<tr><td>${esc(m.model)}</td><td>${esc(m.form.replace(/_/g, ' '))}</td><td class="num">${dur(m.base_ms)}</td>
<td class="num">${m.a.toExponential(3)}</td><td class="num">${m.a2 ? m.a2.toExponential(3) : '0'}</td><td class="num">${m.b.toFixed(3)} <span class="muted">${esc(m.load)}</span></td>
<td class="num">${m.sigma.toFixed(3)}</td><td class="num">${m.n} <span class="muted">(${m.censored} censored)</span></td><td class="num">${m.r2.toFixed(3)}</td></tr>
<tr><td></td><td colspan="8" class="mono rule">${esc(m.rule)}</td></tr>`).join('');
      h += `<h2>Latency law per model</h2><table class="list" id="advice-models"><thead><tr><th>model</th><th>form</th><th class="num">base</th><th class="num">a (per token)</th><th class="num">a2 (per token²)</th><th class="num">b (per load)</th><th class="num">σ (ln)</th><th class="num">calls</th><th class="num">R² (ln)</th></tr></thead><tbody>${rows}</tbody></table>`;
    }
    if ((a.tools || []).length) {
      h += `<h2>Tools and memory stores</h2><table class="list" id="advice-tools"><thead><tr><th>tool</th>${HEAD}</tr></thead><tbody>${groupRows(a.tools, false, esc, dur, pct)}</tbody></table>`;
    }
    if ((a.gateways || []).length) {
      h += `<h2>Gateway layers</h2><table class="list" id="advice-gateways"><thead><tr><th>layer</th>${HEAD}</tr></thead><tbody>${groupRows(a.gateways, false, esc, dur, pct)}</tbody></table>`;
    }
    for (const al of a.alignment || []) {
      const steps = al.steps.map((s) => `<tr><td>${esc(s.layer)}</td><td class="num">${s.current_ms == null ? 'none' : dur(s.current_ms)}</td>
<td class="num"><b>${dur(s.recommended_ms)}</b></td><td class="num">${s.change_ms == null ? '—' : (s.change_ms >= 0 ? '+' : '−') + dur(Math.abs(s.change_ms))}</td><td class="wrap">${esc(s.why)}</td></tr>`).join('');
      h += `<h2>Alignment: ${esc(al.service)} <span class="badge ${al.holds_now ? 'o-ok' : 'o-gateway_timeout'}">${al.holds_now ? 'holds' : 'broken'}</span></h2>
${al.first ? `<p class="first-change">Change first: <b>${esc(al.first)}</b></p>` : ''}
<table class="list align"><thead><tr><th>layer (outermost first)</th><th class="num">now</th><th class="num">recommended</th><th class="num">change</th><th>why</th></tr></thead><tbody>${steps}</tbody></table>`;
    }
    return h;
  }

  function renderWhatif(w, esc, dur) {
    const n = (x) => (Math.abs(x - Math.round(x)) < 0.05 ? String(Math.round(x)) : x.toFixed(1));
    const rows = [['ok', 'ok'], ['fallback', 'fallback'], ['fast 503', 'fast_503'], ['504', 'gateway_timeout'], ['error', 'error']]
      .map(([label, k]) => `<tr><td>${label}</td><td class="num">${n(w.before[k])}</td><td class="num">${n(w.after[k])}</td></tr>`).join('');
    const changed = w.changed.map((c) => `<tr><td><a class="mono" href="#/trace/${encodeURIComponent(c.trace_id)}">${esc(c.trace_id)}</a></td>
<td>${fate(c.before)} ${dur(c.before_ms)}</td><td>${fate(c.after)} ${dur(c.after_ms)}${c.share < 1 ? ` <span class="muted">${Math.round(c.share * 100)} % of draws</span>` : ''}</td>
<td>${c.from_model ? '<span class="badge drawn" title="a cut call\'s latency was drawn from the fitted law">drawn</span>' : c.unseen_rest ? '<span title="a call that ended the request before now finishes; what ran after it was never seen">observed, rest unseen</span>' : 'observed'}</td><td class="wrap">${esc(c.why)}</td></tr>`).join('');
    return `<p class="summary-line" id="whatif-summary">${w.traces} requests replayed under <code>${esc(w.proposal.join(', '))}</code>:
<b>${n(w.now_finish)}</b> would now finish, <b>${n(w.cut_earlier)}</b> would fail fast or fall back instead of a 504, <b>${n(w.newly_fail)}</b> that succeeded would fail.
504s ${n(w.before.gateway_timeout)} → <b id="whatif-504">${n(w.after.gateway_timeout)}</b> (${n(w.after_504_range[0])}–${n(w.after_504_range[1])} over ${w.draws} draws).</p>
<p class="muted" id="whatif-model">${w.from_model} outcomes rest on latencies drawn from the fitted laws for calls that were cut (${w.uncertain} vary between draws)${w.unseen_rest ? `; ${w.unseen_rest} go on past a call that ended them before (what ran after it was never seen: taken as nothing)` : ''}; replaying today's settings reproduces today's outcome for ${w.today_reproduced} of ${w.traces} requests.</p>
<table class="list" id="whatif-counts"><thead><tr><th></th><th class="num">before</th><th class="num">after</th></tr></thead><tbody>${rows}
<tr><td>latency P50</td><td class="num">${dur(w.latency_before.p50_ms)}</td><td class="num">${dur(w.latency_after.p50_ms)}</td></tr>
<tr><td>latency P99</td><td class="num">${dur(w.latency_before.p99_ms)}</td><td class="num">${dur(w.latency_after.p99_ms)}</td></tr></tbody></table>
<h3>${w.changed_total} requests change${w.changed_total > w.changed.length ? ` (first ${w.changed.length})` : ''}</h3>
${changed ? `<table class="list" id="whatif-changed"><thead><tr><th>trace</th><th>before</th><th>after</th><th>latency</th><th>why</th></tr></thead><tbody>${changed}</tbody></table>` : '<p class="muted">none</p>'}`;
  }

  window.overtimeAdvice = { view, suggestion };
})();
