#!/usr/bin/env node
// A worker of the limiter bench's rate rows (issue 17): npm rate-limiter-flexible's
// RateLimiterEtcd (a fixed window of `points` per `duration` s, with etcd3) on one key.
//
//   node rlf_etcd.js '<WorkerSetup JSON>'   # one WorkerReport JSON line on stdout
//   node rlf_etcd.js --versions             # one line: Node, rate-limiter-flexible, etcd3
//
// The protocol is benches/limiter/rate/protocol.rs. scripts/test installs the packages into
// the build dir and the bench points NODE_PATH at them. One etcd3 client and one limiter per
// process serve all of its callers, as one Limiter per process does for clusterlimit.
//
// Measured with 11.4.0 on etcd 3.4: its counter never resets (each write moves the key's
// `expire` on, no read checks it, and the key has no lease), so a key admits `points` once in
// its life; and concurrent callers of one key fail its 5 transaction tries (counted as errors).
// The report shows both as they are.
'use strict';

const fs = require('fs');
const path = require('path');

// Most latencies a hot-mode report carries (the protocol's bound).
const RESERVOIR = 20000;

// Now as Unix µs: the clock every worker of a run shares, whatever its language.
function unixUs() {
  return Math.round((performance.timeOrigin + performance.now()) * 1000);
}

// The version in an installed package's package.json (found like require finds the package).
function packageVersion(name) {
  const dirs = (process.env.NODE_PATH || '').split(path.delimiter).concat(module.paths);
  for (const dir of dirs) {
    const file = path.join(dir, name, 'package.json');
    if (dir && fs.existsSync(file)) {
      return JSON.parse(fs.readFileSync(file, 'utf8')).version;
    }
  }
  return '?';
}

function versions() {
  return `Node ${process.version.replace(/^v/, '')}, rate-limiter-flexible `
    + `${packageVersion('rate-limiter-flexible')}, etcd3 ${packageVersion('etcd3')}`;
}

// The setup's `field`, a whole number ≥ `min`, or an error naming it.
function whole(setup, field, min) {
  const v = setup[field];
  if (!Number.isInteger(v) || v < min) {
    throw new Error(`${field} must be a whole number ≥ ${min}, got ${JSON.stringify(v)}`);
  }
  return v;
}

// The setup's `field`, a non-empty string, or an error naming it.
function text(setup, field) {
  const v = setup[field];
  if (typeof v !== 'string' || v === '') {
    throw new Error(`${field} must be a non-empty string, got ${JSON.stringify(v)}`);
  }
  return v;
}

// Counts, a uniform reservoir of latencies (algorithm R) and the admitted intervals.
class Tally {
  constructor(keep) {
    Object.assign(this, {
      keep, decisions: 0, admitted: 0, errors: 0, seen: 0, latencies: [], admittedAt: [],
      firstSent: null, lastAnswered: 0, firstError: null,
    });
  }

  record(sent, answered, latencyUs, outcome) {
    this.firstSent = this.firstSent === null ? sent : Math.min(this.firstSent, sent);
    this.lastAnswered = Math.max(this.lastAnswered, answered);
    if (outcome instanceof Error) {
      this.errors += 1;
      this.firstError = this.firstError || outcome;
      return;
    }
    this.decisions += 1;
    if (outcome) {
      this.admitted += 1;
      this.admittedAt.push([sent, answered]);
    }
    this.seen += 1;
    if (this.latencies.length < this.keep) {
      this.latencies.push(latencyUs);
    } else {
      const slot = Math.floor(Math.random() * this.seen);
      if (slot < this.keep) this.latencies[slot] = latencyUs;
    }
  }
}

async function one(check, tally) {
  const sent = unixUs();
  const started = process.hrtime.bigint();
  let outcome;
  try {
    outcome = await check();
  } catch (e) {
    outcome = e instanceof Error ? e : new Error(String(e));
  }
  const latencyUs = Number((process.hrtime.bigint() - started) / 1000n);
  tally.record(sent, unixUs(), latencyUs, outcome);
}

async function run(setup) {
  const { Etcd3 } = require('etcd3');
  const { RateLimiterEtcd, RateLimiterRes } = require('rate-limiter-flexible');
  const limit = whole(setup, 'limit', 1);
  const periodMs = whole(setup, 'period_ms', 1);
  const [target, name, key] = [text(setup, 'target'), text(setup, 'limit_name'), text(setup, 'key')];
  const [startAt, count] = [whole(setup, 'start_at_unix_us', 0), whole(setup, 'count', 0)];
  const [callers, durationMs] = [whole(setup, 'callers', 1), whole(setup, 'duration_ms', 0)];
  if (setup.mode !== 'hot' && setup.mode !== 'uncontended') {
    throw new Error(`mode must be hot or uncontended, got ${JSON.stringify(setup.mode)}`);
  }
  const client = new Etcd3({ hosts: target });
  const limiter = new RateLimiterEtcd({
    storeClient: client,
    keyPrefix: name,
    points: limit,
    duration: periodMs / 1000,
  });
  // A denial is a rejection with a RateLimiterRes; anything else is an error.
  const check = () => limiter.consume(key).then(
    () => true,
    (e) => {
      if (e instanceof RateLimiterRes) return false;
      throw e;
    },
  );
  await client.get(`${name}/warm-up`).string(); // connect before the start
  const wait = startAt - unixUs();
  if (wait > 0) await new Promise((r) => { setTimeout(r, wait / 1000); });

  const tally = new Tally(setup.mode === 'hot' ? RESERVOIR : Infinity);
  const cpuBefore = process.cpuUsage();
  if (setup.mode === 'uncontended') {
    for (let i = 0; i < count; i += 1) {
      await one(check, tally); // eslint-disable-line no-await-in-loop
    }
  } else {
    const end = Math.max(startAt, unixUs()) + durationMs * 1000;
    const caller = async () => {
      while (unixUs() < end) await one(check, tally); // eslint-disable-line no-await-in-loop
    };
    await Promise.all(Array.from({ length: callers }, caller));
  }
  const cpu = process.cpuUsage(cpuBefore);
  client.close();
  if (tally.firstError) {
    process.stderr.write(`rlf_etcd: ${tally.errors} failed checks, the first: ${tally.firstError}\n`);
    if (tally.decisions === 0) throw new Error(`no check got a decision: ${tally.firstError.message}`);
  }
  return {
    algorithm: 'fixed-window',
    decisions: tally.decisions,
    admitted: tally.admitted,
    errors: tally.errors,
    elapsed_s: (tally.lastAnswered - (tally.firstSent || 0)) / 1e6,
    cpu_s: (cpu.user + cpu.system) / 1e6,
    latencies_us: tally.latencies,
    admitted_at_us: tally.admittedAt,
    store_requests: null,
    local_denials: null,
  };
}

async function main(args) {
  if (args.length === 1 && args[0] === '--versions') {
    process.stdout.write(`${versions()}\n`);
    return;
  }
  if (args.length !== 1) {
    process.stderr.write("usage: rlf_etcd.js '<WorkerSetup JSON>' | --versions\n");
    process.exit(64);
  }
  let setup;
  try {
    setup = JSON.parse(args[0]);
  } catch (e) {
    throw new Error(`bad worker setup ${args[0]}: ${e.message}`);
  }
  process.stdout.write(`${JSON.stringify(await run(setup))}\n`);
}

main(process.argv.slice(2)).then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`rlf_etcd worker failed: ${e}\n`);
    process.exit(1);
  },
);
