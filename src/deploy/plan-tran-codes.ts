import { createdVersion, type DeployedState, mergeVersion } from './drift.js';
import { recordOf, versionedItem } from './plan-common.js';
import type { PlanItem } from './plan-item.js';
import { current } from './reads.js';
import type { Target } from './target.js';

/*
 * The plan of a tran code: compared with its latest version as the server reports it back (the
 * file normalized the same way), a new version when what the file declares changed.
 */

const TRAN_CODE_FIELDS = `tranCodeId version description params { name type default description } vars metadata
  transaction { effective journalId correlationId externalId description metadata }
  entries { accountId units currency direction entryType layer description metadata condition }`;

/** A tran code of tran-codes/: created, or a new version when what the file declares changed. */
export async function planTranCode(
  target: Target,
  path: string,
  definition: Record<string, any>,
  base: DeployedState | null,
  overwrite: boolean,
): Promise<PlanItem> {
  const code = String(definition.code);
  const existing = await current(
    target,
    `query($code: String!) { tranCode(code: $code) { ${TRAN_CODE_FIELDS} } }`,
    { code: definition.code },
    (d) => d.tranCode,
  );
  const normalized = normalizeTranCode(definition);
  const item = { kind: 'tran code' as const, name: code, file: path };
  if (!existing) {
    return {
      ...item,
      change: 'create',
      version: 1,
      field: 'createTranCode(input: $VAR) { version }',
      variableType: 'TranCodeInput!',
      variable: definition,
      record: recordOf('TRAN_CODE', code, base, createdVersion(normalized)),
    };
  }
  const { tranCodeId, version, ...have } = existing;
  const { tranCodeId: _id, code: _code, status: _status, ...update } = definition;
  return versionedItem(
    item,
    mergeVersion(have, version, normalized, base, overwrite),
    version,
    'TRAN_CODE',
    code,
    base,
    {
      field: 'updateTranCode(id: $ID, input: $VAR) { version }',
      id: { type: 'UUID!', value: tranCodeId },
      variableType: 'TranCodeUpdateInput!',
      variable: update,
    },
  );
}

function normalizeTranCode(d: Record<string, any>) {
  const tx = d.transaction ?? {};
  return {
    description: d.description ?? null,
    params: (d.params ?? []).map((p: any) => ({
      name: p.name,
      type: p.type ?? 'STRING',
      default: p.default ?? null,
      description: p.description ?? null,
    })),
    vars: d.vars ?? null,
    metadata: d.metadata ?? null,
    transaction: Object.fromEntries(
      ['effective', 'journalId', 'correlationId', 'externalId', 'description', 'metadata'].map((k) => [
        k,
        tx[k] ?? null,
      ]),
    ),
    entries: (d.entries ?? []).map((e: any) =>
      Object.fromEntries(
        [
          'accountId',
          'units',
          'currency',
          'direction',
          'entryType',
          'layer',
          'description',
          'metadata',
          'condition',
        ].map((k) => [k, e[k] ?? null]),
      ),
    ),
  };
}
