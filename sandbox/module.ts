import releaseSync from '@jitl/quickjs-wasmfile-release-sync';
import {
  newQuickJSWASMModuleFromVariant,
  newVariant,
  type QuickJSSyncVariant,
  type QuickJSWASMModule,
} from 'quickjs-emscripten-core';

const WASM_PAGE_BYTES = 64 * 1024;

interface WasmMemoryConstructor {
  new (descriptor: { initial: number; maximum: number }): unknown;
}

/** The C allocator of the emscripten module under a QuickJSWASMModule (not part of its typed API). */
interface EmscriptenAllocator {
  _malloc(bytes: number): number;
  _free(pointer: number): void;
}

/**
 * Load one QuickJS WASM module (sync build) whose linear memory is hard-capped. QuickJS's own
 * memory limit does not count every allocation in this build (typed arrays and large arrays slip
 * past it), so the cap on the WebAssembly.Memory is what really bounds a program.
 *
 * `heapBytes` (the QuickJS heap limit) is reserved for the C heap when the module loads, before any
 * runtime exists: allocated once and freed at once, it leaves that much free space at the top of
 * dlmalloc's heap (emscripten's dlmalloc never gives it back). Without it the heap only ever grows
 * by what one request needs, so an array QuickJS grows (by half each time, `realloc`) cannot grow
 * in place: each step copies into fresh memory at the top, the old copy is left as a hole, and how
 * much memory the last step needs depends on whether the holes happen to line up. A 5,000,000-slot
 * array (40 MB) then needed anything from 76 to 111 MB of WASM memory, depending on the size of the
 * prelude text (its freed copy is one of the holes); with the space reserved it grows in place
 * (46 MB).
 */
export async function loadQuickJS(memoryBytesMax: number, heapBytes = 0): Promise<QuickJSWASMModule> {
  const maximum = Math.ceil(memoryBytesMax / WASM_PAGE_BYTES);
  const initial = Math.min(256, maximum);
  const Memory = (globalThis as unknown as { WebAssembly: { Memory: WasmMemoryConstructor } }).WebAssembly.Memory;
  const base = releaseSync as unknown as QuickJSSyncVariant;
  const variant = newVariant(base, { wasmMemory: new Memory({ initial, maximum }) as never });
  const module = await newQuickJSWASMModuleFromVariant(variant);
  if (heapBytes > 0) reserveHeap(module, heapBytes);
  return module;
}

/**
 * Grow the C heap to `bytes` free at its top, once (see loadQuickJS). Only address space: the
 * pages are not written, so the process's resident memory does not grow. A heap the WASM cap
 * cannot hold is simply not reserved (malloc returns 0).
 */
function reserveHeap(module: QuickJSWASMModule, bytes: number): void {
  const allocator = (module as unknown as { module?: Partial<EmscriptenAllocator> }).module;
  if (typeof allocator?._malloc !== 'function' || typeof allocator._free !== 'function') return;
  const pointer = allocator._malloc(bytes);
  if (pointer !== 0) allocator._free(pointer);
}
