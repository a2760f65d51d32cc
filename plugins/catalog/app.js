// `catalog`: a read-only view of a JSON HTTP API on a host the operator
// grants. The JavaScript example, built with componentize-js.
//
// The API (config key `api`, e.g. "http://127.0.0.1:8081") serves
// GET /items, a JSON array of {id, title, description?, updated?}, and
// GET /items/ID, one item. Each item is a resource `items/ID` (its JSON);
// the template `items/{id}` completes ids from the list. Without `api` (as
// shipped), the catalog serves a few sample items of its own, so that it
// answers at once; an API that cannot be reached is `unavailable`.
//
// Conventions of componentize-js: records use camelCase fields, an absent
// option is `undefined`, a variant is `{tag, val}`, and a `result` error is
// thrown as `{tag: 'not-found', val: 'why'}`. Exports may be async: their
// promises are run to completion before the call returns.

const state = { api: undefined };

// What the catalog serves while no `api` is configured.
const SAMPLE_ITEMS = [
  { id: 'apples', title: 'Apples', description: 'Crisp, from the orchard', updated: '2026-09-01T08:00:00Z' },
  { id: 'bread', title: 'Bread', description: 'Sourdough, baked daily' },
  { id: 'tea', title: 'Tea', description: 'Green, loose leaf' },
];

function fail(tag, message) {
  throw { tag, val: message };
}

async function getJson(path) {
  const url = `${state.api}${path}`;
  let response;
  try {
    response = await fetch(url);
  } catch (error) {
    fail('unavailable', `cannot reach ${url}: ${error}`);
  }
  if (response.status === 404) fail('not-found', `${url} answered 404`);
  if (!response.ok) fail('unavailable', `${url} answered ${response.status}`);
  const text = await response.text();
  try {
    return { text, value: JSON.parse(text) };
  } catch {
    fail('unavailable', `${url} did not answer JSON`);
  }
}

async function items() {
  if (!state.api) return SAMPLE_ITEMS;
  const { value } = await getJson('/items');
  if (!Array.isArray(value)) fail('unavailable', '/items is not a JSON array');
  return value.filter(item => item && /^[A-Za-z0-9._~-]+$/.test(String(item.id)));
}

function noCursor(cursor) {
  if (cursor !== undefined) fail('invalid-input', `unknown cursor ${JSON.stringify(cursor)}`);
}

export const provider = {
  about() {
    return { name: 'catalog', version: '0.1.0', description: 'A read-only view of a JSON HTTP API (JavaScript)' };
  },

  init(config) {
    for (const [key, value] of config) {
      if (key !== 'api') fail('invalid-input', `unknown config key ${JSON.stringify(key)}`);
      state.api = value.replace(/\/+$/, '');
    }
  },

  async list(cursor) {
    noCursor(cursor);
    const resources = (await items()).map(item => ({
      path: `items/${item.id}`,
      name: String(item.id),
      title: item.title === undefined ? undefined : String(item.title),
      description: item.description === undefined ? undefined : String(item.description),
      mimeType: 'application/json',
      annotations: item.updated === undefined ? undefined : { audience: [], lastModified: String(item.updated) },
      icons: [],
    }));
    return { resources };
  },

  templates(cursor) {
    noCursor(cursor);
    return {
      templates: [
        { pathTemplate: 'items/{id}', name: 'item', description: 'One item of the API, as JSON', mimeType: 'application/json', icons: [] },
      ],
      cache: { ttlMs: 60000n, scope: 'public' },
    };
  },

  async read(path) {
    const id = path.startsWith('items/') ? path.slice('items/'.length) : undefined;
    if (!id || id.includes('/')) fail('not-found', `${JSON.stringify(path)} is not items/ID`);
    let text;
    if (state.api) {
      text = (await getJson(`/items/${id}`)).text;
    } else {
      const item = SAMPLE_ITEMS.find(sample => sample.id === id);
      if (!item) fail('not-found', `no sample item ${JSON.stringify(id)}`);
      text = JSON.stringify(item);
    }
    return { contents: [{ path, mimeType: 'application/json', body: { tag: 'text', val: text } }] };
  },

  async complete(request) {
    if (request.pathTemplate !== 'items/{id}' || request.argument !== 'id') {
      fail('invalid-input', `cannot complete ${JSON.stringify(request.argument)} of ${JSON.stringify(request.pathTemplate)}`);
    }
    const values = (await items()).map(item => String(item.id)).filter(id => id.startsWith(request.value));
    return { values: values.slice(0, 100), total: values.length, hasMore: values.length > 100 };
  },

  changes() {
    fail('unavailable', 'the API offers no change feed');
  },
};
