// The TypeScript client (@modelcontextprotocol/client 2.x) against
// `resmux serve --http --auth`, with a real OpenID provider (oidc-provider,
// idp.mjs): from the 401 alone it finds the Protected Resource Metadata, the
// issuer and its token endpoint, gets a client-credentials token for
// resmux's resource, and reads, in both eras. Without the provider it gets in
// nowhere.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';

import { Client, ClientCredentialsProvider, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const root = resolve(import.meta.dirname, '../..');

let provider;
let server;
let issuer;
let url;
let work;

async function freePort() {
    const probe = createServer().listen(0, '127.0.0.1');
    await once(probe, 'listening');
    const { port } = probe.address();
    probe.close();
    await once(probe, 'close');
    return port;
}

before(async () => {
    work = mkdtempSync(join(tmpdir(), 'resmux-ts-oauth-'));
    url = `http://127.0.0.1:${await freePort()}/mcp`;
    const config = join(work, 'idp.json');
    writeFileSync(config, JSON.stringify({
        resource: url,
        scopes: ['mcp:read'],
        clients: [{ client_id: 'reader', client_secret: 'readersecret0123', scope: 'mcp:read', groups: [] }]
    }));
    provider = spawn(process.execPath, [join(import.meta.dirname, 'idp.mjs'), config], {
        stdio: ['ignore', 'pipe', 'ignore']
    });
    const [ready] = await once(createInterface({ input: provider.stdout }), 'line');
    issuer = JSON.parse(ready).issuer;
    writeFileSync(
        join(work, 'auth.toml'),
        `[oauth]\nissuer = "${issuer}"\nresource = "${url}"\nscopes = ["mcp:read"]\n`
    );
    server = spawn(join(root, 'target/release/resmux'), [
        'serve', '--plugins', join(root, 'target/plugins'), '--http', new URL(url).host,
        '--auth', join(work, 'auth.toml'), '--cache-dir', join(root, 'target/test-cache')
    ], { stdio: ['ignore', 'ignore', 'pipe'] });
    await new Promise((found, failed) => {
        let log = '';
        server.stderr.on('data', chunk => {
            log += chunk;
            if (log.includes(`at ${url}`)) found();
        });
        server.on('exit', code => failed(new Error(`resmux exited with ${code}: ${log}`)));
    });
});

after(() => {
    server?.kill('SIGTERM');
    provider?.kill('SIGTERM');
    rmSync(work, { recursive: true, force: true });
});

for (const mode of ['legacy', 'auto']) {
    describe(`the TypeScript client with client credentials in ${mode} mode`, () => {
        test('finds the issuer from the 401, gets a token for resmux and reads', async () => {
            const authProvider = new ClientCredentialsProvider({
                clientId: 'reader',
                clientSecret: 'readersecret0123',
                expectedIssuer: issuer
            });
            const client = new Client({ name: 'resmux-ts-oauth', version: '1.0.0' }, { versionNegotiation: { mode } });
            await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider }));
            try {
                const { resources } = await client.listResources();
                assert.ok(resources.some(resource => resource.uri === 'notes://notes/welcome'));
                const note = await client.readResource({ uri: 'notes://notes/welcome' });
                assert.match(note.contents[0].text, /^# Welcome/);
                const token = authProvider.tokens().access_token;
                const claims = JSON.parse(Buffer.from(token.split('.')[1], 'base64url'));
                assert.equal(claims.aud, url);
                assert.equal(claims.scope, 'mcp:read');
            } finally {
                await client.close();
            }
        });
    });
}

test('without a provider the client gets no further than the 401', async () => {
    const client = new Client({ name: 'resmux-ts-oauth', version: '1.0.0' });
    await assert.rejects(
        client.connect(new StreamableHTTPClientTransport(new URL(url))),
        error => error.data?.status === 401 && error.message.endsWith('a bearer token is required')
    );
});
