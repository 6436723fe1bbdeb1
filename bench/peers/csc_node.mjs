// SPDX-License-Identifier: MIT
// One node of the Cache Referee's real-client contestant (cli/src/referee/real_clients.cc starts
// one per node): node-redis's client-side cache, used as its README draws it (a RESP3 client with
// `clientSideCache`, default tracking mode), on the referee's server. Nothing here is part of the
// library.
//
//   node csc_node.mjs --host 127.0.0.1 --port N --socket PATH
//
// The referee's reader threads each connect to the Unix socket PATH and send one request a line:
//   g KEY   the cache's GET of KEY (a hit, or a miss the client fills): the value, or "!error"
//   p KEY   what the cache holds for KEY without filling: the value, or "-"
// stdout, one line each: "ready" once the client is connected and the socket listens; then for
// every invalidation the cache applied, "i KEY 1" (it held KEY) or "i KEY 0", and "i *" for a
// flush, written after node-redis's own handler ran (so a read the referee begins after it reads
// the line is a read after the invalidation was applied). The process ends when stdin closes.
import { createServer } from 'node:net';
import { createInterface } from 'node:readline';

import { createClient } from 'redis';

function option(name, fallback) {
  const at = process.argv.indexOf(`--${name}`);
  return at > 0 && at + 1 < process.argv.length ? process.argv[at + 1] : fallback;
}

const client = createClient({
  socket: { host: option('host', '127.0.0.1'), port: Number(option('port', '0')) },
  RESP: 3,
  clientSideCache: { ttl: 0, maxEntries: 0 },
});
client.on('error', (err) => process.stderr.write(`csc_node: ${err.message}\n`));
await client.connect();
const cache = client.clientSideCache;

// node-redis's cache key of `GET key` (cache.js, generateCacheKey): the argument lengths, then
// the arguments, joined by '_'.
const cacheKey = (key) => `3_${key.length}_GET_${key}`;

// Wraps the cache's invalidate: note whether it held the key, run node-redis's handler, then
// tell the referee.
const invalidate = cache.invalidate.bind(cache);
cache.invalidate = (key, clientId) => {
  if (key === null) {
    invalidate(key, clientId);
    process.stdout.write('i *\n');
    return;
  }
  const name = Buffer.isBuffer(key) ? key.toString('latin1') : String(key);
  const held = cache.has(cacheKey(name));
  invalidate(key, clientId);
  process.stdout.write(`i ${name} ${held ? 1 : 0}\n`);
};

async function answer(line) {
  const key = line.slice(2);
  if (line.startsWith('g ')) {
    const v = await client.get(key);
    return v === null ? '!nil' : v;
  }
  if (line.startsWith('p ')) {
    const entry = cache.get(cacheKey(key));
    return entry !== undefined && 'value' in entry && entry.value !== undefined
      ? String(entry.value)
      : '-';
  }
  return `!unknown request '${line}'`;
}

const server = createServer((socket) => {
  const lines = createInterface({ input: socket });
  (async () => {
    for await (const line of lines) {
      let reply;
      try {
        reply = await answer(line);
      } catch (err) {
        reply = `!${err && err.message ? err.message : err}`;
      }
      socket.write(`${reply}\n`);
    }
  })().catch(() => socket.destroy());
  socket.on('error', () => {});
});
server.listen(option('socket', ''), () => process.stdout.write('ready\n'));

process.stdin.on('data', () => {});
process.stdin.on('end', async () => {
  server.close();
  await client.close().catch(() => {});
  process.exit(0);
});
