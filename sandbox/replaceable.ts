import { Sandbox, type SandboxLimits } from './sandbox.js';
import { loadQuickJS } from './module.js';

/**
 * The sandbox in use, replaced when one is poisoned (the host failed under a guest). Loading a
 * WASM module is asynchronous, so until the replacement is ready `current()` returns null and
 * callers answer BUSY (retryable).
 */
export class ReplaceableSandbox {
  private sandbox: Sandbox | null;
  private loading: Promise<void> | null = null;
  private disposed = false;

  private constructor(
    first: Sandbox,
    private readonly wasmBytesMax: number,
    private readonly limits: SandboxLimits,
    private readonly onError: (error: unknown) => void,
  ) {
    this.sandbox = first;
  }

  static async create(
    wasmBytesMax: number,
    limits: SandboxLimits,
    onError: (error: unknown) => void,
  ): Promise<ReplaceableSandbox> {
    return new ReplaceableSandbox(
      new Sandbox(await loadQuickJS(wasmBytesMax, limits.memoryBytesMax), limits),
      wasmBytesMax,
      limits,
      onError,
    );
  }

  current(): Sandbox | null {
    if (this.sandbox?.isPoisoned) {
      this.sandbox.dispose();
      this.sandbox = null;
      this.replace();
    }
    return this.sandbox;
  }

  /** Resolves when a usable sandbox is in place (for tests, and the CLI after a crash). */
  async ready(): Promise<void> {
    this.current();
    await this.loading;
  }

  dispose(): void {
    this.disposed = true;
    this.sandbox?.dispose();
    this.sandbox = null;
  }

  private replace(): void {
    if (this.loading || this.disposed) return;
    this.loading = loadQuickJS(this.wasmBytesMax, this.limits.memoryBytesMax)
      .then((module) => {
        if (!this.disposed) this.sandbox = new Sandbox(module, this.limits);
      })
      .catch((error: unknown) => this.onError(error))
      .finally(() => {
        this.loading = null;
      });
  }
}
