// hourglass dashboard: polls GET /v1/dashboard and GET /v1/deadletters every
// 2 s and draws them. No dependencies. Every value from the server is put in
// the page with textContent, never as HTML.
'use strict';

(() => {
  const POLL_MS = 2000;
  const SVG = 'http://www.w3.org/2000/svg';
  const { $, api, errorText, setStatus, el, fmt, fmtTime, Unauthorized, handleError, canWrite, loadRole } = window.hourglass;

  function fmtSeconds(s) {
    if (s === 0) return '0';
    if (s < 1) return +(s * 1000).toPrecision(3) + ' ms';
    return +s.toPrecision(3) + ' s';
  }

  function svgEl(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // Charts share one layout: a 600x180 viewBox, axis labels left and below.
  const W = 600, H = 180, L = 44, R = 8, T = 8, B = 22;

  function axes(svg, maxY, xLabels) {
    svg.replaceChildren();
    svg.appendChild(svgEl('line', { x1: L, y1: H - B, x2: W - R, y2: H - B, class: 'axis' }));
    svg.appendChild(svgEl('line', { x1: L, y1: T, x2: L, y2: H - B, class: 'axis' }));
    svg.appendChild(svgEl('text', { x: L - 4, y: T + 8, 'text-anchor': 'end' }, fmt(maxY)));
    svg.appendChild(svgEl('text', { x: L - 4, y: H - B, 'text-anchor': 'end' }, '0'));
    for (const { x, text } of xLabels) {
      // Labels near the right edge are aligned to end there, not cut off.
      const anchor = x > W - R - 30 ? 'end' : 'middle';
      svg.appendChild(svgEl('text', { x: anchor === 'end' ? W - R : x, y: H - 6, 'text-anchor': anchor }, text));
    }
  }

  function niceMax(values) {
    const m = Math.max(1, ...values);
    const p = Math.pow(10, Math.floor(Math.log10(m)));
    for (const k of [1, 2, 2.5, 5, 10]) if (k * p >= m) return k * p;
    return 10 * p;
  }

  // bars draws one bar per value; labelled(i) says which bars get their
  // label under the axis (all get it as a tooltip).
  function bars(svg, values, labels, cls, labelled) {
    const maxY = niceMax(values);
    const bw = (W - L - R) / values.length;
    const xLabels = [];
    labels.forEach((text, i) => {
      if (labelled(i)) xLabels.push({ x: L + bw * (i + 0.5), text });
    });
    axes(svg, maxY, xLabels);
    values.forEach((v, i) => {
      const h = (H - T - B) * v / maxY;
      const r = svgEl('rect', { x: L + bw * i + 1, y: H - B - h, width: Math.max(bw - 2, 1), height: h, class: cls });
      r.appendChild(svgEl('title', {}, labels[i] + ': ' + fmt(v)));
      svg.appendChild(r);
    });
  }

  // lines draws per-second series sharing the x axis (seconds ago).
  function lines(svg, series, n) {
    const maxY = niceMax(series.flatMap((s) => s.values));
    const dx = (W - L - R) / Math.max(n - 1, 1);
    const xLabels = [];
    for (let ago = Math.floor((n - 1) / 60) * 60; ago >= 0; ago -= 60) {
      xLabels.push({ x: L + dx * (n - 1 - ago), text: ago === 0 ? 'now' : '−' + ago / 60 + ' min' });
    }
    axes(svg, maxY, xLabels);
    for (const s of series) {
      const pts = s.values.map((v, i) => (L + dx * i).toFixed(1) + ',' + (H - B - (H - T - B) * v / maxY).toFixed(1));
      svg.appendChild(svgEl('polyline', { points: pts.join(' '), class: s.cls }));
    }
  }

  const avg = (xs) => xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0;

  function render(d) {
    for (const [status, n] of Object.entries(d.orders)) {
      const e = $('orders-' + status);
      if (e) e.textContent = fmt(n);
    }
    $('overdue').textContent = fmt(d.overdue);

    const alerts = $('alerts');
    alerts.replaceChildren();
    if (d.alerts.length === 0) alerts.appendChild(el('li', { class: 'muted' }, 'alerts are not evaluated on this server'));
    for (const a of d.alerts) {
      const li = el('li', { 'data-rule': a.rule, class: a.state === 'firing' ? 'firing' : 'ok' });
      li.appendChild(el('span', { class: 'state' }, a.state === 'firing' ? 'firing since ' + fmtTime(a.since) : 'ok'));
      li.appendChild(el('div', { class: 'rule' }, a.rule));
      li.appendChild(el('div', { class: 'summary' }, a.error ? 'cannot evaluate: ' + a.error : a.summary));
      alerts.appendChild(li);
    }

    // Bucket i holds the orders due in ((i)*step, (i+1)*step] seconds from now.
    const step = d.due.bucket_seconds;
    const dueLabels = d.due.counts.map((_, i) => {
      const end = (i + 1) * step;
      return end % 60 === 0 ? 'in ' + end / 60 + ' min' : 'in ' + end + ' s';
    });
    bars($('due-chart'), d.due.counts, dueLabels, 'bar-due', (i) => ((i + 1) * step) % 60 === 0);
    $('due-total').textContent = fmt(d.due.counts.reduce((a, b) => a + b, 0)) + ' pending orders due in the next ' +
      (d.due.counts.length * step / 60) + ' minutes';

    const r = d.rates;
    lines($('rates-chart'), [
      { values: r.closes, cls: 'line-closes' },
      { values: r.creates, cls: 'line-creates' },
      { values: r.close_failures, cls: 'line-failures' },
    ], r.closes.length);
    // The last second is still running: average the 10 before it.
    const last10 = (xs) => xs.slice(Math.max(xs.length - 11, 0), xs.length - 1);
    $('rate-closes').textContent = avg(last10(r.closes)).toFixed(1);
    $('rate-creates').textContent = avg(last10(r.creates)).toFixed(1);
    $('rate-failures').textContent = avg(last10(r.close_failures)).toFixed(1);

    latenessChart($('lateness-chart'), $('lateness-p99'), d.lateness, 'closes');

    // Webhook delivery: the lag of first attempts over the last minute, and
    // the close batches whose deliveries are not created yet (a burst's
    // deferred fan-out); each null when the server does not have it.
    const lag = d.delivery_lag, fanout = d.fanout_pending;
    $('webhooks-card').hidden = !lag && fanout == null;
    $('delivery-lag-p50').textContent = lag && lag.deliveries > 0 ? fmtSeconds(lag.p50_seconds) : '–';
    $('delivery-lag-p99').textContent = lag && lag.deliveries > 0 ? fmtSeconds(lag.p99_seconds) : '–';
    $('delivery-first-attempts').textContent = lag ? fmt(lag.deliveries) : '–';
    $('fanout-pending').textContent = fanout == null ? '–' : fmt(fanout);

    // Timer requests from shops' transactions: the lag from requested_at to
    // applied over the last minute, and the rejected ones kept; null when
    // the store applies none.
    const rq = d.timer_requests;
    $('requests-card').hidden = !rq;
    if (rq) {
      $('requests-lag-p50').textContent = rq.applied + rq.rejected > 0 ? fmtSeconds(rq.lag_p50_seconds) : '–';
      $('requests-lag-p99').textContent = rq.applied + rq.rejected > 0 ? fmtSeconds(rq.lag_p99_seconds) : '–';
      $('requests-applied').textContent = fmt(rq.applied);
      $('requests-rejected').textContent = fmt(rq.rejected_kept);
    }

    // The shops' own tables (--sources); null without sources. A source
    // whose guard matched several rows is marked.
    const src = d.sources;
    $('sources-card').hidden = !src;
    if (src) {
      const tbody = $('sources').tBodies[0];
      tbody.replaceChildren();
      for (const s of src) {
        const tr = el('tr', s.misconfigured ? { class: 'misconfigured' } : {});
        tr.appendChild(el('td', {}, s.name + (s.misconfigured ? ' (guard matches several rows)' : '')));
        for (const n of [s.held, s.closes, s.noops, s.guard_errors, s.close_errors, s.swept]) tr.appendChild(el('td', {}, fmt(n)));
        tr.appendChild(el('td', {}, s.closes > 0 ? fmtSeconds(s.lateness_p50_seconds) : '–'));
        tr.appendChild(el('td', {}, s.closes > 0 ? fmtSeconds(s.lateness_p99_seconds) : '–'));
        tr.appendChild(el('td', s.bad_rows > 0 ? { class: 'bad' } : {}, fmt(s.bad_rows)));
        tbody.appendChild(tr);
      }
      // The rows each source skips: its key and deadline as the database
      // writes them (text, never markup).
      const bad = $('source-bad-rows');
      const rows = bad.tBodies[0];
      rows.replaceChildren();
      for (const s of src) {
        for (const b of s.bad_row_list || []) {
          const tr = el('tr', {});
          for (const v of [s.name, b.key, b.deadline, b.reason, b.found_at]) tr.appendChild(el('td', {}, v));
          rows.appendChild(tr);
        }
      }
      bad.hidden = rows.rows.length === 0;
    }

    // Clients' timers, shown as the orders are; null when the server keeps none.
    const tm = d.timers;
    $('timers-card').hidden = !tm;
    $('timer-lateness-card').hidden = !tm;
    if (tm) {
      for (const [status, n] of Object.entries(tm.counts)) {
        const e = $('timers-' + status);
        if (e) e.textContent = fmt(n);
      }
      $('timer-fires').textContent = avg(last10(tm.fires)).toFixed(1);
      latenessChart($('timer-lateness-chart'), $('timer-lateness-p99'), tm.lateness, 'fires');
    }

    // Order reminders (order.expiring), sent and skipped.
    const rm = d.reminders;
    if (rm) {
      $('reminders-sent').textContent = avg(last10(rm.sent)).toFixed(1);
      $('reminders-skipped').textContent = avg(last10(rm.skipped)).toFixed(1);
      latenessChart($('reminder-lateness-chart'), $('reminder-lateness-p99'), rm.lateness, 'reminders');
    }
  }

  // latenessChart draws a lateness histogram (closes' or timers') and its p99.
  function latenessChart(svg, p99, lt, what) {
    const labels = lt.counts.map((_, i) => i < lt.bounds_seconds.length ? '≤' + fmtSeconds(lt.bounds_seconds[i]) : '>' + fmtSeconds(lt.bounds_seconds[i - 1]));
    bars(svg, lt.counts, labels, 'bar-late', (i) => i % 3 === 0);
    p99.textContent = fmtSeconds(lt.p99_seconds) + ' over ' + fmt(lt.counts.reduce((a, b) => a + b, 0)) + ' ' + what;
  }

  // Dead letters: the list comes from the webhooks API itself.
  async function refreshDeadLetters() {
    const r = await api('GET', '/v1/deadletters?limit=100');
    const table = $('deadletters'), note = $('deadletters-note'), count = $('deadletters-count');
    if (r.status === 404) {
      table.hidden = true;
      count.textContent = '';
      note.textContent = 'Webhooks are not enabled on this server.';
      return;
    }
    if (r.status !== 200) throw new Error('dead letters: ' + errorText(r));
    const list = r.body.deadletters || [];
    table.hidden = list.length === 0;
    count.textContent = '(' + fmt(list.length) + (r.body.next != null ? '+' : '') + ')';
    note.textContent = list.length === 0 ? 'None: every webhook delivery succeeded or is still being retried.' : '';
    const tbody = table.tBodies[0];
    tbody.replaceChildren();
    for (const dl of list) {
      const tr = el('tr', { 'data-id': String(dl.id) });
      tr.appendChild(el('td', {}, String(dl.id)));
      tr.appendChild(el('td', {}, dl.event_type));
      tr.appendChild(el('td', {}, String(dl.order_id)));
      tr.appendChild(el('td', {}, String(dl.webhook_id)));
      tr.appendChild(el('td', {}, String(dl.attempts)));
      tr.appendChild(el('td', {}, fmtTime(dl.failed_at)));
      tr.appendChild(el('td', { class: 'err' }, dl.last_error || ''));
      const td = el('td');
      if (canWrite()) { // a viewer is shown no action
        const b = el('button', { class: 'retry', type: 'button', 'data-id': String(dl.id) }, 'Retry');
        b.addEventListener('click', () => retry(dl.id, b));
        td.appendChild(b);
      }
      tr.appendChild(td);
      tbody.appendChild(tr);
    }
  }

  // Nodes: the cluster sharing this server's database, and the partitions
  // each owns (one node owning all of them on SQLite).
  async function refreshNodes() {
    const r = await api('GET', '/v1/cluster');
    const table = $('nodes'), count = $('nodes-count');
    if (r.status === 404) {
      table.hidden = true;
      count.textContent = '';
      return;
    }
    if (r.status !== 200) throw new Error('cluster: ' + errorText(r));
    const nodes = r.body.nodes || [];
    count.textContent = '(' + fmt(nodes.length) + ', ' + fmt(r.body.partitions) + ' partitions)';
    const tbody = table.tBodies[0];
    tbody.replaceChildren();
    for (const n of nodes) {
      const tr = el('tr', { 'data-node': n.id });
      tr.appendChild(el('td', {}, n.id + (n.self ? ' (this one)' : '')));
      tr.appendChild(el('td', {}, n.addr));
      tr.appendChild(el('td', {}, fmtTime(n.started_at)));
      tr.appendChild(el('td', {}, fmtTime(n.last_seen)));
      tr.appendChild(el('td', { class: 'parts' }, fmt(n.partitions.length) + ': ' + ranges(n.partitions)));
      tbody.appendChild(tr);
    }
  }

  // ranges writes ascending partition numbers as "0-3, 7, 9-12".
  function ranges(ps) {
    const out = [];
    for (let i = 0; i < ps.length; i++) {
      let j = i;
      while (j + 1 < ps.length && ps[j + 1] === ps[j] + 1) j++;
      out.push(i === j ? String(ps[i]) : ps[i] + '-' + ps[j]);
      i = j;
    }
    return out.join(', ') || 'none';
  }

  async function retry(id, button) {
    button.disabled = true;
    try {
      const r = await api('POST', '/v1/deadletters/' + encodeURIComponent(id) + '/retry');
      if (r.status !== 200 && r.status !== 202) {
        setStatus('retry of dead letter ' + id + ' failed: ' + errorText(r), true);
        button.disabled = false;
        return;
      }
      await refreshDeadLetters();
    } catch (e) {
      handleError(e);
      button.disabled = false;
    }
  }

  async function refresh() {
    await loadRole();
    const r = await api('GET', '/v1/dashboard');
    if (r.status !== 200) throw new Error(errorText(r));
    render(r.body);
    await refreshDeadLetters();
    await refreshNodes();
    setStatus('updated ' + fmtTime(r.body.now));
    document.body.dataset.updated = r.body.now; // for tests: a render finished
  }

  // The dashboard polls only while it is shown (console.js shows it at
  // #/ and stops it on every other page).
  let timer = null, running = false;
  async function poll() {
    clearTimeout(timer);
    if (!running) return;
    let again = true;
    try {
      await refresh();
    } catch (e) {
      handleError(e);
      again = !(e instanceof Unauthorized); // wait for the token form
    }
    if (again && running) timer = setTimeout(poll, POLL_MS);
  }

  window.hourglass.dashboard = {
    start() { $('main').hidden = false; running = true; poll(); },
    stop() { running = false; clearTimeout(timer); $('main').hidden = true; },
    running: () => running,
  };
  window.hourglass.onResume(() => { if (running) { $('main').hidden = false; poll(); } });
})();
