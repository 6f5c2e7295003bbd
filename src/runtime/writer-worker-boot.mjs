// The entry point of the writer thread of `tally serve` (see writer-thread.ts): like
// read-worker-boot.mjs, it registers tsx's loader in the thread, then loads the TypeScript worker.
import { register } from 'tsx/esm/api';

register();
await import('./writer-worker.ts');
