import * as actions from '../../actions/actions.js';
import * as clients from '../../auth/clients.js';
import { EngineError, quote, limitExceeded } from '../../errors.js';
import { deployedRecord, writeRecord } from '../../deploy/records.js';
import { checkOutsideCall } from '../../execution/call-rules.js';
import * as triggers from '../../execution/queue/triggers.js';
import * as velocity from '../../ledger/velocity.js';
import { jsonObjectText } from '../../ledger/records.js';
import * as skills from '../../skills/skills.js';
import type { RequestContext } from '../context.js';
import { guard } from './guard.js';

/**
 * What `tally deploy` recorded of each record it manages (migration 19): the fields the project
 * files declared, as the deploy left them, so that the next deploy can tell a field changed at
 * runtime since from one the files changed (src/deploy/deploy.ts decides what to do with each).
 * Reading is SELECT on deploy.Record; recording is INSERT and UPDATE on it, never from inside a
 * tool call (a program that could rewrite the record could make its own writes look deployed).
 */
const R = 'deploy.Record';

type Kind =
  | 'ACCOUNT'
  | 'ACCOUNT_SET'
  | 'VELOCITY_LIMIT'
  | 'VELOCITY_CONTROL'
  | 'TRAN_CODE'
  | 'TOOL'
  | 'SKILL'
  | 'TRIGGER'
  | 'CLIENT';
type Args = Record<string, any>;

interface RecordInput {
  kind: Kind;
  id: string;
  state: unknown;
  expectVersion?: number | null;
}

function checkCount(ctx: RequestContext, n: number, what: string): void {
  if (n > ctx.limits.pageSizeMax) {
    throw limitExceeded(
      'pageSizeMax',
      ctx.limits.pageSizeMax,
      n,
      `${what} lists ${n} records; pageSizeMax is ${ctx.limits.pageSizeMax}`,
      { hint: 'Send them in several fields of one request (aliases), or raise pageSizeMax.' },
    );
  }
}

/**
 * The version of the record a deploy manages as it is now (null: there is none), read under the
 * same SELECT its own query needs. Tran codes, tools and skills: their latest version.
 */
function currentVersion(ctx: RequestContext, kind: Kind, id: string): number | null {
  try {
    switch (kind) {
      case 'ACCOUNT':
        return guard(ctx, 'SELECT', 'financial.Account', ctx.ledger.getAccount({ id })).version;
      case 'ACCOUNT_SET':
        return guard(ctx, 'SELECT', 'financial.AccountSet', ctx.ledger.getAccountSet(id)).version;
      case 'VELOCITY_LIMIT':
        return guard(ctx, 'SELECT', 'financial.VelocityLimit', velocity.getVelocityLimit(ctx.ledger.deps, id)).version;
      case 'VELOCITY_CONTROL':
        return guard(ctx, 'SELECT', 'financial.VelocityControl', velocity.getVelocityControl(ctx.ledger.deps, id))
          .version;
      case 'TRAN_CODE':
        return guard(ctx, 'SELECT', 'financial.TranCode', ctx.ledger.getTranCode({ code: id })).version;
      case 'TOOL':
        return guard(ctx, 'SELECT', 'actions.Action', actions.getVersion(ctx.services.actions, { name: id })).version;
      case 'SKILL':
        return guard(ctx, 'SELECT', 'actions.Skill', skills.getSkill(ctx.services.skills.deps, id)).version;
      case 'TRIGGER':
        return guard(ctx, 'SELECT', 'actions.Trigger', triggers.getTrigger(ctx.services, id)).version;
      case 'CLIENT':
        return guard(ctx, 'SELECT', 'auth.Client', clients.getClient(ctx.clients, id)).version;
    }
  } catch (error) {
    if (error instanceof EngineError && error.code === 'NOT_FOUND') return null;
    throw error;
  }
}

export const deploymentResolvers = {
  Query: {
    deployedRecords: (_: unknown, { keys }: Args, ctx: RequestContext) => {
      checkCount(ctx, keys.length, 'deployedRecords(keys:)');
      const found = [];
      for (const key of keys as Array<{ kind: Kind; id: string }>) {
        const record = deployedRecord(ctx.services, key.kind, key.id);
        if (record) found.push(guard(ctx, 'SELECT', R, record));
      }
      return found;
    },
  },
  Mutation: {
    recordDeployment: (_: unknown, { records }: Args, ctx: RequestContext) => {
      checkOutsideCall(
        ctx.frame,
        'deployed records cannot be written',
        'Only a deploy records them (tally deploy, as a client).',
      );
      checkCount(ctx, records.length, 'recordDeployment(records:)');
      const now = ctx.services.clock.now().toISOString();
      for (const record of records as RecordInput[]) {
        const existing = deployedRecord(ctx.services, record.kind, record.id);
        guard(ctx, existing ? 'UPDATE' : 'INSERT', R, existing ?? { kind: record.kind, id: record.id });
        const what = `${record.kind.toLowerCase().replace('_', ' ')} ${quote(record.id)}`;
        const state = jsonObjectText(record.state, `the state of ${what}`, ctx.limits.jsonBytesMax);
        if (state === null)
          throw new EngineError('BAD_REQUEST', `the state of ${what} must be a JSON object, got null`);
        if (record.expectVersion != null) {
          // The deploy planned from this version: a write since (a tool, another client) would
          // otherwise be overwritten by what was planned without it.
          const actual = currentVersion(ctx, record.kind, record.id);
          if (actual !== record.expectVersion) {
            throw new EngineError(
              'RECORD_CHANGED',
              `${what} is at version ${actual ?? 'none (it no longer exists)'}, not ${record.expectVersion} as when the deploy was planned`,
              {
                hint: 'It changed while the deploy ran; nothing was applied. Deploy again: the plan is made from the record as it is now.',
                details: { kind: record.kind, id: record.id, expected: record.expectVersion, actual },
              },
            );
          }
        }
        writeRecord(ctx.services, { kind: record.kind, id: record.id, state }, ctx.principal, now);
      }
      return records.length;
    },
  },
};
