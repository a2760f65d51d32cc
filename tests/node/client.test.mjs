// The TypeScript client (@modelcontextprotocol/client 2.x) against
// `resmux serve --http`, in both eras: listing, templates, text and binary
// reads, not-found codes, completion, the tool bridge, and a change
// notification for a subscribed file (resources/subscribe in the legacy era,
// subscriptions/listen in 2026-07-28).

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { Client, ResourceNotFoundError, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const root = resolve(import.meta.dirname, '../..');
const built = join(root, 'target/plugins');

let server;
let url;
let work;

before(async () => {
    work = mkdtempSync(join(tmpdir(), 'resmux-ts-'));
    const plugins = join(work, 'plugins');
    mkdirSync(plugins);
    mkdirSync(join(work, 'data'));
    writeFileSync(join(work, 'data/a.txt'), 'first');
    for (const file of ['notes.wasm', 'conformance.wasm', 'conformance.toml', 'files.wasm']) {
        copyFileSync(join(built, file), join(plugins, file));
    }
    writeFileSync(
        join(plugins, 'files.toml'),
        `[config]\nroot = "/data"\n[[files]]\nhost = "${join(work, 'data')}"\nguest = "/data"\n[changes]\ninterval_ms = 200\n`
    );
    server = spawn(join(root, 'target/release/resmux'), [
        'serve', '--plugins', plugins, '--http', '127.0.0.1:0', '--cache-dir', join(root, 'target/test-cache')
    ], { stdio: ['ignore', 'ignore', 'pipe'] });
    url = await new Promise((found, failed) => {
        let log = '';
        server.stderr.on('data', chunk => {
            log += chunk;
            const match = log.match(/http:\/\/127\.0\.0\.1:\d+\/mcp/);
            if (match) found(match[0]);
        });
        server.on('exit', code => failed(new Error(`resmux exited with ${code}: ${log}`)));
    });
});

after(() => {
    server?.kill('SIGTERM');
    rmSync(work, { recursive: true, force: true });
});

async function connect(mode) {
    const client = new Client({ name: 'resmux-ts-test', version: '1.0.0' }, { versionNegotiation: { mode } });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    return client;
}

for (const [mode, version] of [
    ['legacy', '2025-11-25'],
    ['auto', '2026-07-28']
]) {
    describe(`the TypeScript client in ${mode} mode`, () => {
        test('lists, reads, completes and finds nothing where nothing is', async () => {
            const client = await connect(mode);
            try {
                assert.equal(client.getNegotiatedProtocolVersion(), version);
                const { resources } = await client.listResources();
                const uris = resources.map(resource => resource.uri);
                for (const uri of ['notes://notes/welcome', 'test://static-text', 'files://a.txt']) {
                    assert.ok(uris.includes(uri), `${uri} in ${uris}`);
                }
                const { resourceTemplates } = await client.listResourceTemplates();
                assert.ok(resourceTemplates.some(t => t.uriTemplate === 'test://template/{id}/data'));

                const text = await client.readResource({ uri: 'test://static-text' });
                assert.equal(text.contents[0].text, 'This is the content of the static text resource.');
                const binary = await client.readResource({ uri: 'test://static-binary' });
                assert.equal(binary.contents[0].mimeType, 'image/png');
                assert.ok(Buffer.from(binary.contents[0].blob, 'base64').length > 0);
                // The client folds -32002 (legacy) and -32602 (2026-07-28) with
                // data.uri into one error class; the Python tests check the codes.
                await assert.rejects(client.readResource({ uri: 'notes://notes/missing' }), error => {
                    assert.ok(error instanceof ResourceNotFoundError, String(error));
                    assert.equal(error.uri, 'notes://notes/missing');
                    return true;
                });

                const completion = await client.complete({
                    ref: { type: 'ref/resource', uri: 'notes://notes/{id}' },
                    argument: { name: 'id', value: 'we' }
                });
                assert.deepEqual(completion.completion.values, ['welcome']);

                const found = await client.callTool({ name: 'search_resources', arguments: { query: 'welcome' } });
                assert.match(found.content[0].text, /^notes:\/\/notes\/welcome \|/);
            } finally {
                await client.close();
            }
        });

        test('hears that a subscribed file changed', async () => {
            const client = await connect(mode);
            try {
                const heard = new Promise(done =>
                    client.setNotificationHandler('notifications/resources/updated', notification =>
                        done(notification.params.uri)
                    )
                );
                let subscription;
                if (mode === 'legacy') {
                    await client.subscribeResource({ uri: 'files://a.txt' });
                } else {
                    subscription = await client.listen({ resourceSubscriptions: ['files://a.txt'] });
                    assert.deepEqual(subscription.honoredFilter.resourceSubscriptions, ['files://a.txt']);
                }
                // The first change report after a subscription only records
                // where the file stands, and a change made before it is part
                // of that: the file changes, anew each second, until one is told.
                let told = false;
                heard.then(() => (told = true));
                for (let attempt = 0; !told; attempt++) {
                    assert.ok(attempt < 60, 'no update told within a minute of changes');
                    writeFileSync(join(work, 'data/a.txt'), `changed in ${mode} mode, ${attempt}`);
                    await Promise.race([heard, new Promise(wait => setTimeout(wait, 1000))]);
                }
                assert.equal(await heard, 'files://a.txt');
                await subscription?.close();
            } finally {
                await client.close();
            }
        });
    });
}
