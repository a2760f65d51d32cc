// `catalog`: a read-only view of a JSON HTTP API on a host the operator
// grants. The JavaScript example, built with componentize-js and the SDK
// (sdk/js/resmux.js, which the build puts beside this file, as `resmux new`
// does).
//
// The API (config key `api`, e.g. "http://127.0.0.1:8081") serves
// GET /items, a JSON array of {id, title, description?, updated?}, and
// GET /items/ID, one item. Each item is a resource `items/ID` (its JSON);
// the template `items/{id}` completes ids from the list. Without `api` (as
// shipped), the catalog serves a few sample items of its own, so that it
// answers at once; an API that cannot be reached is `unavailable`.

import {
  InvalidInput, NotFound, Unavailable, annotations, cacheHint, completion, exportPlugin, noCursor,
  pluginInfo, readResult, resource, resourcePage, template, templatePage, textContent,
} from './resmux.js';

// What the catalog serves while no `api` is configured.
const SAMPLE_ITEMS = [
  { id: 'apples', title: 'Apples', description: 'Crisp, from the orchard', updated: '2026-09-01T08:00:00Z' },
  { id: 'bread', title: 'Bread', description: 'Sourdough, baked daily' },
  { id: 'tea', title: 'Tea', description: 'Green, loose leaf' },
];

async function getJson(api, path) {
  const url = `${api}${path}`;
  let response;
  try {
    response = await fetch(url);
  } catch (error) {
    throw new Unavailable(`cannot reach ${url}: ${error}`);
  }
  if (response.status === 404) throw new NotFound(`${url} answered 404`);
  if (!response.ok) throw new Unavailable(`${url} answered ${response.status}`);
  const text = await response.text();
  try {
    return { text, value: JSON.parse(text) };
  } catch {
    throw new Unavailable(`${url} did not answer JSON`);
  }
}

async function items(api) {
  if (!api) return SAMPLE_ITEMS;
  const { value } = await getJson(api, '/items');
  if (!Array.isArray(value)) throw new Unavailable('/items is not a JSON array');
  return value.filter(item => item && /^[A-Za-z0-9._~-]+$/.test(String(item.id)));
}

function optionalText(value) {
  return value === undefined ? undefined : String(value);
}

export const provider = exportPlugin({
  about() {
    return pluginInfo('catalog', '0.1.0', 'A read-only view of a JSON HTTP API (JavaScript)');
  },

  init(config) {
    const api = config.text('api')?.replace(/\/+$/, '');
    config.finish();
    return { api };
  },

  async list({ api }, cursor) {
    noCursor(cursor);
    const resources = (await items(api)).map(item => resource(`items/${item.id}`, String(item.id), {
      title: optionalText(item.title),
      description: optionalText(item.description),
      mimeType: 'application/json',
      annotations: item.updated === undefined ? undefined : annotations({ lastModified: String(item.updated) }),
    }));
    return resourcePage(resources);
  },

  templates(state, cursor) {
    noCursor(cursor);
    const item = template('items/{id}', 'item', { description: 'One item of the API, as JSON', mimeType: 'application/json' });
    return templatePage([item], { cache: cacheHint(60000) });
  },

  async read({ api }, path) {
    const id = path.startsWith('items/') ? path.slice('items/'.length) : undefined;
    if (!id || id.includes('/')) throw new NotFound(`${JSON.stringify(path)} is not items/ID`);
    let text;
    if (api) {
      text = (await getJson(api, `/items/${id}`)).text;
    } else {
      const item = SAMPLE_ITEMS.find(sample => sample.id === id);
      if (!item) throw new NotFound(`no sample item ${JSON.stringify(id)}`);
      text = JSON.stringify(item);
    }
    return readResult(textContent(path, 'application/json', text));
  },

  async complete({ api }, request) {
    if (request.pathTemplate !== 'items/{id}' || request.argument !== 'id') {
      throw new InvalidInput(`cannot complete ${JSON.stringify(request.argument)} of ${JSON.stringify(request.pathTemplate)}`);
    }
    const values = (await items(api)).map(item => String(item.id)).filter(id => id.startsWith(request.value));
    return completion(values.slice(0, 100), { total: values.length, hasMore: values.length > 100 });
  },

  changes() {
    throw new Unavailable('the API offers no change feed');
  },
});
