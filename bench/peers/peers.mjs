// SPDX-License-Identifier: MIT
// The peers' side of `echostore bench --peers` (cli/src/bench/peers.cc starts it): BullMQ used as
// its documentation draws it, on the redis-server the bench started, in the same run as the
// EchoStore rows it sits beside. The bench writes one request a line on stdin and reads one JSON
// line per request on stdout; stderr is the bench's. Nothing here is part of the library.
//
//   node peers.mjs --host 127.0.0.1 --port N --prefix P
//
// Requests:
//   versions                 {"node":..,"bullmq":..,"ioredis":..,"redis":..}
//   throughput <conc> <n>    n jobs added (addBulk) before any worker runs, then one Worker with
//                            concurrency <conc> processes the backlog: {"seconds":..,"jobs":n}
//                            from the worker's run() to the n-th "completed" event
//   latency <n>              n jobs one at a time, each queue.add -> its processor's start, the
//                            next sent once the previous one completed: {"us":[..]}
//   hit <n>                  node-redis's client-side cache: one key read once (the fill), then
//                            n reads of it timed together, each a hit: {"ns":..} per read
//   quit                     closes every connection and exits 0
// A failure answers {"error":"..."} and the bench stops the run.
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';

import { Queue, Worker } from 'bullmq';
import { createClient } from 'redis';

const require = createRequire(import.meta.url);

function option(name, fallback) {
  const at = process.argv.indexOf(`--${name}`);
  return at > 0 && at + 1 < process.argv.length ? process.argv[at + 1] : fallback;
}

const connection = {
  host: option('host', '127.0.0.1'),
  port: Number(option('port', '0')),
  maxRetriesPerRequest: null,  // what BullMQ asks of a Worker's connection
};
const prefix = option('prefix', 'echostore-bench-peers');
let queues = 0;  // each measurement uses a queue of its own

function versionOf(name) {
  try {
    return require(`${name}/package.json`).version;
  } catch {
    return 'absent';
  }
}

// The processor's work: what EchoStore's apply does to its L1 row, here to a Map entry.
const applied = new Map();

async function throughput(concurrency, n) {
  const name = `tp${++queues}`;
  const queue = new Queue(name, { connection, prefix });
  const opts = { removeOnComplete: true, removeOnFail: true };
  for (let i = 0; i < n; i += 1000) {
    const batch = [];
    for (let j = i; j < Math.min(n, i + 1000); ++j) {
      batch.push({ name: 'put', data: { key: `k${j % 1000}`, version: j }, opts });
    }
    await queue.addBulk(batch);
  }
  let done = 0;
  let finish;
  const all = new Promise((resolve) => { finish = resolve; });
  const worker = new Worker(name, async (job) => {
    applied.set(job.data.key, job.data.version);
  }, { connection, prefix, concurrency, autorun: false });
  worker.on('completed', () => {
    if (++done === n) finish();
  });
  worker.on('failed', (job, err) => { throw err; });
  await worker.waitUntilReady();
  const t0 = performance.now();
  worker.run();
  await all;
  const seconds = (performance.now() - t0) / 1e3;
  await worker.close();
  await queue.obliterate({ force: true });
  await queue.close();
  return { seconds, jobs: n };
}

async function latency(n) {
  const name = `lat${++queues}`;
  const queue = new Queue(name, { connection, prefix });
  let started = 0;
  let completed;
  const worker = new Worker(name, async (job) => {
    started = performance.now();
    applied.set(job.data.key, job.data.version);
  }, { connection, prefix, concurrency: 1 });
  worker.on('completed', () => completed());
  await worker.waitUntilReady();
  const opts = { removeOnComplete: true, removeOnFail: true };
  const us = [];
  for (let i = 0; i < n; ++i) {
    const settled = new Promise((resolve) => { completed = resolve; });
    const t0 = performance.now();
    await queue.add('put', { key: 'k0', version: i }, opts);
    await settled;
    us.push((started - t0) * 1e3);
  }
  await worker.close();
  await queue.obliterate({ force: true });
  await queue.close();
  return { us };
}

async function hit(n) {
  const client = createClient({
    socket: { host: connection.host, port: connection.port },
    RESP: 3,
    clientSideCache: { ttl: 0, maxEntries: 0 },
  });
  await client.connect();
  const key = `${prefix}:hit`;
  await client.set(key, 'px=1');
  await client.get(key);  // the fill; every read below is a hit
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; ++i) await client.get(key);
  const ns = Number(process.hrtime.bigint() - t0) / n;
  const hits = client.clientSideCache.stats().hitCount;
  await client.del(key);
  await client.close();
  if (hits < n) throw new Error(`only ${hits} of ${n} reads were hits`);
  return { ns };
}

async function answer(line) {
  const [verb, ...args] = line.trim().split(/\s+/);
  switch (verb) {
    case 'versions':
      return {
        node: process.versions.node,
        bullmq: versionOf('bullmq'),
        ioredis: versionOf('ioredis'),
        redis: versionOf('redis'),
      };
    case 'throughput':
      return throughput(Number(args[0]), Number(args[1]));
    case 'latency':
      return latency(Number(args[0]));
    case 'hit':
      return hit(Number(args[0]));
    default:
      throw new Error(`unknown request '${line.trim()}'`);
  }
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (line.trim() === '') continue;
  if (line.trim() === 'quit') break;
  let reply;
  try {
    reply = await answer(line);
  } catch (err) {
    reply = { error: String(err && err.message ? err.message : err) };
  }
  process.stdout.write(`${JSON.stringify(reply)}\n`);
}
process.exit(0);
