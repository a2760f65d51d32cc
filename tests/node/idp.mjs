// A real OpenID provider for resmux's OAuth tests: the certified
// `oidc-provider` (pinned in package.json), issuing RS256-signed JWT access
// tokens to confidential clients through the client_credentials grant, with
// RFC 8707 resource indicators.
//
//     node idp.mjs CONFIG.json
//
// The config:
//
//     {
//       "resource": "http://127.0.0.1:5555/mcp",   // or a list; the first is the default
//       "scopes": ["mcp:read", "mcp:admin"],        // what the resource server accepts
//       "access_token_format": "jwt",               // or "opaque" (checked by introspection), optional
//       "clients": [{
//         "client_id": "reader", "client_secret": "s3cret",
//         "scope": "mcp:read",                      // space-separated, what it may ask for
//         "groups": ["readers"]                     // copied into its tokens' `groups` claim
//       }]                                          // (client_secret_basic or _post)
//     }
//
// It listens on 127.0.0.1 on an ephemeral port and, once ready, prints one
// line on stdout, {"issuer": "http://127.0.0.1:PORT", "admin": "http://127.0.0.1:PORT/admin"},
// then runs until killed (SIGTERM and SIGINT exit 0). Everything else goes to
// stderr. The provider's own endpoints are at the issuer (discovery at
// /.well-known/openid-configuration and /.well-known/oauth-authorization-server,
// /jwks, /token, and /token/introspection for any confidential client); the
// admin ones:
//
//     POST /admin/rotate   a new RSA key signs from now on; the JWKS lists it
//                          first, every older key after it. Answers {"kid": NEWKID}.
//     POST /admin/sign     body {"claims": {...}, "header": {...}}: signs the
//                          claims exactly as given (no defaults) with the
//                          current private key; the header defaults to
//                          {"alg": "RS256", "typ": "at+jwt", "kid": CURRENT} and
//                          `header` overrides it ({"alg": "none"} for an
//                          unsigned token). Answers {"token": "..."}.
//
// Tokens (POST /token, form-encoded: grant_type=client_credentials, optional
// scope and resource, the client's secret by HTTP Basic or in the body) are
// JWTs with header {alg: RS256, typ: at+jwt, kid} and claims iss, aud (the
// resource, the default one when none is asked for), sub and client_id (both
// the client id), scope (the asked scopes that the resource accepts; absent
// when none were asked), groups, jti, iat, exp (300 s on). A client asking for a scope
// outside its own `scope` gets invalid_scope; an unknown resource, invalid_target.

import { generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';

// oidc-provider prints its notices with console.info, which is stdout: the
// only stdout line must be the ready line, so route the console to stderr
// before loading it.
const toStderr = (...args) => console.error(...args);
console.log = toStderr;
console.info = toStderr;
console.debug = toStderr;

const { default: Provider, errors } = await import('oidc-provider');
const { CompactSign } = await import('jose');

function loadConfig(arg) {
    if (!arg) {
        throw new Error('usage: node idp.mjs CONFIG.json');
    }
    const config = JSON.parse(readFileSync(arg, 'utf8'));
    const resources = [config.resource].flat().filter(Boolean);
    if (resources.length === 0) {
        throw new Error('config: `resource` is required');
    }
    if (!Array.isArray(config.scopes)) {
        throw new Error('config: `scopes` must be a list of strings');
    }
    if (!Array.isArray(config.clients)) {
        throw new Error('config: `clients` must be a list');
    }
    return { ...config, resources };
}

const config = loadConfig(process.argv[2]);
// Seconds an access token lives.
const TOKEN_TTL = 300;
const groupsByClient = new Map(config.clients.map((c) => [c.client_id, c.groups]));

// Every scope that appears anywhere is made a provider ("static") scope: only
// those are checked against a client's allowed `scope`, so a client asking
// for a resource server scope it was not granted gets invalid_scope instead
// of having it silently issued.
const allScopes = new Set(['openid', 'offline_access', ...config.scopes]);
for (const client of config.clients) {
    for (const scope of (client.scope ?? '').split(' ').filter(Boolean)) {
        allScopes.add(scope);
    }
}

const canonical = (uri) => URL.parse(uri)?.href ?? uri;

function newKey() {
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const kid = randomUUID();
    return { kid, privateKey, jwk: { ...privateKey.export({ format: 'jwk' }), kid, alg: 'RS256', use: 'sig' } };
}

function buildProvider(issuer, keys) {
    const provider = new Provider(issuer, {
        clients: config.clients.map((c) => ({
            client_id: c.client_id,
            client_secret: c.client_secret,
            scope: c.scope || undefined,
            grant_types: ['client_credentials'],
            response_types: [],
            redirect_uris: [],
            token_endpoint_auth_method: 'client_secret_basic',
        })),
        jwks: { keys: keys.map((k) => k.jwk) },
        scopes: [...allScopes],
        cookies: { keys: [randomBytes(32).toString('base64url')] },
        features: {
            devInteractions: { enabled: false },
            clientCredentials: { enabled: true },
            introspection: {
                enabled: true,
                allowedPolicy: (ctx, client) => client.clientAuthMethod !== 'none',
            },
            resourceIndicators: {
                enabled: true,
                defaultResource: () => config.resources[0],
                useGrantedResource: () => true,
                getResourceServerInfo(ctx, resourceIndicator) {
                    const resource = config.resources.find((r) => canonical(r) === canonical(resourceIndicator));
                    if (resource === undefined) {
                        throw new errors.InvalidTarget();
                    }
                    return {
                        scope: config.scopes.join(' '),
                        audience: resource,
                        accessTokenFormat: config.access_token_format ?? 'jwt',
                        accessTokenTTL: TOKEN_TTL,
                        jwt: { sign: { alg: 'RS256' } },
                    };
                },
            },
        },
        extraTokenClaims(ctx, token) {
            const groups = groupsByClient.get(token.clientId);
            return groups === undefined ? undefined : { groups };
        },
    });
    provider.on('server_error', (ctx, error) => console.error('idp: server_error', error));
    provider.on('grant.error', (ctx, error) => console.error('idp: token error:', error.message, error.error_description ?? ''));
    return provider;
}

let keys = [newKey()];
let issuer;
let dispatch;

function readBody(req) {
    return new Promise((done, failed) => {
        const chunks = [];
        req.on('data', (chunk) => chunks.push(chunk));
        req.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            if (!text.trim()) {
                done({});
                return;
            }
            try {
                done(JSON.parse(text));
            } catch (error) {
                failed(new Error(`body is not JSON: ${error.message}`));
            }
        });
        req.on('error', failed);
    });
}

function reply(res, status, body) {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
}

const b64url = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');

async function admin(req, res, path) {
    if (req.method === 'POST' && path === '/admin/rotate') {
        const key = newKey();
        keys = [key, ...keys];
        dispatch = buildProvider(issuer, keys).callback();
        console.error(`idp: rotated to kid ${key.kid}; published kids ${keys.map((k) => k.kid).join(', ')}`);
        reply(res, 200, { kid: key.kid });
    } else if (req.method === 'POST' && path === '/admin/sign') {
        const body = await readBody(req);
        const claims = body.claims ?? {};
        const header = { alg: 'RS256', typ: 'at+jwt', kid: keys[0].kid, ...body.header };
        let token;
        if (header.alg === 'none') {
            token = `${b64url(header)}.${b64url(claims)}.`;
        } else {
            token = await new CompactSign(Buffer.from(JSON.stringify(claims)))
                .setProtectedHeader(header)
                .sign(keys[0].privateKey);
        }
        reply(res, 200, { token });
    } else {
        reply(res, 404, { error: 'not_found', error_description: `no admin endpoint ${req.method} ${path}` });
    }
}

const server = http.createServer((req, res) => {
    const path = new URL(req.url, 'http://idp').pathname;
    if (path === '/admin' || path.startsWith('/admin/')) {
        admin(req, res, path).catch((error) => reply(res, 400, { error: 'bad_request', error_description: error.message }));
    } else {
        dispatch(req, res);
    }
});

server.listen(0, '127.0.0.1', () => {
    const { port } = server.address();
    issuer = `http://127.0.0.1:${port}`;
    dispatch = buildProvider(issuer, keys).callback();
    console.error(`idp: issuer ${issuer}, kid ${keys[0].kid}, resources ${config.resources.join(' ')}, clients ${config.clients.map((c) => c.client_id).join(' ')}`);
    process.stdout.write(`${JSON.stringify({ issuer, admin: `${issuer}/admin` })}\n`);
});

function stop() {
    server.close();
    server.closeAllConnections();
    process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
