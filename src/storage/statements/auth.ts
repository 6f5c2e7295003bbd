import type { Db } from '../database.js';

export interface ClientRow {
  principal: string;
  name: string;
  policies: string;
  key_hash: string;
  version: number;
  created: string;
  modified: string;
}

export function authStatements(db: Db) {
  return {
    clientByPrincipal: db.prepare<[string], ClientRow>('SELECT * FROM clients WHERE principal = ?'),
    clientByKeyHash: db.prepare<[string], ClientRow>('SELECT * FROM clients WHERE key_hash = ?'),
    clientsPage: db.prepare<[number, number], ClientRow & { rowid: number }>(
      'SELECT rowid, * FROM clients WHERE rowid > ? ORDER BY rowid LIMIT ?',
    ),
    insertClient: db.prepare(
      `INSERT INTO clients (principal, name, policies, key_hash, version, created, modified)
       VALUES (@principal, @name, @policies, @key_hash, 1, @created, @modified)`,
    ),
    updateClient: db.prepare(
      'UPDATE clients SET name = @name, policies = @policies, key_hash = @key_hash, version = version + 1, modified = @modified WHERE principal = @principal',
    ),
    deleteClient: db.prepare<[string]>('DELETE FROM clients WHERE principal = ?'),
    countClients: db.prepare<[], { n: number }>('SELECT count(*) AS n FROM clients'),
  };
}

export type AuthStatements = ReturnType<typeof authStatements>;
