import { EngineError } from '../errors.js';
import type { Db } from './database.js';
import type { Migration } from './migrations.js';

export function schemaVersion(db: Db): number {
  return db.pragma('user_version', { simple: true }) as number;
}

/** Apply, in order and each in its own transaction, the migrations newer than `user_version`. */
export function migrate(db: Db, migrations: readonly Migration[]): number[] {
  const applied: number[] = [];
  const current = schemaVersion(db);
  const latest = migrations.at(-1)?.version ?? 0;
  if (current > latest) {
    throw new EngineError('BAD_REQUEST', `database schema version ${current} is newer than this Tally (${latest})`, {
      hint: 'Run a newer Tally against this database.',
    });
  }
  for (const migration of migrations) {
    if (migration.version <= current) continue;
    db.transaction(() => {
      db.exec(migration.sql);
      db.pragma(`user_version = ${migration.version}`);
    }).immediate();
    applied.push(migration.version);
  }
  return applied;
}
