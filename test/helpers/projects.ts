import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';

export const BANK = join(import.meta.dirname, '..', '..', 'examples', 'bank');

/**
 * A project `copies` times the bank's size (issue 34): the bank itself, then copies 1 … copies-1
 * of its accounts, account sets, velocity limits and controls, tran codes and program tools, each
 * with ids, codes and names of its own (`alice-3`, `TRANSFER_3`, `transfer_3`), its tools calling
 * and hooking their own copy's tools and posting with their own copy's tran codes. Agents, models,
 * skills, triggers and clients stay the bank's one set. Returns the project's folder.
 */
export function bankTimes(copies: number): string {
  const dir = mkdtempSync(join(tmpdir(), `tally-bank-x${copies}-`));
  cpSync(BANK, dir, { recursive: true });
  const read = (file: string) => JSON.parse(readFileSync(join(BANK, file), 'utf8'));
  const accounts = read('accounts.json');
  const sets = read('account-sets.json');
  const velocity = read('velocity.json');
  const tranCodes = readdirSync(join(BANK, 'tran-codes')).map((f) => basename(f, '.json'));
  const tools = readdirSync(join(BANK, 'tools'))
    .filter((f) => f.endsWith('.js'))
    .map((f) => basename(f, '.js'));
  for (let k = 1; k < copies; k++) {
    // A copy's ids: b0000000-… becomes b00000kk-… (hex; copies up to 99).
    const ids = (text: string) => text.replace(/b0000000-/g, `b00000${String(k).padStart(2, '0')}-`);
    const copy = <T>(value: T): T => JSON.parse(ids(JSON.stringify(value)));
    accounts.push(...copy(read('accounts.json')).map((a: any) => ({ ...a, code: `${a.code}-${k}` })));
    sets.push(...copy(read('account-sets.json')).map((s: any) => ({ ...s, code: `${s.code}-${k}` })));
    const v = copy(read('velocity.json'));
    velocity.limits.push(...v.limits);
    velocity.controls.push(...v.controls);
    const renamed = (text: string) => {
      let out = ids(text);
      for (const code of tranCodes) out = out.replace(new RegExp(`(['"])${code}\\1`, 'g'), `$1${code}_${k}$1`);
      for (const tool of tools) {
        out = out
          .replace(new RegExp(`"name": "${tool}"`, 'g'), `"name": "${tool}_${k}"`)
          .replace(new RegExp(`\\btools\\.${tool}\\(`, 'g'), `tools.${tool}_${k}(`);
        out = out.replace(new RegExp(`(== ')${tool}(')`, 'g'), `$1${tool}_${k}$2`);
      }
      return out;
    };
    for (const code of tranCodes)
      writeFileSync(
        join(dir, 'tran-codes', `${code}_${k}.json`),
        renamed(readFileSync(join(BANK, 'tran-codes', `${code}.json`), 'utf8')),
      );
    for (const tool of tools) {
      for (const ext of ['.js', '.json']) {
        const text = readFileSync(join(BANK, 'tools', `${tool}${ext}`), 'utf8');
        writeFileSync(
          join(dir, 'tools', `${tool}_${k}${ext}`),
          ext === '.json' ? renamed(text).replace(/"aliases": \[[^\]]*\],?/, '') : renamed(text),
        );
      }
    }
  }
  writeFileSync(join(dir, 'accounts.json'), JSON.stringify(accounts, null, 2));
  writeFileSync(join(dir, 'account-sets.json'), JSON.stringify(sets, null, 2));
  writeFileSync(join(dir, 'velocity.json'), JSON.stringify(velocity, null, 2));
  return dir;
}

export function removeProject(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}
