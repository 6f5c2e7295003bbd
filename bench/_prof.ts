import { writeFileSync } from 'node:fs';
import inspector from 'node:inspector';
import { join } from 'node:path';
import { addLedgerFeatures, benchDir, ok, pair, POST, setupEngine, uuid } from './common.js';
const { dir } = benchDir();
const e = await setupEngine(join(dir, 'calc.db'));
const mode = process.env.MODE ?? 'calc';
if (mode !== 'plain') addLedgerFeatures(e, ['sets', 'control', 'calc']);
const post = (n: number) => {
  const [from, to] = pair(n);
  ok(e, POST, {
    input: {
      transactionId: uuid(n),
      tranCode: 'TRANSFER',
      params: { from, to, amount: `${10 + (n % 5000)}.${n % 100}` },
    },
  });
};
for (let n = 1; n < 3000; n++) post(n);
const N = Number(process.env.N ?? 20000);
// PROF=file.cpuprofile: a CPU profile of the measured posts only (not the setup).
const session = process.env.PROF ? new inspector.Session() : null;
const call = (method: string, params?: object) =>
  new Promise<any>((resolve, reject) =>
    session!.post(method, params ?? {}, (err, res) => (err ? reject(err) : resolve(res))),
  );
if (session) {
  session.connect();
  await call('Profiler.enable');
  await call('Profiler.setSamplingInterval', { interval: 100 });
  await call('Profiler.start');
}
const t0 = performance.now();
const c0 = process.cpuUsage();
for (let n = 3000; n < 3000 + N; n++) post(n);
const t = performance.now() - t0;
const c = process.cpuUsage(c0);
if (session) writeFileSync(process.env.PROF!, JSON.stringify((await call('Profiler.stop')).profile));
console.log(mode, ((t * 1000) / N).toFixed(1), 'µs wall', ((c.user + c.system) / N).toFixed(1), 'µs cpu');
e.close();
