// hourglass console: find orders, timers, source rows and dead letters, read
// one thing's whole story, and act on one or many. Pages live in the hash
// (#/orders?status=closed&user_id=u1), so a link can be shared and the back
// button works; #/ is the dashboard (app.js). No dependencies. Every value
// from the server is put in the page with textContent, never as HTML.
'use strict';

(() => {
  const H = window.hourglass;
  const { $, api, errorText, setStatus, el, fmt, fmtDateTime, handleError, canWrite, loadRole } = H;
  const REFRESH_MS = 2000;
  const BULK_POLL_MS = 1000;

  // ---- the lists -------------------------------------------------------

  const orderStatuses = ['pending_payment', 'paid', 'cancelled', 'closed', 'shipped', 'completed'];
  const timerStatuses = ['scheduled', 'fired', 'cancelled'];
  const timeHint = 'RFC 3339, e.g. 2026-12-06T14:00:00Z';

  // Each list: its API path and field, its filters (the query parameters
  // of the API, kept in the page's hash), its columns, how a row is named,
  // and the bulk actions it offers (by selection: ids; by filter: all
  // matching).
  const LISTS = {
    orders: {
      title: 'Orders', path: '/v1/orders', field: 'orders',
      filters: [
        { name: 'status', options: orderStatuses },
        { name: 'user_id', label: 'user id' },
        { name: 'deadline_after', label: 'deadline ≥', hint: timeHint },
        { name: 'deadline_before', label: 'deadline <', hint: timeHint },
        { name: 'created_after', label: 'created ≥', hint: timeHint },
        { name: 'created_before', label: 'created <', hint: timeHint },
      ],
      columns: [
        ['id', (o) => link('#/orders/' + o.id, String(o.id))],
        ['user', (o) => o.user_id],
        ['status', (o) => o.status],
        ['deadline', (o) => fmtDateTime(o.deadline)],
        ['created', (o) => fmtDateTime(o.created_at)],
        ['closed at', (o) => fmtDateTime(o.closed_at)],
        ['close reason', (o) => o.close_reason || ''],
      ],
      id: (o) => o.id,
      actions: [
        { action: 'cancel_orders', label: 'Cancel' },
        { action: 'extend_orders', label: 'Extend', ask: () => { const e = askExtend(); return e && { extend: e }; } },
      ],
    },
    timers: {
      title: 'Timers', path: '/v1/timers', field: 'timers',
      filters: [
        { name: 'status', options: timerStatuses },
        { name: 'prefix', label: 'key prefix' },
        { name: 'fire_after', label: 'fire at ≥', hint: timeHint },
        { name: 'fire_before', label: 'fire at <', hint: timeHint },
      ],
      columns: [
        ['key', (t) => link('#/timers/' + encodeURIComponent(t.key), t.key)],
        ['status', (t) => t.status],
        ['fire at', (t) => fmtDateTime(t.fire_at)],
        ['fired at', (t) => fmtDateTime(t.fired_at)],
        ['webhook', (t) => t.webhook_id == null ? 'subscribers' : String(t.webhook_id)],
        ['updated', (t) => fmtDateTime(t.updated_at)],
      ],
      id: (t) => t.key,
      actions: [{ action: 'cancel_timers', label: 'Cancel' }],
    },
    deadletters: {
      title: 'Dead letters', path: '/v1/deadletters', field: 'deadletters',
      filters: [
        { name: 'webhook_id', label: 'webhook id' },
        { name: 'event_type', label: 'event type' },
        { name: 'failed_after', label: 'failed ≥', hint: timeHint },
        { name: 'failed_before', label: 'failed <', hint: timeHint },
      ],
      columns: [
        ['id', (d) => String(d.id)],
        ['event', (d) => d.event_type],
        ['order', (d) => d.order_id ? link('#/orders/' + d.order_id, String(d.order_id)) : '–'],
        ['webhook', (d) => String(d.webhook_id)],
        ['attempts', (d) => String(d.attempts)],
        ['failed at', (d) => fmtDateTime(d.failed_at)],
        ['last error', (d) => d.last_error || ''],
      ],
      id: (d) => d.id,
      rowActions: (d, after) => [
        button('Retry', 'retry', async () => act('POST', '/v1/deadletters/' + d.id + '/retry', 'retry of dead letter ' + d.id, after)),
        button('Delete', 'delete', async () => {
          if (confirm('Delete dead letter ' + d.id + '? Its event will not be delivered to webhook ' + d.webhook_id + '.')) {
            await act('DELETE', '/v1/deadletters/' + d.id, 'delete of dead letter ' + d.id, after);
          }
        }),
      ],
      actions: [
        { action: 'retry_deadletters', label: 'Retry' },
        { action: 'delete_deadletters', label: 'Delete' },
      ],
    },
  };

  // ---- small helpers ----------------------------------------------------

  function link(href, text) {
    const a = el('a', { href }, text);
    return a;
  }

  // para is a paragraph holding nodes (el's text is text only).
  function para(...nodes) {
    const p = el('p');
    p.append(...nodes);
    return p;
  }

  function button(text, cls, onClick) {
    const b = el('button', { type: 'button', class: cls }, text);
    b.addEventListener('click', async () => {
      b.disabled = true;
      try { await onClick(); } catch (e) { handleError(e); } finally { b.disabled = false; }
    });
    return b;
  }

  // act sends one write and reports its outcome in the status line, then
  // calls after (to redraw).
  async function act(method, path, what, after, body) {
    const r = await api(method, path, body);
    if (r.status >= 300) {
      setStatus(what + ' failed: ' + errorText(r), true);
      return null;
    }
    setStatus(what + ': done');
    if (after) await after();
    return r;
  }

  function cell(v) {
    const td = el('td');
    if (v instanceof Node) td.appendChild(v); else td.textContent = v == null ? '' : String(v);
    return td;
  }

  function table(headers, rows) {
    const t = el('table');
    const tr = el('tr');
    for (const h of headers) tr.appendChild(el('th', {}, h));
    t.appendChild(el('thead')).appendChild(tr);
    const tb = el('tbody');
    for (const r of rows) {
      const row = el('tr');
      for (const v of r) row.appendChild(cell(v));
      tb.appendChild(row);
    }
    t.appendChild(tb);
    return t;
  }

  function card(title, ...children) {
    const c = el('section', { class: 'card wide' });
    if (title) c.appendChild(el('h2', {}, title));
    for (const ch of children) if (ch) c.appendChild(ch);
    return c;
  }

  // fields draws a two-column table of label and value.
  function fields(pairs) {
    const t = el('table', { class: 'fields' });
    for (const [k, v] of pairs) {
      const tr = el('tr');
      tr.appendChild(el('th', {}, k));
      tr.appendChild(cell(v));
      t.appendChild(tr);
    }
    return t;
  }

  function fmtMs(ms) {
    if (ms == null) return '–';
    const a = Math.abs(ms);
    const s = a < 1000 ? a + ' ms' : a < 60000 ? +(a / 1000).toFixed(3) + ' s' : +(a / 60000).toFixed(1) + ' min';
    return (ms < 0 ? '−' : '') + s;
  }

  // ---- routing ------------------------------------------------------------

  const view = () => $('console');
  let refreshTimer = null, pageToken = 0;

  function parseHash() {
    const h = location.hash.replace(/^#/, '') || '/';
    const [path, q] = h.split('?');
    const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    return { parts, query: new URLSearchParams(q || '') };
  }

  function go(hash) {
    if (location.hash === hash) route(); else location.hash = hash;
  }

  async function route() {
    clearTimeout(refreshTimer);
    const token = ++pageToken;
    const { parts, query } = parseHash();
    for (const a of document.querySelectorAll('nav a')) {
      a.classList.toggle('active', a.dataset.page === (parts[0] || 'dashboard'));
    }
    if (parts.length === 0) {
      view().hidden = true;
      H.dashboard.start();
      return;
    }
    H.dashboard.stop();
    view().hidden = false;
    view().replaceChildren(el('p', { class: 'muted' }, 'loading…'));
    try {
      await loadRole();
      if (token !== pageToken) return;
      const [page, id, sub, key] = parts;
      if (LISTS[page] && parts.length === 1) return await listPage(token, page, query);
      if (page === 'orders' && id) return await orderPage(token, id);
      if (page === 'timers' && id) return await timerPage(token, id);
      if (page === 'bulk' && !id) return await bulkListPage(token, query);
      if (page === 'bulk' && id) return await bulkPage(token, id);
      if (page === 'sources' && id && sub === 'rows' && !key) return await sourceRowsPage(token, id, query);
      if (page === 'sources' && id && sub === 'rows' && key) return await sourceRowPage(token, id, key);
      view().replaceChildren(card('Not found', el('p', {}, 'No page at ' + location.hash + '.')));
    } catch (e) {
      handleError(e);
    }
  }

  // rendered marks a page drawn: for tests, body.dataset.page names it
  // and body.dataset.rendered changes; the status line leaves 'loading'.
  let renders = 0;
  function rendered(page) {
    document.body.dataset.page = page;
    document.body.dataset.view = location.hash; // the address this render drew
    document.body.dataset.rendered = String(++renders);
    if ($('status').textContent === 'loading…') setStatus('');
  }

  // again schedules a redraw of the current page, unless the user has
  // moved on.
  function again(token, ms, f) {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(() => { if (token === pageToken) f(); }, ms);
  }

  // ---- a list page ------------------------------------------------------

  async function listPage(token, name, query) {
    const L = LISTS[name];
    const form = filterForm(name, L.filters, query);
    const live = el('input', { type: 'checkbox', id: 'live' });
    live.checked = query.get('live') === '1';
    live.addEventListener('change', () => {
      query.set('live', live.checked ? '1' : '0');
      history.replaceState(null, '', '#/' + name + '?' + query.toString());
      if (live.checked) route();
    });
    const liveLabel = el('label', { class: 'live' });
    liveLabel.append(live, ' live refresh');
    const head = card(L.title, form, liveLabel);
    const body = el('div', { id: 'list-body' });
    view().replaceChildren(head, body);

    // The API's query: the filters, limit and the cursor (after).
    const apiQuery = new URLSearchParams();
    for (const f of L.filters) if (query.get(f.name)) apiQuery.set(f.name, query.get(f.name));
    apiQuery.set('limit', query.get('limit') || '50');
    if (query.get('after')) apiQuery.set('after', query.get('after'));
    const r = await api('GET', L.path + '?' + apiQuery.toString());
    if (token !== pageToken) return;
    if (r.status !== 200) {
      body.replaceChildren(card(null, el('p', { class: 'error' }, errorText(r))));
      return;
    }
    const items = r.body[L.field] || [];
    const selected = new Set();
    const headers = ['', ...L.columns.map((c) => c[0])];
    if (L.rowActions && canWrite()) headers.push('');
    const t = el('table', { id: name + '-table', class: 'list' });
    const htr = el('tr');
    const all = el('input', { type: 'checkbox', title: 'select this page' });
    const th0 = el('th');
    if (canWrite()) th0.appendChild(all);
    htr.appendChild(th0);
    for (const h of headers.slice(1)) htr.appendChild(el('th', {}, h));
    t.appendChild(el('thead')).appendChild(htr);
    const tb = el('tbody');
    const boxes = [];
    const redraw = () => route();
    for (const it of items) {
      const tr = el('tr', { 'data-id': String(L.id(it)) });
      const td0 = el('td');
      if (canWrite()) {
        const box = el('input', { type: 'checkbox', class: 'select' });
        box.addEventListener('change', () => { box.checked ? selected.add(L.id(it)) : selected.delete(L.id(it)); bar.update(); });
        boxes.push(box);
        td0.appendChild(box);
      }
      tr.appendChild(td0);
      for (const [, f] of L.columns) tr.appendChild(cell(f(it)));
      if (L.rowActions && canWrite()) {
        const td = el('td', { class: 'actions' });
        for (const b of L.rowActions(it, redraw)) td.appendChild(b);
        tr.appendChild(td);
      }
      tb.appendChild(tr);
    }
    t.appendChild(tb);
    all.addEventListener('change', () => {
      for (const [i, b] of boxes.entries()) {
        b.checked = all.checked;
        all.checked ? selected.add(L.id(items[i])) : selected.delete(L.id(items[i]));
      }
      bar.update();
    });

    const bar = bulkBar(name, L, selected, apiQuery);
    const pager = el('p', { class: 'pager' });
    pager.appendChild(el('span', { class: 'muted', id: 'list-count' }, fmt(items.length) + (r.body.next != null ? ' shown; more follow' : ' shown')));
    if (query.get('after')) {
      const q = new URLSearchParams(query); q.delete('after');
      pager.append(' ', link('#/' + name + '?' + q.toString(), 'first page'));
    }
    if (r.body.next != null) {
      const q = new URLSearchParams(query); q.set('after', String(r.body.next));
      pager.append(' ', link('#/' + name + '?' + q.toString(), 'next page →'));
    }
    const out = card(null, items.length === 0 ? el('p', { class: 'muted', id: 'list-empty' }, 'Nothing matches.') : t, pager);
    if (canWrite()) out.insertBefore(bar.node, out.firstChild);
    body.replaceChildren(out);
    rendered(name);
    if (live.checked) again(token, REFRESH_MS, () => listPage(token, name, query));
  }

  // filterForm draws a list's filters; submitting it moves to a page whose
  // hash holds them.
  function filterForm(name, filters, query) {
    const form = el('form', { class: 'filters', id: name + '-filters' });
    for (const f of filters) {
      const label = el('label', {}, (f.label || f.name) + ' ');
      let input;
      if (f.options) {
        input = el('select', { name: f.name });
        input.appendChild(el('option', { value: '' }, 'any'));
        for (const o of f.options) input.appendChild(el('option', { value: o }, o));
      } else {
        input = el('input', { name: f.name, type: 'text', size: f.hint ? '24' : '16' });
        if (f.hint) input.setAttribute('placeholder', f.hint);
      }
      input.value = query.get(f.name) || '';
      label.appendChild(input);
      form.appendChild(label);
    }
    form.appendChild(el('button', { type: 'submit' }, 'Find'));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const q = new URLSearchParams();
      for (const f of filters) {
        const v = form.elements[f.name].value.trim();
        if (v) q.set(f.name, v);
      }
      if (query.get('live') === '1') q.set('live', '1');
      go('#/' + name + (q.toString() ? '?' + q.toString() : ''));
    });
    return form;
  }

  // bulkBar offers a list's bulk actions on the selection (ids, applied in
  // one transaction) or on everything matching the filter (a background
  // action followed on its own page).
  function bulkBar(name, L, selected, apiQuery) {
    const node = el('div', { class: 'bulkbar', id: 'bulkbar' });
    const count = el('span', { class: 'muted' });
    const filter = {};
    for (const f of L.filters) if (apiQuery.get(f.name)) filter[f.name] = apiQuery.get(f.name);
    const filterText = Object.keys(filter).length ? Object.entries(filter).map(([k, v]) => k + '=' + v).join(', ') : 'no filter: every ' + name.replace(/s$/, '');
    const selButtons = [];
    for (const a of L.actions) {
      const b = button(a.label + ' selected', 'bulk-selected ' + a.action, async () => {
        const params = a.ask ? a.ask() : {};
        if (params === null) return;
        const reason = prompt(a.label + ' ' + selected.size + ' selected? Reason (recorded with the action):', '');
        if (!reason) return;
        const ids = [...selected];
        const r = await api('POST', '/v1/bulk-actions', Object.assign({ action: a.action, reason, ids }, params));
        if (r.status !== 200) { setStatus(a.label + ' of ' + ids.length + ' failed: ' + errorText(r), true); return; }
        const results = r.body.results || r.body.items || [];
        const failed = results.filter((x) => x.error || (x.status && x.status >= 300)).length;
        setStatus(a.label + ': ' + (ids.length - failed) + ' done' + (failed ? ', ' + failed + ' refused' : ''), failed > 0);
        route();
      });
      selButtons.push(b);
      node.appendChild(b);
    }
    node.appendChild(count);
    node.appendChild(el('span', { class: 'sep' }, '|'));
    for (const a of L.actions) {
      node.appendChild(button(a.label + ' all matching…', 'bulk-all ' + a.action, async () => {
        const params = a.ask ? a.ask() : {};
        if (params === null) return;
        const body = Object.assign({ action: a.action, filter }, params);
        // The count first: a dry run matches without acting.
        const dry = await api('POST', '/v1/bulk-actions', Object.assign({}, body, { reason: 'count', dry_run: true }));
        const n = dry.status === 200 && dry.body && dry.body.matched != null ? dry.body.matched : null;
        const what = (n == null ? 'every' : (dry.body.more ? 'more than ' : '') + fmt(n)) + ' ' + name + ' matching ' + filterText;
        const reason = prompt(a.label + ' ' + what + '? Reason (recorded with the action):', '');
        if (!reason) return;
        const rate = prompt('At most how many per second? (empty: as fast as the store takes them)', '');
        if (rate) body.rate = Number(rate);
        body.reason = reason;
        const r = await api('POST', '/v1/bulk-actions', body);
        if (r.status !== 202 && r.status !== 200) { setStatus(a.label + ' all matching failed: ' + errorText(r), true); return; }
        go('#/bulk/' + encodeURIComponent(r.body.id));
      }));
    }
    const update = () => {
      count.textContent = selected.size + ' selected';
      for (const b of selButtons) b.disabled = selected.size === 0;
    };
    update();
    return { node, update };
  }

  function askExtend() {
    const v = prompt('Extend by how many minutes?', '10');
    if (v === null) return null;
    const m = Number(v);
    if (!(m > 0)) { setStatus('extend: give a number of minutes above 0', true); return null; }
    return { extend_ms: Math.round(m * 60000) };
  }

  // ---- one order, one timer, one source row ------------------------------

  async function orderPage(token, id) {
    const r = await api('GET', '/v1/orders/' + encodeURIComponent(id));
    if (token !== pageToken) return;
    if (r.status !== 200) return view().replaceChildren(card('Order ' + id, el('p', { class: 'error' }, errorText(r))));
    const o = r.body;
    const redraw = () => orderPage(token, id);
    const actions = el('div', { class: 'actions', id: 'order-actions' });
    if (canWrite() && o.status === 'pending_payment') {
      actions.appendChild(button('Extend…', 'extend', async () => {
        const p = askExtend();
        if (p) await act('POST', '/v1/orders/' + o.id + '/extend', 'extend of order ' + o.id, redraw, p);
      }));
      actions.appendChild(button('Cancel order', 'cancel', async () => {
        if (confirm('Cancel order ' + o.id + '? Its stock is released.')) await act('POST', '/v1/orders/' + o.id + '/cancel', 'cancel of order ' + o.id, redraw);
      }));
    }
    const items = (o.items || []).map((it) => it.quantity + ' × ' + it.sku).join(', ');
    const head = card('Order ' + o.id, fields([
      ['status', o.status], ['user', link('#/orders?user_id=' + encodeURIComponent(o.user_id), o.user_id)], ['items', items],
      ['created', fmtDateTime(o.created_at)], ['deadline', fmtDateTime(o.deadline)], ['paid at', fmtDateTime(o.paid_at)],
      ['closed at', fmtDateTime(o.closed_at)], ['close reason', o.close_reason || '–'], ['payment id', o.payment_id || '–'],
    ]), actions);
    const hist = await historyCard('/v1/orders/' + encodeURIComponent(id) + '/history');
    if (token !== pageToken) return;
    view().replaceChildren(head, hist);
    rendered('order');
  }

  async function timerPage(token, key) {
    const r = await api('GET', '/v1/timers/' + encodeURIComponent(key));
    if (token !== pageToken) return;
    if (r.status !== 200) return view().replaceChildren(card('Timer ' + key, el('p', { class: 'error' }, errorText(r))));
    const t = r.body;
    const redraw = () => timerPage(token, key);
    const path = '/v1/timers/' + encodeURIComponent(key);
    const actions = el('div', { class: 'actions', id: 'timer-actions' });
    if (canWrite()) {
      if (t.status === 'scheduled') {
        actions.appendChild(button('Cancel timer', 'cancel', async () => {
          if (confirm('Cancel timer ' + key + '? It will not fire.')) await act('DELETE', path, 'cancel of timer ' + key, redraw);
        }));
      }
      actions.appendChild(button('Re-arm…', 'rearm', async () => {
        const v = prompt('Fire in how many seconds from now?', '60');
        if (v === null) return;
        const s = Number(v);
        if (!(s >= 0)) { setStatus('re-arm: give a number of seconds, 0 or more', true); return; }
        const body = { delay_ms: Math.round(s * 1000) };
        if (t.payload != null) body.payload = t.payload;
        if (t.webhook_id != null) body.webhook_id = t.webhook_id;
        await act('PUT', path, 're-arm of timer ' + key, redraw, body);
      }));
    }
    const head = card('Timer ' + key, fields([
      ['status', t.status], ['fire at', fmtDateTime(t.fire_at)], ['fired at', fmtDateTime(t.fired_at)],
      ['webhook', t.webhook_id == null ? 'every webhook subscribed to timer.fired' : String(t.webhook_id)],
      ['payload', t.payload == null ? '–' : el('code', {}, JSON.stringify(t.payload))],
      ['created', fmtDateTime(t.created_at)], ['updated', fmtDateTime(t.updated_at)],
    ]), actions);
    const hist = await historyCard(path + '/history');
    if (token !== pageToken) return;
    view().replaceChildren(head, hist);
    rendered('timer');
  }

  async function sourceRowsPage(token, name, query) {
    const filters = [
      { name: 'status', options: ['pending', 'closed'] },
      { name: 'deadline_after', label: 'deadline ≥', hint: timeHint },
      { name: 'deadline_before', label: 'deadline <', hint: timeHint },
    ];
    const base = 'sources/' + encodeURIComponent(name) + '/rows';
    const form = filterForm(base, filters, query);
    const apiQuery = new URLSearchParams();
    for (const f of filters) if (query.get(f.name)) apiQuery.set(f.name, query.get(f.name));
    apiQuery.set('limit', '50');
    if (query.get('after')) apiQuery.set('after', query.get('after'));
    const r = await api('GET', '/v1/' + base + '?' + apiQuery.toString());
    if (token !== pageToken) return;
    let body;
    if (r.status !== 200) {
      body = el('p', { class: 'error' }, errorText(r));
    } else {
      const rows = r.body.rows || [];
      body = el('div');
      body.appendChild(table(['key', 'status', 'deadline', 'closed at'], rows.map((x) => [
        link('#/' + base + '/' + encodeURIComponent(x.key), x.key), x.status || '', fmtDateTime(x.deadline), fmtDateTime(x.closed_at),
      ])));
      if (r.body.next != null) {
        const q = new URLSearchParams(query); q.set('after', String(r.body.next));
        body.appendChild(link('#/' + base + '?' + q.toString(), 'next page →'));
      }
    }
    view().replaceChildren(card('Source ' + name + ': rows', form), card(null, body));
    rendered('source-rows');
  }

  async function sourceRowPage(token, name, key) {
    const hist = await historyCard('/v1/sources/' + encodeURIComponent(name) + '/rows/' + encodeURIComponent(key) + '/history');
    if (token !== pageToken) return;
    view().replaceChildren(card('Source ' + name + ', row ' + key, para(link('#/sources/' + encodeURIComponent(name) + '/rows', 'all rows of ' + name))), hist);
    rendered('source-row');
  }

  // historyCard reads a history route and draws its timing (scheduled
  // beside actual, what closed it, on which node), its events and their
  // deliveries with every attempt.
  async function historyCard(path) {
    const r = await api('GET', path);
    if (r.status === 404 && !(r.body && r.body.error && r.body.error.code === 'not_found')) {
      return card('History', el('p', { class: 'muted' }, 'This server keeps no history.'));
    }
    if (r.status !== 200) return card('History', el('p', { class: 'error' }, errorText(r)));
    return renderHistory(r.body);
  }

  function renderHistory(h) {
    const out = el('div', { id: 'history' });
    const tm = h.timing || {};
    const pairs = [];
    for (const [i, d] of (tm.deadlines || []).entries()) {
      const by = d.set_by ? ' (' + d.set_by + (d.set_at ? ' at ' + fmtDateTime(d.set_at) : '') + ')' : '';
      pairs.push(['deadline ' + (i + 1), (d.deadline ? fmtDateTime(d.deadline) : 'not kept') + by]);
    }
    pairs.push(['scheduled', el('span', { id: 'scheduled' }, tm.deadline ? fmtDateTime(tm.deadline) : '–')]);
    pairs.push(['actual', el('span', { id: 'actual' }, tm.closed_at ? fmtDateTime(tm.closed_at) : 'not yet')]);
    pairs.push(['lateness', el('span', { id: 'lateness' }, fmtMs(tm.lateness_ms))]);
    pairs.push(['closed by', el('span', { id: 'closed-by' }, tm.closed_by || '–')]);
    pairs.push(['on node', el('span', { id: 'closed-node' }, tm.node || '–')]);
    out.appendChild(card('Timing: scheduled beside actual', fields(pairs)));

    const events = h.events || [];
    const evTable = table(['at', 'event', 'id', 'deadline', 'by', 'deliveries'], events.map((e) => [
      fmtDateTime(e.created_at), e.type, e.id, e.deadline ? fmtDateTime(e.deadline) : '',
      e.closed_by ? e.closed_by + (e.node ? ' on ' + e.node : '') : '', String((e.deliveries || []).length),
    ]));
    evTable.id = 'history-events';
    out.appendChild(card('Events' + (h.events_truncated ? ' (the latest; earlier ones left out)' : ''),
      events.length ? evTable : el('p', { class: 'muted' }, 'none kept')));

    const dRows = [];
    for (const e of events) {
      for (const d of e.deliveries || []) {
        const attempts = d.attempts || [];
        dRows.push([e.type, String(d.webhook_id), d.state, String(d.attempt_count != null ? d.attempt_count : attempts.length),
          attempts.map((a) => '#' + a.attempt + ' ' + fmtDateTime(a.at) + ' → ' + (a.status_code ? 'HTTP ' + a.status_code : 'no answer') +
            ' in ' + fmtMs(a.duration_ms) + ' (' + a.outcome + ')' + (a.error ? ': ' + a.error : '')).join('\n'),
          d.last_error || '']);
      }
    }
    const dTable = table(['event', 'webhook', 'state', 'attempts', 'each attempt', 'last error'], dRows);
    dTable.id = 'history-deliveries';
    out.appendChild(card('Deliveries' + (h.deliveries_truncated ? ' (some left out)' : ''),
      dRows.length ? dTable : el('p', { class: 'muted' }, 'none')));
    return out;
  }

  // ---- bulk actions -------------------------------------------------------

  function progress(b) {
    const p = el('div', { class: 'progress' });
    const pct = b.matched > 0 ? Math.min(100, Math.round(100 * (b.done + b.failed) / b.matched)) : (b.state === 'running' ? 0 : 100);
    const fill = el('div', { class: 'fill' });
    fill.style.width = pct + '%';
    p.appendChild(fill);
    p.title = pct + '%';
    return p;
  }

  async function bulkListPage(token, query) {
    const q = new URLSearchParams({ limit: '50' });
    if (query.get('after')) q.set('after', query.get('after'));
    const r = await api('GET', '/v1/bulk-actions?' + q.toString());
    if (token !== pageToken) return;
    if (r.status !== 200) return view().replaceChildren(card('Bulk actions', el('p', { class: 'error' }, errorText(r))));
    const list = r.body.bulk_actions || r.body.actions || [];
    const t = table(['id', 'action', 'state', 'matched', 'done', 'failed', 'progress', 'created', 'finished'], list.map((b) => [
      link('#/bulk/' + encodeURIComponent(b.id), String(b.id)), b.action, b.state, fmt(b.matched), fmt(b.done), fmt(b.failed), progress(b),
      fmtDateTime(b.created_at), fmtDateTime(b.finished_at),
    ]));
    t.id = 'bulk-table';
    view().replaceChildren(card('Bulk actions', list.length ? t : el('p', { class: 'muted' }, 'None yet.')));
    rendered('bulk');
    if (list.some((b) => b.state === 'running')) again(token, BULK_POLL_MS, () => bulkListPage(token, query));
  }

  async function bulkPage(token, id) {
    const r = await api('GET', '/v1/bulk-actions/' + encodeURIComponent(id));
    if (token !== pageToken) return;
    if (r.status !== 200) return view().replaceChildren(card('Bulk action ' + id, el('p', { class: 'error' }, errorText(r))));
    const b = r.body;
    const actions = el('div', { class: 'actions' });
    if (canWrite() && b.state === 'running') {
      actions.appendChild(button('Stop', 'stop', async () => act('POST', '/v1/bulk-actions/' + encodeURIComponent(id) + '/stop', 'stop of bulk action ' + id, () => bulkPage(token, id))));
    }
    const pairs = [['action', b.action], ['state', el('span', { id: 'bulk-state' }, b.state)], ['matched', fmt(b.matched)],
      ['done', el('span', { id: 'bulk-done' }, fmt(b.done))], ['failed', fmt(b.failed)], ['progress', progress(b)]];
    if (b.reason) pairs.push(['reason', b.reason]);
    if (b.rate) pairs.push(['rate', fmt(b.rate) + '/s']);
    if (b.filter) pairs.push(['filter', JSON.stringify(b.filter)]);
    if (b.node) pairs.push(['running on', b.node]);
    if (b.error) pairs.push(['error', b.error]);
    pairs.push(['created', fmtDateTime(b.created_at)], ['finished', fmtDateTime(b.finished_at)]);
    view().replaceChildren(card('Bulk action ' + b.id, fields(pairs), actions), para(link('#/bulk', 'all bulk actions')));
    rendered('bulk-action');
    if (b.state === 'running') again(token, BULK_POLL_MS, () => bulkPage(token, id));
  }

  // ---- search -------------------------------------------------------------

  // search takes an order id, a timer key, a timer key prefix ending in *,
  // a user id, or source:key, and goes to the page that shows it.
  async function search(q) {
    q = q.trim();
    if (!q) return;
    try {
      await loadRole();
      if (q.endsWith('*')) return go('#/timers?prefix=' + encodeURIComponent(q.slice(0, -1)));
      const m = /^([a-z0-9_]{1,64}):(.+)$/.exec(q);
      if (m) {
        const s = await api('GET', '/v1/sources/' + encodeURIComponent(m[1]) + '/bad-rows');
        if (s.status === 200) return go('#/sources/' + encodeURIComponent(m[1]) + '/rows/' + encodeURIComponent(m[2]));
      }
      if (/^[0-9]{1,19}$/.test(q)) {
        const o = await api('GET', '/v1/orders/' + q);
        if (o.status === 200) return go('#/orders/' + q);
      }
      if (/^[A-Za-z0-9._:-]{1,256}$/.test(q)) {
        const t = await api('GET', '/v1/timers/' + encodeURIComponent(q));
        if (t.status === 200) return go('#/timers/' + encodeURIComponent(q));
      }
      go('#/orders?user_id=' + encodeURIComponent(q));
    } catch (e) {
      handleError(e);
    }
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('search').addEventListener('submit', (ev) => {
      ev.preventDefault();
      search($('search-input').value);
    });
    const zone = $('localtime');
    zone.checked = H.localTime();
    zone.addEventListener('change', () => H.setLocalTime(zone.checked));
    H.onZoneChange(() => { if (parseHash().parts.length) route(); });
    H.onResume(() => { if (parseHash().parts.length) route(); });
    window.addEventListener('hashchange', route);
    route();
  });
})();
