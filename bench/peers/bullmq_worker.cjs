// BullMQ worker: concurrency 200 per process (BENCH_CONCURRENCY); each job marks its own completion in Redis.
const { Worker } = require('bullmq');
const IORedis = require('ioredis');

const url = process.env.BENCH_REDIS_URL;
const concurrency = parseInt(process.env.BENCH_CONCURRENCY || '200', 10);
const connection = new IORedis(url, { maxRetriesPerRequest: null });
const marker = new IORedis(url);
const worker = new Worker('bench', async () => { await marker.incr('bench:done'); }, { connection, concurrency });
const stop = async () => { await worker.close(true); process.exit(0); };
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
