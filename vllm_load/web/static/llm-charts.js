/* vllm-load's live charts: time series of /llm/stats drawn as SVG, for the LLM tab of Locust's
 * UI and for the /llm page alike. No library and nothing from outside the master: axes with
 * units and times, a legend (click a name to hide its line), a tooltip, a dashed mark at each
 * level's start with its users, and the current level shaded. Colours follow Locust's theme
 * (its light and dark chart colours; dark when the page's background is dark, or when the page
 * says so with data-vl-theme on <html>).
 *
 * The charts by persona (user class) draw one line per persona, for each of a few figures.
 *
 * Every name from the run (a persona is a user class, named by whoever wrote the locustfile) is
 * put in the page as text, never as markup; `escapeHtml` is for markup built as a string.
 *
 * window.VllmLoadCharts.create(element, {statsUrl, onData, personaRoot, only}) returns
 * {start(), stop(), redraw()}: it polls statsUrl every 2 s (only the points it has not got yet)
 * and redraws; the charts by persona go into personaRoot when given, and with only: 'personas'
 * they are the only ones (into element).
 */
(function () {
  'use strict';
  const NS = 'http://www.w3.org/2000/svg';
  const POLL_MS = 2000;
  const HEIGHT = 260;
  const PAD = { left: 64, right: 16, top: 22, bottom: 40 };
  // Locust's own chart colours (light, dark) and series colours
  const THEMES = {
    light: { text: '#000', axis: '#000', bg: '#fff', split: '#ddd', band: 'rgba(21,128,61,0.10)', mark: '#15803d' },
    dark: { text: '#b3c3bc', axis: '#5b6f66', bg: '#27272a', split: '#4c4c52', band: 'rgba(74,222,128,0.13)', mark: '#4ade80' },
  };
  const CHARTS = [
    { key: 'tokens', title: 'Throughput (tokens/s)', unit: 'tok/s', lines: [
      ['total_tok_per_s', 'Total tok/s', '#00ca5a'], ['output_tok_per_s', 'Output tok/s', '#0099ff']] },
    { key: 'ttft', title: 'Time to first token (ms)', unit: 'ms', lines: [
      ['ttft_p50_ms', 'TTFT p50', '#ff9f00'], ['ttft_p99_ms', 'TTFT p99', '#9966CC']] },
    { key: 'itl', title: 'Inter-token latency (ms)', unit: 'ms', lines: [['itl_p99_ms', 'ITL p99', '#8E4585']] },
    { key: 'flight', title: 'Requests in flight vs users', unit: 'requests', lines: [
      ['in_flight', 'Requests in flight', '#ff9f00'], ['users', 'Users', '#0099ff', '6 4']] },
    { key: 'errors', title: 'Errors (failed requests/s)', unit: 'errors/s', lines: [['errors_per_s', 'Failed requests/s', '#ff6d6d']] },
  ];
  const FIELDS = CHARTS.flatMap(c => c.lines.map(l => l[0]));
  // one line per persona, coloured in turn
  const PERSONA_CHARTS = [
    { key: 'persona-tokens', title: 'Output tokens/s by persona', unit: 'tok/s', figure: 'output_tok_per_s' },
    { key: 'persona-ttft', title: 'TTFT p99 by persona (ms)', unit: 'ms', figure: 'ttft_p99_ms' },
    { key: 'persona-itl', title: 'ITL p99 by persona (ms)', unit: 'ms', figure: 'itl_p99_ms' },
    { key: 'persona-errors', title: 'Errors by persona (failed requests/s)', unit: 'errors/s', figure: 'errors_per_s' },
  ];
  const PERSONA_FIELDS = PERSONA_CHARTS.map(c => c.figure);
  const PALETTE = ['#0099ff', '#ff9f00', '#00ca5a', '#9966CC', '#ff6d6d', '#8E4585', '#00b3b3', '#c0a000'];

  function el(tag, attrs, parent) {
    const node = document.createElementNS(NS, tag);
    for (const k in attrs) node.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(node);
    return node;
  }
  function luminance(css) {
    const m = /rgba?\(([\d.]+),\s*([\d.]+),\s*([\d.]+)(?:,\s*([\d.]+))?/.exec(css || '');
    if (!m || m[4] === '0') return null;
    return (0.299 * m[1] + 0.587 * m[2] + 0.114 * m[3]) / 255;
  }
  function isDark() {
    const forced = document.documentElement.getAttribute('data-vl-theme');
    if (forced) return forced === 'dark';
    const lum = luminance(getComputedStyle(document.body).backgroundColor);
    return lum === null ? matchMedia('(prefers-color-scheme: dark)').matches : lum < 0.5;
  }
  function niceStep(span, count) {
    const raw = span / Math.max(1, count), mag = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const f of [1, 2, 2.5, 5, 10]) if (raw <= f * mag) return f * mag;
    return 10 * mag;
  }
  const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200];
  function fmtValue(v, unit) {
    if (v === null || v === undefined || Number.isNaN(v)) return '–';
    const a = Math.abs(v);
    const trim = str => str.replace(/\.0+$|(\.\d*?)0+$/, '$1');
    const s = a >= 1e6 ? trim((v / 1e6).toFixed(1)) + 'M' : a >= 1e4 ? trim((v / 1e3).toFixed(1)) + 'k'
      : a >= 100 ? Math.round(v).toLocaleString() : a >= 10 ? trim(v.toFixed(1)) : trim(v.toFixed(2));
    return unit ? s + ' ' + unit : s;
  }
  function fmtTime(t) { return new Date(t * 1000).toLocaleTimeString(); }
  // text put into HTML markup (a table built as a string): every name a user chose passes here
  const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
  function escapeHtml(text) { return String(text).replace(/[&<>"']/g, c => ESCAPES[c]); }
  function markLabel(m) {
    if (m.kind === 'drain') return 'drain';
    if (m.label) return 'L' + m.level + ' · ' + m.label;  // the level as its kind of load names it
    return 'L' + m.level + ' · ' + (m.rate !== null && m.rate !== undefined ? m.rate + ' req/s' : m.users + ' users');
  }

  function Chart(spec, parent) {
    const card = document.createElement('div');
    card.className = 'vl-chart';
    card.setAttribute('data-chart', spec.key);
    const head = document.createElement('div');
    head.className = 'vl-chart-head';
    const title = document.createElement('span');
    title.className = 'vl-chart-title';
    title.textContent = spec.title;
    const legend = document.createElement('span');
    legend.className = 'vl-legend';
    head.append(title, legend);
    const svg = el('svg', { class: 'vl-svg', height: HEIGHT, role: 'img', 'aria-label': spec.title });
    const tip = document.createElement('div');
    tip.className = 'vl-tip';
    tip.hidden = true;
    card.append(head, svg, tip);
    parent.appendChild(card);
    const hidden = new Set();
    let last = null, legendKeys = null;

    // [key, name, colour, dash, values] of each line: the spec's, or one per persona
    function linesOf(state) {
      if (!spec.figure) return spec.lines.map(([key, name, color, dash]) => [key, name, color, dash, state.cols[key]]);
      return Object.keys(state.personas).sort().map((name, i) =>
        [name, name, PALETTE[i % PALETTE.length], undefined, state.personas[name][spec.figure]]);
    }
    function buildLegend(lines) {
      const keys = lines.map(l => l[0]).join('\u0000');
      if (keys === legendKeys) return;
      legendKeys = keys;
      legend.textContent = '';
      for (const [key, name, color] of lines) {
        const item = document.createElement('span');
        item.className = 'vl-legend-item' + (hidden.has(key) ? ' vl-off' : '');
        item.setAttribute('data-series', key);
        const swatch = document.createElement('i');
        swatch.style.background = color;
        item.append(swatch, name);  // a persona's name is the user's: text, never markup
        item.addEventListener('click', () => {
          hidden.has(key) ? hidden.delete(key) : hidden.add(key);
          item.classList.toggle('vl-off', hidden.has(key));
          draw(last);
        });
        legend.appendChild(item);
      }
    }

    function draw(state) {
      last = state;
      if (!state) return;
      const lines = linesOf(state);
      buildLegend(lines);
      const c = THEMES[isDark() ? 'dark' : 'light'];
      card.style.background = c.bg;
      card.style.color = c.text;
      while (svg.firstChild) svg.removeChild(svg.firstChild);
      const W = Math.max(320, card.clientWidth - 2), H = HEIGHT;
      svg.setAttribute('width', W);
      svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
      const ts = state.t;
      const marks = state.marks.filter(m => m.kind === 'start' || m.kind === 'drain');
      const t0 = Math.min(ts.length ? ts[0] : Infinity, marks.length ? marks[0].t : Infinity);
      if (!Number.isFinite(t0)) {
        el('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', fill: c.text, class: 'vl-empty' }, svg).textContent = 'no data yet';
        return;
      }
      const t1 = Math.max(t0 + 10, ts.length ? ts[ts.length - 1] : t0);
      let ymax = 0;
      for (const [key, , , , vals] of lines) {
        if (hidden.has(key)) continue;
        for (const v of vals) if (v !== null && v > ymax) ymax = v;
      }
      const top = ymax > 0 ? ymax * 1.05 : 1;  // no value above 0 yet: a scale up to 1
      const ystep = niceStep(top, 4);
      const ytop = Math.ceil(top / ystep) * ystep;
      const x = t => PAD.left + (W - PAD.left - PAD.right) * (t - t0) / (t1 - t0);
      const y = v => H - PAD.bottom - (H - PAD.top - PAD.bottom) * v / ytop;
      // the current level, shaded from its start to the end
      const current = state.running ? marks.filter(m => m.kind === 'start' && m.level === state.currentLevel).pop() : null;
      if (current) {
        el('rect', { x: x(current.t), y: PAD.top, width: Math.max(0, x(t1) - x(current.t)), height: H - PAD.top - PAD.bottom,
          fill: c.band, class: 'vl-current' }, svg);
      }
      // y axis: grid lines, values, unit
      for (let v = 0; v <= ytop + ystep / 2; v += ystep) {
        el('line', { x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v), stroke: c.split, 'stroke-width': 1 }, svg);
        el('text', { x: PAD.left - 6, y: y(v) + 4, 'text-anchor': 'end', fill: c.text, class: 'vl-tick' }, svg).textContent = fmtValue(v);
      }
      el('text', { x: 14, y: (PAD.top + H - PAD.bottom) / 2, fill: c.text, 'text-anchor': 'middle', class: 'vl-axis-label vl-y-label',
        transform: 'rotate(-90 14 ' + (PAD.top + H - PAD.bottom) / 2 + ')' }, svg).textContent = spec.unit;
      // x axis: times
      el('line', { x1: PAD.left, x2: W - PAD.right, y1: H - PAD.bottom, y2: H - PAD.bottom, stroke: c.axis }, svg);
      const want = Math.max(2, Math.floor((W - PAD.left - PAD.right) / 110));
      const tstep = TIME_STEPS.find(s => (t1 - t0) / s <= want) || 3600 * Math.ceil((t1 - t0) / want / 3600);
      for (let t = Math.ceil(t0 / tstep) * tstep; t <= t1; t += tstep) {
        el('line', { x1: x(t), x2: x(t), y1: H - PAD.bottom, y2: H - PAD.bottom + 4, stroke: c.axis }, svg);
        el('text', { x: x(t), y: H - PAD.bottom + 16, 'text-anchor': 'middle', fill: c.text, class: 'vl-tick vl-x-tick' }, svg).textContent = fmtTime(t);
      }
      el('text', { x: W - PAD.right, y: H - 4, 'text-anchor': 'end', fill: c.text, class: 'vl-axis-label vl-x-label' }, svg)
        .textContent = 'time (points every ' + state.step + ' s, ' + state.window + ' s window)';
      // level marks
      for (const m of marks) {
        const g = el('g', { class: 'vl-mark', 'data-level': m.level, 'data-kind': m.kind }, svg);
        el('line', { x1: x(m.t), x2: x(m.t), y1: PAD.top - 4, y2: H - PAD.bottom, stroke: c.mark, 'stroke-dasharray': '4 3', 'stroke-width': 1.2 }, g);
        const right = x(m.t) > W - PAD.right - 90;
        el('text', { x: x(m.t) + (right ? -3 : 3), y: PAD.top - 8, fill: c.mark, 'text-anchor': right ? 'end' : 'start', class: 'vl-mark-label' + (m === current ? ' vl-mark-current' : '') }, g).textContent = markLabel(m);
      }
      // the lines (a gap where a figure has no value)
      for (const [key, , color, dash, vals] of lines) {
        if (hidden.has(key)) continue;
        let d = '', pen = false, n = 0;
        for (let i = 0; i < ts.length; i++) {
          if (vals[i] === null || vals[i] === undefined) { pen = false; continue; }
          d += (pen ? 'L' : 'M') + x(ts[i]).toFixed(1) + ',' + y(vals[i]).toFixed(1);
          pen = true;
          n++;
        }
        el('path', { d: d || 'M0,0', fill: 'none', stroke: color, 'stroke-width': 2, 'stroke-linejoin': 'round', 'stroke-dasharray': dash || 'none', class: 'vl-line',
          'data-series': key, 'data-points': n }, svg);
      }
      // tooltip: the nearest point's time, level and figures
      const guide = el('line', { y1: PAD.top, y2: H - PAD.bottom, stroke: c.axis, 'stroke-width': 1, visibility: 'hidden' }, svg);
      const hit = el('rect', { x: PAD.left, y: PAD.top, width: W - PAD.left - PAD.right, height: H - PAD.top - PAD.bottom, fill: 'transparent' }, svg);
      hit.addEventListener('mousemove', ev => {
        if (!ts.length) return;
        const box = svg.getBoundingClientRect();
        const t = t0 + (ev.clientX - box.left - PAD.left) / (W - PAD.left - PAD.right) * (t1 - t0);
        let i = 0;
        while (i < ts.length - 1 && Math.abs(ts[i + 1] - t) <= Math.abs(ts[i] - t)) i++;
        guide.setAttribute('x1', x(ts[i]));
        guide.setAttribute('x2', x(ts[i]));
        guide.setAttribute('visibility', 'visible');
        const level = marks.filter(m => m.kind === 'start' && m.t <= ts[i]).pop();
        // built as nodes: a persona's name is the user's, shown as text, never parsed as markup
        const when = document.createElement('b');
        when.textContent = fmtTime(ts[i]);
        tip.replaceChildren(when, level ? ' · level ' + level.level + ' (' + markLabel(level).split(' · ')[1] + ')' : '');
        for (const [key, name, color, , vals] of lines) {
          if (hidden.has(key)) continue;
          const line = document.createElement('span');
          line.style.color = color;
          line.textContent = name + ': ' + fmtValue(vals[i], spec.unit);
          tip.append(document.createElement('br'), line);
        }
        tip.hidden = false;
        tip.style.background = c.bg;
        tip.style.color = c.text;
        const left = ev.clientX - card.getBoundingClientRect().left;
        tip.style.left = Math.min(left + 12, card.clientWidth - tip.offsetWidth - 4) + 'px';
        tip.style.top = (ev.clientY - card.getBoundingClientRect().top + 12) + 'px';
      });
      hit.addEventListener('mouseleave', () => { tip.hidden = true; guide.setAttribute('visibility', 'hidden'); });
    }
    return { draw };
  }

  function grid(root, specs) {
    const node = document.createElement('div');
    node.className = 'vl-charts';
    root.appendChild(node);
    return specs.map(spec => Chart(spec, node));
  }

  function create(root, options) {
    const personaRoot = options.only === 'personas' ? root : options.personaRoot;
    const charts = [
      ...(options.only === 'personas' ? [] : grid(root, CHARTS)),
      ...(personaRoot ? grid(personaRoot, PERSONA_CHARTS) : []),
    ];
    let state = null, timer = null, busy = false;

    function first(s) { return s.marks.length ? s.marks[0].t : null; }
    function merge(data, incremental) {
      const s = data.series;
      if (!incremental) state = { t: [], cols: Object.fromEntries(FIELDS.map(f => [f, []])), personas: {} };
      const before = state.t.length, nulls = n => Array.from({ length: n }, () => null);
      state.t.push(...s.t);
      for (const f of FIELDS) state.cols[f].push(...(s[f] || nulls(s.t.length)));
      // a persona seen for the first time has nothing before; one not in these points, nothing in them
      const got = s.personas || {};
      for (const name in got) {
        if (!state.personas[name]) state.personas[name] = Object.fromEntries(PERSONA_FIELDS.map(f => [f, nulls(before)]));
      }
      for (const name in state.personas) {
        for (const f of PERSONA_FIELDS) state.personas[name][f].push(...((got[name] && got[name][f]) || nulls(s.t.length)));
      }
      Object.assign(state, { step: s.step, window: s.window, marks: s.marks, first: first(s),
        currentLevel: data.current_level, running: data.running });
    }
    async function fetchStats(since) {
      const resp = await fetch(options.statsUrl + (since === null ? '' : '?since=' + since), { credentials: 'same-origin' });
      return resp.ok ? resp.json() : null;
    }
    async function poll() {
      if (busy) return;
      busy = true;
      try {
        const since = state && state.t.length ? state.t[state.t.length - 1] : null;
        let data = await fetchStats(since);
        // a new step (points thinned out) or a new test: everything again
        if (data && data.series && since !== null && (data.series.step !== state.step || first(data.series) !== state.first)) {
          data = await fetchStats(null);
          if (data && data.series) merge(data, false);
        } else if (data && data.series) {
          merge(data, since !== null);
        }
        if (data) {
          redraw();
          if (options.onData) options.onData(data);
        }
      } catch (e) { /* the master may be restarting: try again */ } finally { busy = false; }
    }
    function redraw() { for (const c of charts) c.draw(state); }
    let width = 0;
    const onResize = () => { if (root.clientWidth !== width) { width = root.clientWidth; redraw(); } };
    return {
      start() { poll(); timer = setInterval(poll, POLL_MS); addEventListener('resize', onResize); },
      stop() { clearInterval(timer); removeEventListener('resize', onResize); },
      redraw,
    };
  }

  window.VllmLoadCharts = { create, isDark, escapeHtml, CHARTS, PERSONA_CHARTS };
})();
