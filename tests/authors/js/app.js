// The error-path test plugin: the JavaScript scaffold's app.js with a
// resource `boom` whose read throws an uncaught TypeError. The SDK must
// answer it as `internal("TypeError: the boom resource exploded")`, never a
// trap, however often it is read.

import { NotFound, exportPlugin, paginate, pluginInfo, readResult, resource, resourcePage, textContent } from './resmux.js';

export const provider = exportPlugin({
  about() {
    return pluginInfo('hello', '0.1.0', 'Says hello, and explodes on boom');
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

  read({ greeting }, path) {
    if (path === 'hello') return readResult(textContent(path, 'text/plain', `${greeting}, world!`));
    if (path === 'boom') throw new TypeError('the boom resource exploded');
    throw new NotFound(`no resource at ${JSON.stringify(path)}`);
  },
});
