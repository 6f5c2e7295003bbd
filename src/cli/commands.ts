/*
 * The commands main.ts runs, imported when a command runs (so --help and usage errors answer at
 * once), each from its family's file.
 */

export { requireDatabase } from './connect.js';
export { deployCommand } from './deploy-command.js';
export { executionCommand, executionsCommand, runCommand } from './execution-commands.js';
export { gqlCommand } from './gql-command.js';
export { mcpImportCommand } from './mcp-import-command.js';
export {
  accountsCommand,
  balanceCommand,
  importCommand,
  postCommand,
  transactionsCommand,
  voidCommand,
} from './ledger-commands.js';
