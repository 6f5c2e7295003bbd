import { createHash, randomBytes } from 'node:crypto';
import type { Cel } from '../cel/cel.js';
import type { Clock } from '../clock.js';
import { EngineError, quote } from '../errors.js';
import { requiredText } from '../ledger/records.js';
import { type Connection, pageRequest, toConnection } from '../paging.js';
import { checkGrant } from '../policy/grant.js';
import { type AuthorityLayer, parsePolicies, type Policy, type PolicyInput } from '../policy/policy.js';
import type { AuthStatements, ClientRow } from '../storage/statements/auth.js';

/** An API client: a principal, a name, and the policies that bound everything it does. */
export interface Client {
  principal: string;
  name: string;
  policies: Policy[];
  version: number;
  created: string;
  modified: string;
}

export interface ClientDeps {
  st: AuthStatements;
  cel: Cel;
  clock: Clock;
  pageSizeMax: number;
  policiesMax: number;
}

/** Full authority, for the admin client that `tally serve` creates. */
export const ADMIN_POLICIES: Policy[] = [
  { effect: 'ALLOW', actions: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'], resources: ['*'], assertions: null },
];

const KEY_PREFIX = 'tly_';

/** The engine itself (in-process calls without a principal); no client may take this name. */
export const SYSTEM_PRINCIPAL = 'system';
/** The client `tally serve` makes (or re-keys from TALLY_ADMIN_KEY); it cannot be deleted. */
export const ADMIN_PRINCIPAL = 'admin';

/** The refusal of a key that belongs to no client, the same wherever a key is checked. */
export function invalidKey(): EngineError {
  return new EngineError('UNAUTHENTICATED', 'the API key is not valid', {
    hint: 'Check the key; a rotated or deleted client’s key no longer works.',
  });
}

export function hashKey(apiKey: string): string {
  return createHash('sha256').update(apiKey).digest('hex');
}

function newKey(): string {
  return KEY_PREFIX + randomBytes(32).toString('base64url');
}

function toClient(row: ClientRow): Client {
  return {
    principal: row.principal,
    name: row.name,
    policies: JSON.parse(row.policies) as Policy[],
    version: row.version,
    created: row.created,
    modified: row.modified,
  };
}

/** Parse the policies to grant; the granter's stack must hold them all (an empty stack is the engine). */
function clientPolicies(
  deps: ClientDeps,
  policies: PolicyInput[] | null | undefined,
  granter: readonly AuthorityLayer[],
): Policy[] {
  const parsed = parsePolicies(deps.cel, policies ?? [], deps.policiesMax);
  checkGrant(deps.cel, granter, parsed);
  return parsed;
}

/**
 * Create a client and its key; the key is returned this once and only its hash is kept. `granter`
 * is the creating stack: the new client's policies must be within its authority.
 */
export function createClient(
  deps: ClientDeps,
  input: { principal: string; name: string; policies?: PolicyInput[] | null },
  granter: readonly AuthorityLayer[],
  apiKey: string = newKey(),
): { client: Client; apiKey: string } {
  const principal = requiredText(input.principal, 'principal', 256);
  if (principal === SYSTEM_PRINCIPAL) {
    throw new EngineError('BAD_REQUEST', `principal ${quote(SYSTEM_PRINCIPAL)} is reserved for the engine itself`, {
      hint: 'Choose another principal.',
    });
  }
  if (deps.st.clientByPrincipal.get(principal)) {
    throw new EngineError('ALREADY_EXISTS', `client ${quote(principal)} already exists`, {
      hint: 'Use updateClient to change its policies.',
    });
  }
  const now = deps.clock.now().toISOString();
  const row = {
    principal,
    name: requiredText(input.name, 'name'),
    policies: JSON.stringify(clientPolicies(deps, input.policies, granter)),
    key_hash: hashKey(apiKey),
    created: now,
    modified: now,
  };
  deps.st.insertClient.run(row);
  return { client: toClient({ ...row, version: 1 }), apiKey };
}

/**
 * Replace the name and/or policies; `rotateKey` issues a new key and revokes the old one. New
 * policies must be within `granter`'s authority (the updating stack); so must the client's current
 * ones when `granter` rotates another client's key, since the new key hands that authority over.
 */
export function updateClient(
  deps: ClientDeps,
  principal: string,
  input: { name?: string | null; policies?: PolicyInput[] | null; rotateKey?: boolean | null },
  granter: { principal: string; stack: readonly AuthorityLayer[] },
): { client: Client; apiKey: string | null } {
  const current = findClient(deps, principal);
  // A client rotating its own key from a request hands over nothing it does not hold; from inside a
  // call, the tools on the stack bound what the key may be handed (a key carries all its policies).
  if (input.rotateKey && input.policies == null && (principal !== granter.principal || granter.stack.length > 1)) {
    checkGrant(
      deps.cel,
      granter.stack,
      JSON.parse(current.policies) as Policy[],
      `rotateKey hands over the policies of client ${principal}: policies`,
    );
  }
  const apiKey = input.rotateKey ? newKey() : null;
  const row = {
    principal,
    name: input.name == null ? current.name : requiredText(input.name, 'name'),
    policies:
      input.policies == null ? current.policies : JSON.stringify(clientPolicies(deps, input.policies, granter.stack)),
    key_hash: apiKey ? hashKey(apiKey) : current.key_hash,
    modified: deps.clock.now().toISOString(),
  };
  deps.st.updateClient.run(row);
  return { client: toClient({ ...current, ...row, version: current.version + 1 }), apiKey };
}

export function deleteClient(deps: ClientDeps, principal: string): Client {
  const current = toClient(findClient(deps, principal));
  deps.st.deleteClient.run(principal);
  return current;
}

function findClient(deps: ClientDeps, principal: string): ClientRow {
  const row = deps.st.clientByPrincipal.get(principal);
  if (!row)
    throw new EngineError('NOT_FOUND', `client ${quote(principal)} does not exist`, {
      hint: 'Create it with auth.createClient.',
    });
  return row;
}

export function getClient(deps: ClientDeps, principal: string): Client {
  return toClient(findClient(deps, principal));
}

export function lookupClient(deps: ClientDeps, principal: string): Client | null {
  const row = deps.st.clientByPrincipal.get(principal);
  return row ? toClient(row) : null;
}

export function listClients(deps: ClientDeps, first: number, after?: string | null): Connection<Client> {
  const req = pageRequest<number>(first, after, deps.pageSizeMax, 'number', 'clients');
  return toConnection(deps.st.clientsPage.all(req.after ?? 0, req.fetch), req, (r) => r.rowid, toClient);
}

/** The client an API key belongs to, or null. */
export function authenticate(deps: ClientDeps, apiKey: string): Client | null {
  if (!apiKey.startsWith(KEY_PREFIX)) return null;
  const row = deps.st.clientByKeyHash.get(hashKey(apiKey));
  return row ? toClient(row) : null;
}

/**
 * Make sure an admin client exists. With `apiKey` (TALLY_ADMIN_KEY), the admin's key is set to it;
 * without, a key is generated only when no admin exists yet. Returns the new key when one was made.
 */
export function ensureAdmin(
  deps: ClientDeps,
  apiKey?: string,
  onChange?: (change: 'created' | 'rotated') => void,
): string | null {
  const existing = deps.st.clientByPrincipal.get(ADMIN_PRINCIPAL);
  if (apiKey !== undefined && !apiKey.startsWith(KEY_PREFIX)) {
    throw new EngineError('BAD_REQUEST', `TALLY_ADMIN_KEY must start with ${KEY_PREFIX}`, {
      hint: `Generate one, e.g. ${KEY_PREFIX}$(openssl rand -hex 32).`,
    });
  }
  if (existing) {
    if (apiKey !== undefined && existing.key_hash !== hashKey(apiKey)) {
      deps.st.updateClient.run({
        principal: ADMIN_PRINCIPAL,
        name: existing.name,
        policies: existing.policies,
        key_hash: hashKey(apiKey),
        modified: deps.clock.now().toISOString(),
      });
      onChange?.('rotated');
    }
    return null;
  }
  const created = createClient(
    deps,
    { principal: ADMIN_PRINCIPAL, name: 'Administrator', policies: ADMIN_POLICIES },
    [],
    apiKey,
  ).apiKey;
  onChange?.('created');
  return created;
}
