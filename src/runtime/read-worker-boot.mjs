// The entry point of a read pool thread (see read-pool.ts). A worker thread starts with none of
// its parent's module hooks: under bin/tally.mjs (tsx's register() in the main thread) and under
// vitest (which transforms TypeScript itself) it could not load a .ts file. So it registers tsx's
// loader for itself, then loads the TypeScript worker. Under the tsx CLI (`npm start`) the thread
// already has tsx through the inherited execArgv; registering again is harmless (measured: same
// start time, same behaviour).
import { register } from 'tsx/esm/api';

register();
await import('./read-worker.ts');
