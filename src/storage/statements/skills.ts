import type { Db } from '../database.js';

export interface SkillRow {
  skill_id: string;
  name: string;
  latest_version: number;
  created: string;
  modified: string;
}

export interface SkillVersionRow {
  skill_id: string;
  version: number;
  description: string;
  body: string;
  /** JSON: the tool names. */
  tools: string;
  created: string;
}

/** Every SQL statement of skills, prepared once per engine. */
export function skillStatements(db: Db) {
  return {
    skillById: db.prepare<[string], SkillRow>('SELECT * FROM skills WHERE skill_id = ?'),
    skillByName: db.prepare<[string], SkillRow>('SELECT * FROM skills WHERE name = ?'),
    skillsPage: db.prepare<[number, number], SkillRow & { rowid: number }>(
      'SELECT rowid, * FROM skills WHERE rowid > ? ORDER BY rowid LIMIT ?',
    ),
    insertSkill: db.prepare<[SkillRow]>(
      'INSERT INTO skills (skill_id, name, latest_version, created, modified) VALUES (@skill_id, @name, @latest_version, @created, @modified)',
    ),
    updateSkillLatest: db.prepare<[number, string, string]>(
      'UPDATE skills SET latest_version = ?, modified = ? WHERE skill_id = ?',
    ),
    version: db.prepare<[string, number], SkillVersionRow>(
      'SELECT * FROM skill_versions WHERE skill_id = ? AND version = ?',
    ),
    insertVersion: db.prepare<[SkillVersionRow]>(
      `INSERT INTO skill_versions (skill_id, version, description, body, tools, created)
       VALUES (@skill_id, @version, @description, @body, @tools, @created)`,
    ),
  };
}

export type SkillStatements = ReturnType<typeof skillStatements>;
