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

/**
 * Load one QuickJS WASM module (sync build) whose linear memory is hard-capped. QuickJS's own
 * memory limit does not count every allocation in this build (typed arrays and large arrays slip
 * past it), so the cap on the WebAssembly.Memory is what really bounds a program.
 */
export async function loadQuickJS(memoryBytesMax: number): Promise<QuickJSWASMModule> {
  const maximum = Math.ceil(memoryBytesMax / WASM_PAGE_BYTES);
  const initial = Math.min(256, maximum);
  const Memory = (globalThis as unknown as { WebAssembly: { Memory: WasmMemoryConstructor } }).WebAssembly.Memory;
  const base = releaseSync as unknown as QuickJSSyncVariant;
  const variant = newVariant(base, { wasmMemory: new Memory({ initial, maximum }) as never });
  return newQuickJSWASMModuleFromVariant(variant);
}
