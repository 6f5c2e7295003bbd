import { NAME_SHOWN_MAX, NAMES_LISTED_MAX } from '../limits.js';
import { fixedInput } from './checks.js';
import type { RunChild } from './programs.js';
import type { HostBridge } from '../../sandbox/sandbox.js';
import { NATIVE_TOOLS, type ToolReference } from '../actions/actions.js';
import { answersToAlias } from '../actions/names.js';
import { EngineError, type ErrorData, quote, limitExceeded } from '../errors.js';
import { checkJsonDepth } from '../json.js';
import { type CallFrame, type CallNode, outputText } from './call-tree.js';
import { authorityOf, type CallTarget, checkMayCall, consentingLayers, referencedVersion } from './call-rules.js';
import type { ExecutionServices } from './services.js';
import { succeeded, toEngineError } from './checks.js';
import { callLibrary } from '../cel/library.js';

/*
 * The host side of a program's calls (graphql(), cel(), tools, logs, cancelled()): every call a
 * program makes is a child call run through runCall, handed in, under the parent's frame.
 */

/**
 * The host side of a running program: graphql(), cel() and tools.<name>() each run as a child call
 * under its own savepoint, and come back as an envelope the guest turns into a value or a throw.
 */
export class CallBridge implements HostBridge {
  /** The answer to every status() past statusMessagesPerCallMax, made once. */
  private statusRefusal: string | null = null;

  constructor(
    private readonly svc: ExecutionServices,
    private readonly frame: CallFrame,
    /** runCall, handed in: every call a program makes is a child call. */
    private readonly runChild: RunChild,
  ) {}

  call(op: string, args: string[]): string {
    // A CEL library function (op 'fn': its name, JSON of its arguments) is not a call: no record,
    // not counted in callsPerExecutionMax (as decimal() is not); one CEL evaluation, bounded as cel()'s.
    if (op === 'fn') return this.library(args[0] ?? '', args[1] ?? '');
    // status() is no call: it says something about this one (bounded by its own limits).
    if (op === 'status') return this.status(args[0] ?? '');
    const root = this.frame.root;
    if (root.calls > this.svc.limits.callsPerExecutionMax && op !== 'cancelled') {
      // Past the budget, further calls are refused without a record each (a loop catching the
      // refusal must not write a row per turn; the first refused call is recorded), and without
      // work: one answer, made once, before the arguments are even read.
      root.calls++;
      return (root.overBudget ??= JSON.stringify({
        ok: false,
        error: limitExceeded(
          'callsPerExecutionMax',
          this.svc.limits.callsPerExecutionMax,
          root.calls,
          `call ${root.calls} and every later call beneath one execution are over callsPerExecutionMax (${this.svc.limits.callsPerExecutionMax})`,
          {
            hint: 'Do the work in fewer calls (batch it in one graphql operation), or start it as separate executions.',
            details: { callsPerExecutionMax: this.svc.limits.callsPerExecutionMax },
          },
        ).toData(),
      }));
    }
    try {
      if (op === 'graphql') {
        const [query, variablesText] = args;
        const variables = parseArg(variablesText, 'variables', this.svc.limits.jsonDepthMax);
        if (typeof query !== 'string')
          return envelope(this.child({ type: 'native', name: 'graphql' }, { query, variables }));
        // The guest's variables text is JSON.stringify of what it parsed to: the input's text is built from it.
        const rest = variablesText === undefined || variablesText === '' ? '{}' : `{"variables":${variablesText}}`;
        const text =
          rest === '{}' ? `{"query":${JSON.stringify(query)}}` : `{"query":${JSON.stringify(query)},${rest.slice(1)}`;
        return envelope(this.child({ type: 'native', name: 'graphql' }, { query, variables }, undefined, text, rest));
      }
      if (op === 'cel') {
        return envelope(
          this.child(
            { type: 'native', name: 'cel' },
            { expression: args[0], bindings: parseArg(args[1], 'bindings', this.svc.limits.jsonDepthMax) },
          ),
        );
      }
      if (op === 'tool')
        return this.tool(
          args[0] ?? '',
          parseArg(args[1], 'input', this.svc.limits.jsonDepthMax),
          parseArg(args[2], 'options', this.svc.limits.jsonDepthMax),
        );
      if (op === 'cancelled')
        return JSON.stringify({ ok: true, value: this.svc.st.cancelRequested.get(this.frame.node.rootId) === 1 });
      throw new EngineError('BAD_REQUEST', `unknown host operation ${quote(op)}`);
    } catch (error) {
      return JSON.stringify({ ok: false, error: toEngineError(error).toData() });
    }
  }

  private library(name: string, argsText: string): string {
    try {
      return `{"ok":true,"value":${callLibrary(this.svc.cel, name, argsText, this.svc.limits.jsonDepthMax)}}`;
    } catch (error) {
      return JSON.stringify({ ok: false, error: toEngineError(error).toData() });
    }
  }

  log(line: string): void {
    const node = this.frame.node;
    if (node.logBytes >= this.svc.limits.logBytesMax) return;
    const room = this.svc.limits.logBytesMax - node.logBytes;
    const bytes = Buffer.from(line);
    node.logs.push(
      bytes.length <= room
        ? line
        : `${bytes.subarray(0, room).toString()}… [logs cut at logBytesMax ${this.svc.limits.logBytesMax}]`,
    );
    node.logBytes += Math.min(bytes.length, room);
  }

  /**
   * status(text): a progress message of this call, kept on its node and written with its record
   * (persistProgress); the first one asks for the waits on its tree to look once it commits. Past
   * statusMessagesPerCallMax or statusBytesMax it is refused (LIMIT_EXCEEDED) and nothing is kept.
   */
  private status(text: string): string {
    const { limits } = this.svc;
    const node = this.frame.node;
    const said = node.progress?.length ?? 0;
    // Past the count every answer is the same: made once (a loop that catches it costs no more per turn).
    if (said >= limits.statusMessagesPerCallMax && this.statusRefusal !== null) return this.statusRefusal;
    const bytes = Buffer.byteLength(text);
    let refused: EngineError | null = null;
    if (said >= limits.statusMessagesPerCallMax)
      refused = limitExceeded(
        'statusMessagesPerCallMax',
        limits.statusMessagesPerCallMax,
        said + 1,
        `status message ${said + 1} of this call is over statusMessagesPerCallMax (${limits.statusMessagesPerCallMax})`,
        { hint: 'Say less often (every n items, or at each stage), or start the work as separate executions.' },
      );
    else if (bytes > limits.statusBytesMax)
      refused = limitExceeded(
        'statusBytesMax',
        limits.statusBytesMax,
        bytes,
        `a status message of ${bytes} bytes is over statusBytesMax (${limits.statusBytesMax})`,
        { hint: 'Say a short line; put the details in the output, or in console.log.' },
      );
    if (refused) {
      const answer = JSON.stringify({ ok: false, error: refused.toData() });
      if (said >= limits.statusMessagesPerCallMax) this.statusRefusal = answer;
      return answer;
    }
    const root = this.frame.root;
    root.said = (root.said ?? 0) + 1;
    (node.progress ??= []).push({ text, at: this.svc.clock.now().toISOString(), n: root.said });
    if (said === 0) this.svc.notifyProgress(node.rootId, node.executionId);
    return '{"ok":true,"value":null}';
  }

  private child(
    target: CallTarget,
    input: unknown,
    authorize?: () => void,
    inputText?: string,
    inputRest?: string,
    pinned?: boolean,
  ): CallNode {
    return this.runChild(this.svc, {
      target,
      input,
      executionId: this.svc.newId(),
      parent: this.frame,
      root: this.frame.root,
      inputFingerprint: null,
      ...(authorize ? { authorize } : {}),
      ...(pinned ? { pinned } : {}),
      ...(inputText === undefined ? {} : { inputText, inputRest }),
    });
  }

  /**
   * Calling tools.x() is invoking x: INSERT on actions.Execution with the document an invoke is
   * checked with, against the client and every tool on the stack, this calling one included
   * (unless it pins x's version: consentingLayers).
   */
  private authorizeCall(name: string, target: CallTarget, input: unknown, pinned: boolean): void {
    checkMayCall(
      authorityOf(this.svc.cel, this.frame.root.caller, this.frame),
      name,
      target.type === 'version' ? target.version.version : null,
      input,
      consentingLayers(this.frame, pinned),
    );
  }

  private tool(name: string, input: unknown, options: unknown): string {
    const version = this.frame.version;
    const references = version?.tools ?? [];
    const check = !(
      options !== null &&
      typeof options === 'object' &&
      (options as { check?: unknown }).check === false
    );
    const reference = references.find((r) => r.name === name) ?? this.byAlias(references, name);
    if (!reference) {
      // A name it does not declare is still a call: recorded as FAILED in the tree and counted
      // toward callsPerExecutionMax (a loop over made-up names stops like any other).
      const declared = references.map((r) => r.name);
      const list =
        declared.length === 0
          ? 'it declares none'
          : `declared: ${declared.slice(0, NAMES_LISTED_MAX).join(', ')}${declared.length > NAMES_LISTED_MAX ? `, … (${declared.length} in all)` : ''}`;
      const shown =
        name.length > NAME_SHOWN_MAX ? `${name.slice(0, NAME_SHOWN_MAX)}… (${name.length} characters)` : name;
      const refusal = new EngineError(
        'NOT_FOUND',
        `tools.${shown} is not declared by ${version?.name ?? 'this call'}; ${list}`,
        {
          hint: 'Add it to the action’s tools list (with a version to pin it) and deploy a new version.',
        },
      );
      try {
        this.count();
      } catch (error) {
        // Past the budget: refused without a record (a loop catching it must not write a row a turn).
        if (check) throw error;
        return JSON.stringify({ ok: true, value: { ok: false, output: null, error: toEngineError(error).toData() } });
      }
      const node = this.failedChild(name.slice(0, NAME_SHOWN_MAX), input, refusal);
      return check
        ? envelope(node)
        : JSON.stringify({ ok: true, value: { ok: false, output: null, error: node.error } });
    }
    let node: CallNode;
    try {
      const target = this.resolveReference(reference);
      const fixed = this.fixedInput(reference, input);
      const pinned = reference.version != null && target.type === 'version';
      node = this.child(
        target,
        fixed,
        () => this.authorizeCall(reference.name, target, fixed, pinned),
        undefined,
        undefined,
        pinned,
      );
    } catch (error) {
      // The call could not start (a locked pinned version, a fixed input that failed): it is
      // still a call of this tool, recorded as FAILED, and check: false still catches it.
      node = this.failedChild(reference.name, input, toEngineError(error));
    }
    if (!check) {
      return JSON.stringify({
        ok: true,
        value: { ok: succeeded(node), output: node.output ?? null, error: node.error },
      });
    }
    return envelope(node);
  }

  /** A declared tool that answers to `name` as one of its aliases (tool.aliases of the version it resolves to). */
  private byAlias(references: readonly ToolReference[], name: string): ToolReference | undefined {
    for (const reference of references) {
      if ((NATIVE_TOOLS as readonly string[]).includes(reference.name)) continue;
      try {
        const target = this.resolveReference(reference);
        if (target.type === 'version' && answersToAlias(target.version, name)) return reference;
      } catch {
        // A reference that cannot resolve answers to no alias.
      }
    }
    return undefined;
  }

  /** Count a call that never reaches runCall (an undeclared name) against callsPerExecutionMax. */
  private count(): void {
    const root = this.frame.root;
    root.calls++;
    if (root.calls > this.svc.limits.callsPerExecutionMax) {
      throw limitExceeded(
        'callsPerExecutionMax',
        this.svc.limits.callsPerExecutionMax,
        root.calls,
        `call ${root.calls} beneath one execution is over callsPerExecutionMax (${this.svc.limits.callsPerExecutionMax})`,
        {
          hint: 'Do the work in fewer calls (batch it in one graphql operation), or start it as separate executions.',
        },
      );
    }
  }

  private failedChild(name: string, input: unknown, error: EngineError): CallNode {
    const now = this.svc.clock.now().toISOString();
    const parent = this.frame.node;
    const node: CallNode = {
      executionId: this.svc.newId(),
      actionId: null,
      actionName: name,
      actionVersion: null,
      kind: 'TOOL',
      status: 'FAILED',
      input,
      inputFingerprint: null,
      output: null,
      error: error.toData(),
      principal: parent.principal,
      parentId: parent.executionId,
      rootId: parent.rootId,
      depth: parent.depth + 1,
      attempt: 1,
      started: now,
      finished: now,
      logs: [],
      logBytes: 0,
      created: now,
      children: [],
    };
    parent.children.push(node);
    return node;
  }

  /** A pinned version always; otherwise the latest ACTIVE one, resolved once per execution (runCall checks it may run). */
  private resolveReference(reference: ToolReference): CallTarget {
    if ((NATIVE_TOOLS as readonly string[]).includes(reference.name))
      return { type: 'native', name: reference.name as 'graphql' | 'cel' };
    return { type: 'version', version: referencedVersion(this.svc.actions, reference, this.frame.root.resolved) };
  }

  private fixedInput(reference: ToolReference, input: unknown): unknown {
    return fixedInput(this.svc, reference, input, {
      event: this.frame.event,
      toolInput: this.frame.node.input,
      executionInput: this.frame.root.input,
    });
  }
}

/** A value a program passed to a host call, as bounded as a client's: at most jsonDepthMax deep. */
function parseArg(text: string | undefined, what: string, depthMax: number): unknown {
  if (text === undefined || text === '') return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new EngineError('BAD_REQUEST', `${what} is not JSON-serialisable`);
  }
  checkJsonDepth(value, depthMax, `the ${what} a program passed`);
  return value;
}

/** The answer to the guest; the output's text is the one the record keeps. */
function envelope(node: CallNode): string {
  if (succeeded(node))
    return `{"ok":true,"value":${node.output === undefined || node.output === null ? 'null' : outputText(node)!}}`;
  return JSON.stringify({ ok: false, error: node.error as ErrorData });
}
