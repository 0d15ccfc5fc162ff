// BullMQ bytes per waiting job with a payload of P bytes (JSON of the job's data).
// A reduced copy of ../shared/bench-peers/bullmq/bench.js's enqueue phase (same addBulk
// in batches, same used_memory delta / N), with data = a JSON string of exactly P bytes
// (P=0: data {} as BullMQ's smallest, "{}"). Usage: node scripts/bullmq-payload-mem.js N batch redis_url P
// (BULLMQ_DIR: the directory whose node_modules hold bullmq and ioredis; default the peer harness's).
"use strict";
const path = require("path");
const base = path.resolve(process.env.BULLMQ_DIR || path.join(__dirname, "../../shared/bench-peers/bullmq"), "node_modules") + "/";
const { Queue } = require(base + "bullmq");
const Redis = require(base + "ioredis");
const [nS, batchS, url, pS] = process.argv.slice(2);
const N = +nS, batch = +batchS, P = +pS;
const u = new URL(url);
const connection = { host: u.hostname, port: +u.port, maxRetriesPerRequest: null };
async function usedMemory(r) { return +/used_memory:(\d+)/.exec(await r.info("memory"))[1]; }
(async () => {
  const admin = new Redis(url);
  const q = new Queue(`memq-${process.pid}`, { connection, defaultJobOptions: { removeOnComplete: false, removeOnFail: true } });
  await q.waitUntilReady(); await q.obliterate({ force: true });
  const data = P === 0 ? {} : "x".repeat(Math.max(0, P - 2));
  const m0 = await usedMemory(admin);
  for (let i = 0; i < N; i += batch) {
    const jobs = [];
    for (let j = i; j < Math.min(N, i + batch); j++) jobs.push({ name: "noop", data });
    await q.addBulk(jobs);
  }
  const m1 = await usedMemory(admin);
  console.log(JSON.stringify({ impl: "bullmq-6.7.0 (mem.js copy)", payload_json_bytes: P === 0 ? 2 : P, N, mem_bytes_per_waiting_job: Math.round((m1 - m0) / N) }));
  await q.obliterate({ force: true }); await q.close(); admin.disconnect();
})().catch((e) => { console.error(e); process.exit(1); });
