// The resmux SDK for JavaScript (componentize-js): constructors for the
// contract's records with their defaults, the errors a plugin throws, the
// operator's `[config]` read key by key, pagination, and `exportPlugin`, which
// turns a plugin's functions into the component's `provider` export.
//
// `resmux new --lang js` puts this file beside app.js; import it as
// `./resmux.js` (componentize-js loads relative imports at build time, from
// the app's own directory only).
// Records use camelCase fields and an absent option is `undefined`.

export function pluginInfo(name, version, description) {
  return { name, version, description };
}

export function resource(path, name, { title, description, mimeType, size, annotations, icons = [], meta } = {}) {
  return { path, name, title, description, mimeType, size, annotations, icons, meta };
}

export function template(pathTemplate, name, { title, description, mimeType, annotations, icons = [], meta } = {}) {
  return { pathTemplate, name, title, description, mimeType, annotations, icons, meta };
}

// `audience` holds 'user' and/or 'assistant'; `lastModified` is ISO 8601 text.
export function annotations({ audience = [], priority, lastModified } = {}) {
  return { audience, priority, lastModified };
}

export function textContent(path, mimeType, text, { meta } = {}) {
  return { path, mimeType, body: { tag: 'text', val: text }, meta };
}

// `bytes`: a Uint8Array (or an array of numbers).
export function blobContent(path, mimeType, bytes, { meta } = {}) {
  return { path, mimeType, body: { tag: 'blob', val: bytes }, meta };
}

export function readResult(content, { cache } = {}) {
  return { contents: [content], cache };
}

export function resourcePage(resources, { nextCursor, cache } = {}) {
  return { resources, nextCursor, cache };
}

export function templatePage(templates, { nextCursor, cache } = {}) {
  return { templates, nextCursor, cache };
}

// Fresh for `ttlMs` milliseconds, for every client ('public') or only the one that asked ('private').
export function cacheHint(ttlMs, scope = 'public') {
  return { ttlMs, scope };
}

export function completion(values, { total, hasMore = false } = {}) {
  return { values, total, hasMore };
}

export function changeReport(token, { listingChanged = false, changedPaths = [] } = {}) {
  return { token, listingChanged, changedPaths };
}

// An error a plugin throws on purpose; each subclass is one case of the
// contract's `error` variant, carrying the message.
export class PluginError extends Error {
  get name() {
    return this.constructor.name;
  }
}
export class NotFound extends PluginError { static tag = 'not-found'; }
export class InvalidInput extends PluginError { static tag = 'invalid-input'; }
export class Denied extends PluginError { static tag = 'denied'; }
export class Unavailable extends PluginError { static tag = 'unavailable'; }
export class Internal extends PluginError { static tag = 'internal'; }

// The operator's `[config]`: take each key once, then `finish()` refuses any
// key left over, so a typo in a manifest never goes unnoticed.
export class Config {
  #values;

  constructor(pairs) {
    this.#values = new Map(pairs);
  }

  // Takes `key` as text, or `fallback` when it is not given.
  text(key, fallback) {
    return this.#take(key) ?? fallback;
  }

  // Takes `key` as a finite number, or `fallback` when it is not given.
  number(key, fallback) {
    const text = this.#take(key);
    if (text === undefined) return fallback;
    const value = Number(text);
    if (text.trim() === '' || !Number.isFinite(value)) throw invalidValue(key, text, 'number');
    return value;
  }

  // Takes `key` as `true` or `false`, or `fallback` when it is not given.
  bool(key, fallback) {
    const text = this.#take(key);
    if (text === undefined) return fallback;
    if (text !== 'true' && text !== 'false') throw invalidValue(key, text, 'bool (true or false)');
    return text === 'true';
  }

  // Refuses any key not taken yet.
  finish() {
    const [unknown] = [...this.#values.keys()].sort();
    if (unknown !== undefined) throw new InvalidInput(`unknown config key ${JSON.stringify(unknown)}`);
  }

  #take(key) {
    const value = this.#values.get(key);
    this.#values.delete(key);
    return value;
  }
}

function invalidValue(key, text, type) {
  return new InvalidInput(`config key ${JSON.stringify(key)} has the value ${JSON.stringify(text)}, which is not a valid ${type}`);
}

// Refuses a cursor where a listing has only one page.
export function noCursor(cursor) {
  if (cursor !== undefined) throw new InvalidInput(`unknown cursor ${JSON.stringify(cursor)}`);
}

// The page of `items` that `cursor` (an offset this function handed out)
// points at, `pageSize` long: `{ items, nextCursor }`.
export function paginate(items, cursor, pageSize) {
  const start = cursor === undefined ? 0 : Number(cursor);
  if (cursor !== undefined && (!/^\d+$/.test(cursor) || start > items.length)) {
    throw new InvalidInput(`unknown cursor ${JSON.stringify(cursor)}`);
  }
  const end = Math.min(start + Math.max(pageSize, 1), items.length);
  return { items: items.slice(start, end), nextCursor: end < items.length ? String(end) : undefined };
}

// The page of `entries` (any iterable, in ascending order of `key(entry)`)
// that comes after `cursor` (a key this function handed out), `pageSize`
// long: `{ items, nextCursor }`. It takes only one entry past the page, so a
// plugin that produces entries in order does a page's worth of work per
// page; the cursor is the last key sent, so pages stay right when entries
// come and go.
export function pageAfter(entries, key, cursor, pageSize) {
  const items = [];
  for (const entry of entries) {
    if (cursor !== undefined && !(key(entry) > cursor)) continue;
    if (items.length === Math.max(pageSize, 1)) return { items, nextCursor: key(items[items.length - 1]) };
    items.push(entry);
  }
  return { items, nextCursor: undefined };
}

// The `provider` export of a plugin: `export const provider = exportPlugin({...})`.
// `about()` and `init(config)` take no state; `init` gets a `Config` and
// returns the plugin's state (anything), which the instance keeps for the
// calls it serves after `init`; `list`, `templates`, `read`,
// `complete` and `changes` get that state first, then their argument.
// Any function may be async. `templates`, `complete` and `changes` are
// optional. A `PluginError` thrown becomes its case of the contract's
// `error`; any other exception becomes `internal("Type: message")`, with its
// stack on stderr (resmux's log), rather than a trap.
export function exportPlugin({ about, init, list, templates = noTemplates, read, complete = noCompletion, changes = noChanges }) {
  for (const [name, fn] of Object.entries({ about, init, list, read })) {
    if (typeof fn !== 'function') throw new TypeError(`exportPlugin needs a function ${name}`);
  }
  let state;
  // componentize-js takes a returned `{tag: 'ok' | 'err', val}` as the WIT
  // result itself, whereas a thrown Error instance would trap the instance.
  const answer = fn => async (...args) => {
    try {
      return { tag: 'ok', val: await fn(...args) };
    } catch (error) {
      return { tag: 'err', val: toVariant(error) };
    }
  };
  return {
    async about() {
      try {
        return await about();
      } catch (error) {
        logUncaught(error);
        return pluginInfo('unknown', '0.0.0', `about() failed: ${describe(error)}`);
      }
    },
    init: answer(async config => {
      state = await init(new Config(config));
    }),
    list: answer(cursor => list(state, cursor)),
    templates: answer(cursor => templates(state, cursor)),
    read: answer(path => read(state, path)),
    complete: answer(request => complete(state, request)),
    changes: answer(since => changes(state, since)),
  };
}

function noTemplates(state, cursor) {
  noCursor(cursor);
  return templatePage([]);
}

function noCompletion(state, request) {
  throw new InvalidInput(`${JSON.stringify(request.pathTemplate)} has no completion for ${JSON.stringify(request.argument)}`);
}

function noChanges() {
  throw new Unavailable('this plugin reports no changes');
}

function toVariant(error) {
  if (error instanceof PluginError && error.constructor.tag) return { tag: error.constructor.tag, val: error.message };
  logUncaught(error);
  return { tag: 'internal', val: describe(error) };
}

function describe(error) {
  if (error instanceof Error) return `${error.constructor.name}: ${error.message}`;
  return `${typeof error}: ${String(error)}`;
}

function logUncaught(error) {
  console.error(`uncaught ${describe(error)}\n${error?.stack ?? ''}`.trimEnd());
}
