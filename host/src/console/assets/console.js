// The console's script. It polls the server's state every two seconds
// while the page is visible, and draws every plugin, the namespace as a
// chosen client sees it, and the recent events. Text from plugins, clients
// and files is hostile: it is only ever written as text (`textContent`,
// `append` of a string), never parsed as HTML.
'use strict';

(() => {
  const POLL_MS = 2000;
  const EVENTS_SHOWN = 200;
  // Raster images only: an SVG is a document that can carry script.
  const IMAGE_TYPES = new Set(['image/png', 'image/jpeg', 'image/gif', 'image/webp', 'image/avif', 'image/bmp']);
  const OAUTH = 'oauth:';

  const $ = (id) => document.getElementById(id);
  let token = sessionStorage.getItem('resmux-console-token');
  let lastEvent = 0;
  let startedMs = null;
  let timer = null;
  let knownClients = '';
  let servingSignature = null;
  let viewer = { as: '', groups: '' };
  let imageUrls = [];
  // Each listing and each read asked for counts up; an answer that comes
  // back after a newer one was asked for is dropped.
  let viewAsked = 0;
  let readAsked = 0;
  let polling = false;
  const openGrants = new Set();
  // The long texts shown whole, by key (a scheme and a role, an event, an
  // entry): they stay open through the redraws.
  const openTexts = new Set();
  // Each clamped text's button, and the clamped texts not measured yet.
  const toggles = new WeakMap();
  let unmeasured = [];

  class NeedsToken extends Error {}

  // An element with `props` set and `children` appended; a string child
  // becomes a text node.
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null) continue;
      if (key === 'class') node.className = value;
      else if (key.startsWith('data-') || key === 'title' || key === 'datetime') node.setAttribute(key, String(value));
      else node[key] = value;
    }
    for (const child of children.flat(Infinity)) {
      if (child !== undefined && child !== null && child !== false) node.append(child);
    }
    return node;
  }

  // `node`, a text a plugin or an error controls, clamped to a few lines,
  // and after it a button that shows it whole, shown only while the text
  // does not fit. Opened, it stays open under `key`.
  function clamped(node, key) {
    node.classList.add('clamp');
    const toggle = el('button', { type: 'button', class: 'show-all', 'data-role': 'show-all', hidden: true });
    const show = (open) => {
      node.toggleAttribute('data-open', open);
      toggle.setAttribute('aria-expanded', String(open));
      toggle.textContent = open ? 'Show less' : 'Show all';
    };
    show(openTexts.has(key));
    toggle.addEventListener('click', () => {
      const open = !node.hasAttribute('data-open');
      if (open) openTexts.add(key);
      else openTexts.delete(key);
      show(open);
    });
    toggles.set(node, toggle);
    measureSoon([node]);
    return [node, toggle];
  }

  // Measures `nodes` once laid out, with those waiting already, in one go.
  function measureSoon(nodes) {
    if (!unmeasured.length) {
      requestAnimationFrame(() => {
        const waiting = [...new Set(unmeasured)].filter((node) => node.isConnected);
        unmeasured = [];
        measure(waiting);
      });
    }
    unmeasured.push(...nodes);
  }

  // Shows each text's button only if the text, clamped, overflows: an open
  // text is clamped again for the measure, all in one layout.
  function measure(nodes) {
    const open = nodes.filter((node) => node.hasAttribute('data-open'));
    for (const node of open) node.removeAttribute('data-open');
    const overflows = nodes.map((node) => node.scrollHeight > node.clientHeight + 1);
    for (const node of open) node.setAttribute('data-open', '');
    nodes.forEach((node, index) => {
      toggles.get(node).hidden = !overflows[index];
    });
  }

  async function api(path) {
    const headers = token ? { Authorization: 'Bearer ' + token } : {};
    const response = await fetch(path, { headers, cache: 'no-store', credentials: 'omit' });
    if (response.status === 401) {
      askForToken(token ? 'That is not the console token.' : '');
      throw new NeedsToken();
    }
    const text = await response.text();
    let body = null;
    try {
      body = JSON.parse(text);
    } catch {
      // A refusal is plain text.
    }
    if (!response.ok) {
      throw new Error((body && body.error) || text.trim() || response.status + ' ' + response.statusText);
    }
    return body;
  }

  function askForToken(message) {
    token = null;
    sessionStorage.removeItem('resmux-console-token');
    $('token-form').hidden = false;
    $('token-error').textContent = message;
    setStatus('paused', 'needs the console token');
  }

  function setStatus(status, text) {
    const node = $('status');
    node.dataset.status = status;
    node.textContent = text || status;
  }

  const clock = (ms) => new Date(ms).toLocaleTimeString();
  const ago = (ms, now) => {
    const seconds = Math.max(0, Math.round((now - ms) / 1000));
    if (seconds < 120) return seconds + ' s ago';
    if (seconds < 7200) return Math.round(seconds / 60) + ' min ago';
    return Math.round(seconds / 3600) + ' h ago';
  };

  function bytes(count) {
    if (!count) return '0 B';
    const units = ['B', 'KiB', 'MiB', 'GiB'];
    let unit = 0;
    while (count >= 1024 && unit < units.length - 1) {
      count /= 1024;
      unit += 1;
    }
    return (unit ? count.toFixed(1) : count) + ' ' + units[unit];
  }

  // One poll at a time: a poll asked for while one is under way is left
  // to that one, which sets the one timer for the next.
  async function poll() {
    clearTimeout(timer);
    timer = null;
    if (polling) return;
    if (!token && $('token-form').hidden === false) return;
    polling = true;
    try {
      const known = startedMs;
      let state = await api('/console/api/state?after=' + lastEvent);
      if (known !== null && state.server.started_ms !== known && lastEvent > 0) {
        // The server started again, and counts its events from one.
        lastEvent = 0;
        state = await api('/console/api/state?after=0');
      }
      draw(state);
      setStatus('live', 'live, every ' + POLL_MS / 1000 + ' s');
    } catch (error) {
      if (error instanceof NeedsToken) return;
      setStatus('error', 'cannot reach the server: ' + error.message);
    } finally {
      polling = false;
    }
    if (!document.hidden && timer === null) timer = setTimeout(poll, POLL_MS);
  }

  function draw(state) {
    const server = state.server;
    if (server.started_ms !== startedMs) {
      // Another server, or this one started again: its events are new.
      startedMs = server.started_ms;
      $('events').replaceChildren();
    }
    $('server').textContent = 'version ' + server.version + ' over ' + server.transport + ', serving ' +
      server.folder + ', up since ' + clock(server.started_ms) + (server.audited ? ', audit log on' : '');
    drawPlugins(state.plugins, server);
    drawEvents(state.events);
    drawClients(state.clients, state.oauth);
    const signature = state.plugins.filter((plugin) => plugin.state !== 'loading' && plugin.state !== 'failed')
      .map((plugin) => plugin.scheme + '@' + plugin.since_ms).join(' ');
    if (signature !== servingSignature) {
      servingSignature = signature;
      listNamespace();
    }
  }

  function drawPlugins(plugins, server) {
    const counts = {};
    for (const plugin of plugins) counts[plugin.state] = (counts[plugin.state] || 0) + 1;
    $('plugin-count').textContent = Object.entries(counts).map(([state, count]) => count + ' ' + state).join(', ');
    $('plugins').replaceChildren(...plugins.map((plugin) => pluginCard(plugin, server)));
    if (!plugins.length) $('plugins').append(el('p', { class: 'muted' }, 'No plugin in the folder.'));
  }

  // A quarantine in force, or the last one, which a page polling every
  // two seconds might otherwise never show.
  function quarantineLine(quarantine, now) {
    const what = quarantine.path === null ? 'Quarantined' : 'Path ' + quarantine.path + ' quarantined';
    const role = quarantine.path === null ? 'quarantine' : 'path-quarantine';
    if (!quarantine.in_force) {
      return el('p', { class: 'detail muted', 'data-role': 'last-' + role },
        'Last ' + what.toLowerCase() + ' until ' + clock(quarantine.until_ms) + ': ' + quarantine.reason);
    }
    return el('p', { class: 'detail error', 'data-role': role },
      what + ' until ' + clock(quarantine.until_ms) + ' (' + Math.max(0, Math.ceil((quarantine.until_ms - now) / 1000)) +
      ' s left): ' + quarantine.reason);
  }

  function pluginCard(plugin, server) {
    const now = server.now_ms;
    const about = plugin.about;
    // What the plugin says and the errors are clamped, each open or not by
    // its scheme and role.
    const clamp = (node) => clamped(node, plugin.scheme + ' ' + node.dataset.role);
    const details = [];
    if (plugin.state === 'failed') details.push(clamp(el('p', { class: 'detail error', 'data-role': 'error' }, plugin.error)));
    if (plugin.state === 'loading') details.push(el('p', { class: 'detail muted' }, 'Loading since ' + clock(plugin.since_ms) + '.'));
    if (plugin.quarantine) details.push(clamp(quarantineLine(plugin.quarantine, now)));
    if (plugin.path_quarantine) details.push(clamp(quarantineLine(plugin.path_quarantine, now)));
    if (plugin.not_replaced) {
      details.push(clamp(el('p', { class: 'detail error', 'data-role': 'not-replaced' },
        'A change was refused; the version before keeps serving: ' + plugin.not_replaced)));
    }
    const card = el('article', { class: 'card', 'data-scheme': plugin.scheme, 'data-state': plugin.state },
      el('h3', null, el('span', { class: 'mono' }, plugin.scheme + '://'),
        el('span', { class: 'badge', 'data-state': plugin.state, 'data-role': 'state' }, plugin.state)),
      about && clamp(el('p', { class: 'about', 'data-role': 'about' },
        el('strong', null, about.name), ' ' + about.version + ' — ', about.description)),
      details,
      plugin.figures && figures(plugin.figures, server.window_s),
      el('dl', { class: 'facts' }, facts(plugin, now)),
      grants(plugin));
    return card;
  }

  function figures(figures, window) {
    const perSecond = window > 0;
    const faults = Object.entries(figures.faults_by_kind).map(([kind, count]) => count + ' ' + kind).join(', ');
    const cells = [
      ['calls/s', perSecond ? figures.calls_per_second.toFixed(1) : '–'],
      ['p50', (perSecond && figures.p50) || '–'],
      ['p99', (perSecond && figures.p99) || '–'],
      ['faults', (perSecond ? String(figures.faults) : '–') + (faults ? ' (' + faults + ' in all)' : '')],
      ['CPU', perSecond ? (figures.cpu_per_second * 100).toFixed(1) + ' %' : '–'],
      ['instances', figures.instances + ' (' + figures.idle_instances + ' idle)'],
      ['peak memory', bytes(figures.peak_memory_bytes)],
    ];
    return el('dl', { class: 'figures', title: perSecond ? 'over the last ' + window.toFixed(1) + ' s' : 'from the next sample on' },
      cells.map(([name, value]) => el('div', null, el('dt', null, name), el('dd', { 'data-figure': name }, value))));
  }

  function facts(plugin, now) {
    const rows = [
      ['state', plugin.state + ' since ' + clock(plugin.since_ms) + ' (' + ago(plugin.since_ms, now) + ')'],
      ['file', plugin.file],
      ['manifest', plugin.manifest || 'none (defaults apply)'],
      ['component', plugin.component !== plugin.file && plugin.component],
      ['sha256', plugin.sha256],
      ['code', plugin.code],
      ['pulled', plugin.pulled],
      ['signed by', plugin.signed_by && (plugin.signed_by + (plugin.logged ? ', with a checked transparency-log entry' : ', without a transparency-log entry'))],
    ];
    return rows.filter(([, value]) => value).map(([name, value]) => [el('dt', null, name), el('dd', { class: name === 'sha256' || name === 'pulled' ? 'mono' : '' }, value)]);
  }

  function grants(plugin) {
    if (!plugin.grants.length) return null;
    const details = el('details', { 'data-role': 'grants' },
      el('summary', null, 'Grants and limits'),
      el('dl', { class: 'facts' }, plugin.grants.map((grant) => [
        el('dt', null, grant.section),
        el('dd', null, grant.lines.length ? grant.lines.map((line) => el('div', null, line)) : el('span', { class: 'muted' }, 'none granted')),
      ])));
    details.open = openGrants.has(plugin.scheme);
    details.addEventListener('toggle', () => {
      if (details.open) openGrants.add(plugin.scheme);
      else openGrants.delete(plugin.scheme);
    });
    return details;
  }

  function drawEvents(events) {
    const fresh = events.filter((event) => event.id > lastEvent);
    if (!fresh.length) return;
    lastEvent = fresh[fresh.length - 1].id;
    const list = $('events');
    for (const event of fresh) {
      list.prepend(el('li', { 'data-kind': event.kind },
        el('time', { class: 'muted', datetime: new Date(event.at_ms).toISOString() }, clock(event.at_ms)),
        el('span', { class: 'badge', 'data-kind': event.kind }, event.kind),
        clamped(el('span', { class: 'text' }, event.text), 'event ' + startedMs + ' ' + event.id)));
    }
    while (list.children.length > EVENTS_SHOWN) list.lastElementChild.remove();
  }

  function drawClients(clients, oauth) {
    const signature = clients.join('\n') + (oauth ? '\noauth' : '');
    if (signature === knownClients) return;
    knownClients = signature;
    const select = $('as');
    const chosen = select.value;
    const options = [el('option', { value: '' }, 'the operator: everything'),
      ...clients.map((name) => el('option', { value: name }, 'client ' + name))];
    if (oauth) options.push(el('option', { value: OAUTH }, 'an OAuth subject…'));
    select.replaceChildren(...options);
    select.value = [...select.options].some((option) => option.value === chosen) ? chosen : '';
    $('oauth-fields').hidden = select.value !== OAUTH;
  }

  function viewerQuery() {
    const query = new URLSearchParams();
    if (viewer.as) query.set('as', viewer.as);
    if (viewer.groups) query.set('groups', viewer.groups);
    return query;
  }

  async function listNamespace() {
    const query = viewerQuery().toString();
    const who = viewer.as ? viewer.as + (viewer.groups ? ' in ' + viewer.groups : '') : 'the operator, who sees everything';
    $('viewer-note').textContent = 'As ' + who + '.';
    // Nothing of another view stays on show while this one is asked for.
    for (const id of ['resources', 'templates', 'resource-count', 'template-count']) $(id).replaceChildren();
    const asked = ++viewAsked;
    try {
      const [resources, templates] = await Promise.all([
        api('/console/api/resources?' + query),
        api('/console/api/templates?' + query),
      ]);
      if (asked !== viewAsked) return;
      drawEntries($('resources'), $('resource-count'), resources, 'resources', true, false);
      drawEntries($('templates'), $('template-count'), templates, 'resourceTemplates', false, false);
    } catch (error) {
      if (error instanceof NeedsToken || asked !== viewAsked) return;
      $('viewer-note').textContent = 'As ' + who + ': ' + error.message;
      $('resources').replaceChildren();
      $('templates').replaceChildren();
    }
  }

  // Draws a listing's entries, after those drawn already when `more`; a
  // listing longer than one answer ends with a button for the next part.
  function drawEntries(list, count, answer, field, readable, more) {
    if (more) {
      list.querySelector('li.more')?.remove();
      list.querySelector('li.nothing')?.remove();
    }
    if (answer.mcp_error) {
      const error = el('li', { class: 'error' },
        clamped(el('div', null, 'error ' + answer.mcp_error.code + ': ' + answer.mcp_error.message), field + ' error'));
      if (more) list.append(error);
      else list.replaceChildren(error);
      return;
    }
    const entries = answer[field];
    const shown = (more ? list.querySelectorAll('li[data-uri]').length : 0) + entries.length;
    count.textContent = shown + (answer.nextCursor ? '+' : '');
    const items = entries.map((entry) => {
      const address = entry.uri || entry.uriTemplate;
      const label = readable
        ? el('button', { type: 'button', 'data-uri': address, title: 'Read ' + address }, address)
        : el('span', { class: 'mono' }, address);
      if (readable) label.addEventListener('click', () => read(address));
      return el('li', { 'data-uri': address },
        label,
        el('div', null, entry.title || entry.name, entry.mimeType ? el('span', { class: 'muted' }, ' · ' + entry.mimeType) : null),
        entry.description
          ? clamped(el('div', { class: 'muted', 'data-role': 'description' }, entry.description), field + ' ' + address)
          : null);
    });
    if (more) list.append(...items);
    else list.replaceChildren(...items);
    if (!shown) list.append(el('li', { class: 'muted nothing' }, 'Nothing listed.'));
    if (answer.nextCursor) {
      const button = el('button', { type: 'button' }, 'List more');
      const asked = viewAsked;
      button.addEventListener('click', async () => {
        button.disabled = true;
        const query = viewerQuery();
        query.set('cursor', answer.nextCursor);
        const path = field === 'resources' ? '/console/api/resources?' : '/console/api/templates?';
        try {
          const more = await api(path + query);
          if (asked === viewAsked) drawEntries(list, count, more, field, readable, true);
        } catch (error) {
          if (error instanceof NeedsToken || asked !== viewAsked) return;
          $('viewer-note').textContent = error.message;
          button.disabled = false;
        }
      });
      list.append(el('li', { class: 'more' }, button));
    }
  }

  function decisionText(decision) {
    if (!decision) return 'No decision: the URI does not parse.';
    if (!decision.guarded) return 'Not guarded: this view may read everything.';
    if (decision.permitted) return 'Allowed by ' + decision.by.join(', ') + '.';
    if (!decision.by.length) return 'Denied: no policy permits it; the client is told it does not exist.';
    return 'Denied by ' + decision.by.join(', ') + '; the client is told it does not exist.';
  }

  async function read(uri) {
    const query = viewerQuery();
    query.set('uri', uri);
    $('reading').hidden = false;
    $('read-uri').textContent = uri;
    $('read-decision').textContent = 'Reading…';
    $('read-contents').replaceChildren();
    for (const url of imageUrls) URL.revokeObjectURL(url);
    imageUrls = [];
    const asked = ++readAsked;
    try {
      const answer = await api('/console/api/read?' + query);
      if (asked !== readAsked) return;
      $('read-decision').textContent = decisionText(answer.decision);
      if (answer.mcp_error) {
        $('read-contents').append(...clamped(el('p', { class: 'error' },
          'error ' + answer.mcp_error.code + ': ' + answer.mcp_error.message), 'read ' + uri));
        return;
      }
      $('read-contents').append(...answer.result.contents.map(content));
    } catch (error) {
      if (!(error instanceof NeedsToken) && asked === readAsked) $('read-decision').textContent = error.message;
    }
  }

  // A content as the server previews it: a text's beginning, and binary
  // content only while small enough to show.
  function content(item) {
    const heading = el('p', { class: 'muted mono' }, item.uri + (item.mimeType ? ' · ' + item.mimeType : ''));
    if (typeof item.text === 'string') {
      const leftOut = item.leftOutBytes
        ? el('p', { class: 'muted', 'data-role': 'left-out' },
          bytes(item.leftOutBytes) + ' more not shown here; a client reads it whole.')
        : null;
      return el('div', null, heading, el('pre', { 'data-role': 'text' }, item.text), leftOut);
    }
    const type = (item.mimeType || '').toLowerCase();
    if (typeof item.blob === 'string' && IMAGE_TYPES.has(type)) {
      const raw = atob(item.blob);
      const data = Uint8Array.from(raw, (char) => char.charCodeAt(0));
      const url = URL.createObjectURL(new Blob([data], { type }));
      imageUrls.push(url);
      return el('div', null, heading, el('img', { src: url, alt: item.uri, 'data-role': 'image' }));
    }
    const tooLarge = typeof item.blob === 'string' ? '' : ', too large to show here';
    return el('div', null, heading, el('p', { class: 'muted', 'data-role': 'binary' }, 'Binary content, ' + bytes(item.bytes) + tooLarge + '.'));
  }

  // A token in the address's fragment as the page opens (which the
  // browser never sends) is kept for this tab and taken out of the address.
  function tokenFromAddress() {
    const given = new URLSearchParams(location.hash.slice(1)).get('token');
    if (!given) return;
    token = given;
    sessionStorage.setItem('resmux-console-token', token);
    history.replaceState(null, '', location.pathname + location.search);
    $('token-form').hidden = true;
  }

  function start() {
    tokenFromAddress();
    // A token put in the fragment later (by whoever holds this window) is
    // not taken, only taken out of the address.
    window.addEventListener('hashchange', () => {
      if (new URLSearchParams(location.hash.slice(1)).has('token')) {
        history.replaceState(null, '', location.pathname + location.search);
      }
    });
    $('token-form').addEventListener('submit', (event) => {
      event.preventDefault();
      token = $('token').value.trim();
      $('token').value = '';
      sessionStorage.setItem('resmux-console-token', token);
      $('token-form').hidden = true;
      servingSignature = null;
      poll();
    });
    $('as').addEventListener('change', () => {
      $('oauth-fields').hidden = $('as').value !== OAUTH;
    });
    $('viewer').addEventListener('submit', (event) => {
      event.preventDefault();
      const chosen = $('as').value;
      viewer = chosen === OAUTH
        ? { as: OAUTH + $('subject').value.trim(), groups: $('groups').value.trim() }
        : { as: chosen, groups: '' };
      $('reading').hidden = true;
      listNamespace();
    });
    // Another width changes which clamped texts fit.
    window.addEventListener('resize', () => measureSoon([...document.querySelectorAll('.clamp')]));
    document.addEventListener('visibilitychange', () => {
      if (document.hidden) {
        clearTimeout(timer);
        timer = null;
        setStatus('paused', 'paused while hidden');
      } else {
        poll();
      }
    });
    poll();
  }

  start();
})();
