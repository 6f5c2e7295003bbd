import { onlyArg, parseJsonOption, readArgFile } from './args.js';
import { openTarget } from './connect.js';
import { EXIT, UsageError } from './errors.js';
import type { Io, Options } from './io.js';

/*
 * tally gql: any GraphQL document (a file, or standard input) against the target, the response
 * printed whole.
 */

/** tally gql <file|->: the whole GraphQL response, as the server gave it; exit 1 when it has errors. */
export async function gqlCommand(args: string[], options: Options, io: Io): Promise<number> {
  const source = onlyArg(args, 'document');
  if (!source) throw new UsageError('say which document: a file, or - to read it from standard input');
  const variables = parseJsonOption(options.variables, 'variables');
  if (variables !== undefined && (variables === null || typeof variables !== 'object' || Array.isArray(variables)))
    throw new UsageError('--variables must be a JSON object');
  const document = source === '-' ? await (io.stdin ?? readStdin)() : readArgFile(source, 'document');
  if (document.trim() === '')
    throw new UsageError(`the document ${source === '-' ? 'on standard input' : JSON.stringify(source)} is empty`);
  const target = await openTarget(options, io);
  try {
    const result = await target.request(document, variables as Record<string, unknown> | undefined);
    io.out(`${JSON.stringify(result, null, 2)}\n`);
    return result.errors?.length ? EXIT.failed : EXIT.ok;
  } finally {
    await target.close();
  }
}

async function readStdin(): Promise<string> {
  let text = '';
  for await (const chunk of process.stdin) text += String(chunk);
  return text;
}
