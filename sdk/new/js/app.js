// `{{name}}`: a resmux plugin in JavaScript. It greets: `hello` reads
// "<greeting>, world!" and `hello/{who}` reads "<greeting>, <who>!", with the
// greeting taken from the manifest's [config]. Replace it with your own.

import {
  InvalidInput, NotFound, changeReport, completion, exportPlugin, paginate, pluginInfo,
  readResult, resource, resourcePage, template, templatePage, textContent, noCursor,
} from './resmux.js';

const NAMES = ['ada', 'alan', 'grace', 'linus'];

export const provider = exportPlugin({
  about() {
    return pluginInfo('{{name}}', '0.1.0', 'Says hello to the world, or to anyone');
  },

  init(config) {
    const greeting = config.text('greeting', 'Hello');
    config.finish();
    return { greeting };
  },

  list(state, cursor) {
    const { items, nextCursor } = paginate([resource('hello', 'hello', { mimeType: 'text/plain' })], cursor, 100);
    return resourcePage(items, { nextCursor });
  },

  templates(state, cursor) {
    noCursor(cursor);
    return templatePage([template('hello/{who}', 'greeting', { mimeType: 'text/plain' })]);
  },

  read({ greeting }, path) {
    if (path === 'hello') return readResult(textContent(path, 'text/plain', `${greeting}, world!`));
    const who = path.startsWith('hello/') ? path.slice('hello/'.length) : '';
    if (!who || who.includes('/')) throw new NotFound(`no resource at ${JSON.stringify(path)}`);
    return readResult(textContent(path, 'text/plain', `${greeting}, ${who}!`));
  },

  complete(state, { pathTemplate, argument, value }) {
    if (pathTemplate !== 'hello/{who}' || argument !== 'who') {
      throw new InvalidInput(`${JSON.stringify(pathTemplate)} has no completion for ${JSON.stringify(argument)}`);
    }
    return completion(NAMES.filter(name => name.startsWith(value)));
  },

  changes(state, since) {
    return changeReport('0');
  },
});
