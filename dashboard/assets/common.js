// hourglass page, shared part: the API token, the API call, the caller's
// role, the token form and the helpers both the dashboard (app.js) and the
// console (console.js) use. No dependencies. Every value from the server is
// put in the page with textContent, never as HTML.
'use strict';

window.hourglass = (() => {
  const TOKEN_KEY = 'hourglass.token';
  const ZONE_KEY = 'hourglass.localtime';
  const $ = (id) => document.getElementById(id);

  // The token: from ?token= once (then removed from the address bar and
  // history), else from this tab's sessionStorage, else asked for on a 401.
  let token = sessionStorage.getItem(TOKEN_KEY) || '';
  const params = new URLSearchParams(location.search);
  if (params.has('token')) {
    token = params.get('token');
    sessionStorage.setItem(TOKEN_KEY, token);
    params.delete('token');
    const q = params.toString();
    history.replaceState(null, '', location.pathname + (q ? '?' + q : '') + location.hash);
  }

  class Unauthorized extends Error {}

  // api sends a request with the token (and a JSON body when given) and
  // returns {status, body}; a 401 throws Unauthorized.
  async function api(method, path, body) {
    const headers = { 'Accept': 'application/json' };
    if (token) headers['Authorization'] = 'Bearer ' + token;
    const init = { method, headers, cache: 'no-store' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(path, init);
    let out = null;
    try { out = await resp.json(); } catch (_) { /* not JSON */ }
    if (resp.status === 401) throw new Unauthorized((out && out.error && out.error.message) || 'unauthorized');
    return { status: resp.status, body: out };
  }

  function errorText(r) {
    return (r.body && r.body.error) ? r.body.error.code + ': ' + r.body.error.message : 'HTTP ' + r.status;
  }

  function setStatus(text, isError) {
    const e = $('status');
    e.textContent = text;
    e.classList.toggle('error', !!isError);
  }

  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  const fmt = (n) => Number(n).toLocaleString('en-US');

  // Times are shown in UTC unless the local-time switch is on (kept in
  // localStorage, so it holds across pages and tabs).
  let localTime = localStorage.getItem(ZONE_KEY) === '1';
  const zoneListeners = [];
  function setLocalTime(on) {
    localTime = !!on;
    localStorage.setItem(ZONE_KEY, localTime ? '1' : '0');
    for (const f of zoneListeners) f();
  }
  const pad = (n, w) => String(n).padStart(w || 2, '0');
  // fmtDateTime writes an RFC 3339 time as "2026-12-06 14:03:05.123 UTC" or
  // in the browser's zone with its offset.
  function fmtDateTime(iso) {
    if (!iso) return '–';
    const d = new Date(iso);
    if (isNaN(d)) return String(iso);
    if (!localTime) return d.toISOString().replace('T', ' ').replace('Z', ' UTC');
    const off = -d.getTimezoneOffset();
    const sign = off >= 0 ? '+' : '−';
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' + pad(d.getHours()) + ':' +
      pad(d.getMinutes()) + ':' + pad(d.getSeconds()) + '.' + pad(d.getMilliseconds(), 3) + ' ' + sign +
      pad(Math.floor(Math.abs(off) / 60)) + ':' + pad(Math.abs(off) % 60);
  }
  // fmtTime writes only the time of day, in the same zone.
  function fmtTime(iso) {
    const d = new Date(iso);
    if (isNaN(d)) return String(iso);
    if (!localTime) return d.toISOString().slice(11, 19);
    return d.toLocaleTimeString('en-GB', { hour12: false });
  }

  // The caller's role: 'operator' or 'viewer'; a viewer is shown no action.
  let role = null;
  async function loadRole() {
    if (role) return role;
    const r = await api('GET', '/v1/whoami');
    role = (r.status === 200 && r.body && r.body.role) || 'viewer';
    document.body.dataset.role = role;
    return role;
  }
  const canWrite = () => role === 'operator';

  // The token form: shown on a 401; submitting it stores the token and
  // calls every resume function registered.
  const resumers = [];
  function askToken(message) {
    $('token-form').hidden = false;
    for (const id of ['main', 'console']) if ($(id)) $(id).hidden = true;
    $('token-error').textContent = message || '';
    setStatus('needs the API token', true);
    $('token-input').focus();
  }
  function handleError(e) {
    if (e instanceof Unauthorized) {
      askToken(token ? 'The token was refused.' : '');
      return;
    }
    setStatus('update failed: ' + e.message, true);
  }
  document.addEventListener('DOMContentLoaded', () => {
    $('token-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      token = $('token-input').value.trim();
      sessionStorage.setItem(TOKEN_KEY, token);
      role = null;
      $('token-input').value = '';
      $('token-form').hidden = true;
      for (const f of resumers) f();
    });
  });

  return {
    $, api, errorText, setStatus, el, fmt, fmtTime, fmtDateTime, Unauthorized, handleError,
    loadRole, canWrite, onResume: (f) => resumers.push(f),
    localTime: () => localTime, setLocalTime, onZoneChange: (f) => zoneListeners.push(f),
  };
})();
