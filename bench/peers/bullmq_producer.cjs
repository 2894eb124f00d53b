// BullMQ producer: adds N jobs with addBulk (removed when completed, like the other systems' tasks).
// Prints the time spent inside the addBulk calls (the connection is made before), as the other producers do.
const { Queue } = require('bullmq');
const IORedis = require('ioredis');

(async () => {
  const n = parseInt(process.argv[2], 10);
  const connection = new IORedis(process.env.BENCH_REDIS_URL, { maxRetriesPerRequest: null });
  const queue = new Queue('bench', { connection });
  await queue.waitUntilReady();
  let inCalls = 0n;
  for (let start = 0; start < n; start += 1000) {
    const jobs = [];
    for (let i = start; i < Math.min(n, start + 1000); i++) {
      jobs.push({ name: 'noop', data: { i }, opts: { removeOnComplete: true, removeOnFail: true } });
    }
    const t0 = process.hrtime.bigint();
    await queue.addBulk(jobs);
    inCalls += process.hrtime.bigint() - t0;
  }
  console.log(`BENCH_ENQUEUE_CALLS_S=${Number(inCalls) / 1e9}`);
  await queue.close();
  await connection.quit();
})().catch((err) => { console.error(err); process.exit(1); });
